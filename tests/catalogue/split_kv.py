"""The catalogue of split_kv: its mistakes (with the cause each must be named by, a key of CAUSES in
autograder/suites/test_split_kv.py, and the tests it may fail), correct alternatives and degenerate
answers."""

from functools import partial

from tests.catalogue.entries import Degenerate, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("decoding")["split_kv"]
changed = partial(edited, SOLUTION)
COMBINE = SOLUTION[SOLUTION.index("def combine_chunks"):]
CHUNKS = ("chunks_match_attention", "chunk_counts_that_do_not_divide", "fully_masked_chunk")


MISTAKES = [
    Mistake("a chunk's logsumexp without its maximum", "lse_no_max",
            fails=CHUNKS + ("bfloat16_in_float32",),
            code=changed("lses.append(m.squeeze(-1) + torch.log(total))", "lses.append(torch.log(total))")),
    Mistake("a chunk without a visible key left as NaN", "masked_nan",
            fails=("fully_masked_chunk",),
            code=changed("        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))             # no visible key: exp(-inf - 0) = 0\n",
                         "")),
    Mistake("chunks of S // num_splits positions, the last one taking the rest", "chunk_size",
            fails=("chunk_counts_that_do_not_divide", "fully_masked_chunk"),
            code=changed("size = math.ceil(length / num_splits)", "size = length // num_splits",
                         "        s = scores[..., j * size:(j + 1) * size]",
                         "        end = (j + 1) * size if j < num_splits - 1 else length\n"
                         "        s = scores[..., j * size:end]",
                         "v[..., j * size:(j + 1) * size, :]", "v[..., j * size:end, :]")),
    Mistake("chunks combined by averaging their outputs", "averaged",
            fails=("combine_is_exact", "fully_masked_chunk", "chunks_far_apart", "bfloat16_in_float32"),
            code=changed("return (weights[..., None] * out_chunks).sum(dim=-2), lse", "return out_chunks.mean(dim=-2), lse")),
    Mistake("the first chunk's logsumexp as everyone's reference", "one_max",
            fails=("chunks_far_apart",),
            code=changed("""    lse = torch.logsumexp(lse_chunks, dim=-1)                  # [B, H]; a -inf chunk adds nothing
    weights = torch.exp(lse_chunks - lse[..., None])           # each chunk's share of the softmax, summing to 1
    return (weights[..., None] * out_chunks).sum(dim=-2), lse""",
                         """    weights = torch.exp(lse_chunks - lse_chunks[..., :1])    # relative to the first chunk
    total = weights.sum(dim=-1)
    out = (weights[..., None] * out_chunks).sum(dim=-2) / total[..., None]
    return out, lse_chunks[..., 0] + torch.log(total)""")),
    Mistake("the arithmetic in bfloat16 for bfloat16 inputs", "low_precision",
            fails=("bfloat16_in_float32",),
            code=changed("    q, k, v = q.float(), k.float(), v.float()                                  # the arithmetic in float32\n",
                         "")),
]


ALTERNATIVES = [
    Alternative("a loop over chunks with torch.softmax, combined against the largest logsumexp", '''def attend_chunks(q, k, v, lengths, num_splits):
    B, H, S, D = k.shape
    size = -(-S // num_splits)
    out_chunks = torch.zeros(B, H, num_splits, D)
    lse_chunks = torch.full((B, H, num_splits), float("-inf"))
    for b in range(B):
        n = int(lengths[b])
        for j in range(num_splits):
            start, end = j * size, min((j + 1) * size, n)
            if start >= end:
                continue                          # no visible key: 0 and -inf
            s = torch.einsum("hd,hsd->hs", q[b].float(), k[b, :, start:end].float()) / D ** 0.5
            out_chunks[b, :, j] = torch.einsum("hs,hsd->hd", torch.softmax(s, dim=-1), v[b, :, start:end].float())
            lse_chunks[b, :, j] = torch.logsumexp(s, dim=-1)
    return out_chunks, lse_chunks


def combine_chunks(out_chunks, lse_chunks):
    m = lse_chunks.max(dim=-1).values
    w = torch.exp(lse_chunks - m[..., None])
    total = w.sum(dim=-1)
    return (w[..., None] * out_chunks).sum(dim=-2) / total[..., None], m + torch.log(total)


def split_kv_attention(q, k, v, lengths, num_splits):
    out, lse = combine_chunks(*attend_chunks(q, k, v, lengths, num_splits))
    return out.to(q.dtype), lse
'''),
    Alternative("every chunk at once: the scores padded to num_splits * size and reshaped", '''def attend_chunks(q, k, v, lengths, num_splits):
    B, H, S, D = k.shape
    size = math.ceil(S / num_splits)
    pad = num_splits * size - S
    s = torch.matmul(k.float(), q.float().unsqueeze(-1)).squeeze(-1) * D ** -0.5
    s = s.masked_fill(torch.arange(S)[None, None, :] >= lengths[:, None, None], float("-inf"))
    s = torch.nn.functional.pad(s, (0, pad), value=float("-inf")).reshape(B, H, num_splits, size)
    vv = torch.nn.functional.pad(v.float(), (0, 0, 0, pad)).reshape(B, H, num_splits, size, D)
    lse = torch.logsumexp(s, dim=-1)                                   # -inf where a chunk sees nothing
    p = torch.exp(s - lse.nan_to_num(neginf=0.0)[..., None])           # a row of zeros there
    return torch.matmul(p.unsqueeze(-2), vv).squeeze(-2), lse
''' + COMBINE),
]


DEGENERATES = [
    Degenerate("the mean of each chunk's values and a logsumexp of zeros", '''def attend_chunks(q, k, v, lengths, num_splits):
    B, H, S, D = k.shape
    size = math.ceil(S / num_splits)
    outs = [v[..., j * size:(j + 1) * size, :].float().mean(dim=-2) if j * size < S else torch.zeros(B, H, D)
            for j in range(num_splits)]
    return torch.stack(outs, dim=2), torch.zeros(B, H, num_splits)
''' + COMBINE),
    # One chunk left unwritten: the gate's single chunk gets a 0-d placeholder, which the suite must call
    # a wrong shape (the gate read the placeholder's chunks and raised inside the grader).
    Degenerate("a 0-d placeholder when num_splits == 1", SOLUTION.replace("def attend_chunks(", "def _attend_chunks(") + '''

def attend_chunks(q, k, v, lengths, num_splits):
    if num_splits == 1:
        return torch.zeros(()), torch.zeros(())
    return _attend_chunks(q, k, v, lengths, num_splits)
'''),
    Degenerate("zeros", '''def attend_chunks(q, k, v, lengths, num_splits):
    return torch.zeros(*q.shape[:2], num_splits, q.shape[-1]), torch.zeros(*q.shape[:2], num_splits)
''' + COMBINE),
]
