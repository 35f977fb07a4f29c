"""The catalogue of tiled_attention: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_tiled_attention.py, and the tests it may fail), correct variants
and degenerate answers."""

from functools import partial

from tests.catalogue.entries import Degenerate, Mistake, Variant, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("flash_attention")["tiled_attention"]
changed = partial(edited, SOLUTION)
CAUSAL_VALUES = ("causal", "causal_with_uneven_blocks")


DIRECT = '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)
'''

MISTAKES = [
    Mistake("the accumulated output not rescaled", "no_rescale",
            fails=("matches_attention", "lengths_the_blocks_do_not_divide", *CAUSAL_VALUES, "large_scores_stay_finite"),
            code=changed("acc = acc * rescale[..., None] + p @ v", "acc = acc + p @ v")),
    Mistake("the logsumexp of the last tile", "lse_last_tile",
            fails=("logsumexp",),
            code=changed("            l = l * rescale + p.sum(dim=-1)\n",
                         "            l_tile = p.sum(dim=-1)\n            l = l * rescale + l_tile\n",
                         "m + torch.log(l)", "m + torch.log(l_tile)")),
    Mistake("the logsumexp without the maximum", "lse_no_max",
            fails=("logsumexp",),
            code=changed("m + torch.log(l)", "torch.log(l)")),
    Mistake("only whole query tiles", "tail",
            fails=("lengths_the_blocks_do_not_divide", "causal_with_uneven_blocks"),
            code=changed("for i0 in range(0, Sq, block_q):", "for i0 in range(0, Sq - block_q + 1, block_q):",
                         "torch.empty(B, H, Sq, d_v", "torch.zeros(B, H, Sq, d_v")),
    Mistake("key tiles skipped after the tile's first query", "skip_from_first_query",
            fails=(*CAUSAL_VALUES, "logsumexp"),
            code=changed("last_key = min(Sk, i1) if causal else Sk", "last_key = min(Sk, i0 + 1) if causal else Sk")),
    Mistake("no mask inside the diagonal tiles", "no_diagonal_mask",
            fails=(*CAUSAL_VALUES, "logsumexp"),
            code=changed("if causal and j1 > i0 + 1:", "if False:")),
    Mistake("every key tile computed, masked", "no_skip",
            fails=("causal_skips_tiles_above_the_diagonal",),
            code=changed("last_key = min(Sk, i1) if causal else Sk", "last_key = Sk")),
    Mistake("the direct computation, one score matrix", "whole_matrix",
            fails=("memory_stays_below_one_score_matrix", "causal_skips_tiles_above_the_diagonal"),
            also_named=("no_skip",), code=DIRECT),
]


VARIANTS = [
    Variant("key tiles outside, every query's state kept", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    *lead, n_q, d = q.shape
    n_k = k.shape[-2]
    m = q.new_full((*lead, n_q, 1), float("-inf"))
    l = q.new_zeros(*lead, n_q, 1)
    acc = q.new_zeros(*lead, n_q, v.shape[-1])
    for start in range(0, n_k, block_k):
        end = min(start + block_k, n_k)
        for row in range(0, n_q, block_q):
            stop = min(row + block_q, n_q)
            if causal and start > stop - 1:
                continue
            s = torch.einsum("...qd,...kd->...qk", q[..., row:stop, :], k[..., start:end, :]) / d ** 0.5
            if causal:
                s = s.masked_fill(torch.arange(start, end)[None, :] > torch.arange(row, stop)[:, None], float("-inf"))
            top = torch.maximum(m[..., row:stop, :], s.max(dim=-1, keepdim=True).values)
            p = (s - top).exp()
            factor = (m[..., row:stop, :] - top).exp()
            l[..., row:stop, :] = l[..., row:stop, :] * factor + p.sum(-1, keepdim=True)
            acc[..., row:stop, :] = acc[..., row:stop, :] * factor + p @ v[..., start:end, :]
            m[..., row:stop, :] = top
    return acc / l, (m + l.log()).squeeze(-1)
'''),
    Variant("merging tile results through their logsumexp", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    outs, lses = [], []
    n_q, n_k = q.shape[-2], k.shape[-2]
    for i in range(0, n_q, block_q):
        qi = q[..., i:i + block_q, :] / math.sqrt(q.shape[-1])
        rows = torch.arange(i, min(i + block_q, n_q))
        out, lse = None, None
        for j in range(0, min(n_k, rows[-1].item() + 1) if causal else n_k, block_k):
            s = qi @ k[..., j:j + block_k, :].transpose(-2, -1)
            if causal:
                s = s.masked_fill(torch.arange(j, min(j + block_k, n_k)) > rows[:, None], -math.inf)
            tile_lse = torch.logsumexp(s, dim=-1)                  # -inf for a row with every key hidden
            safe = torch.where(torch.isinf(tile_lse), torch.zeros_like(tile_lse), tile_lse)
            tile_out = torch.exp(s - safe[..., None]) @ v[..., j:j + block_k, :]
            if out is None:
                out, lse = tile_out, tile_lse
            else:
                new_lse = torch.logaddexp(lse, tile_lse)
                out = out * torch.exp(lse - new_lse)[..., None] + tile_out * torch.exp(tile_lse - new_lse)[..., None]
                lse = new_lse
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
'''),
]


DEGENERATES = [
    Degenerate("uniform weights", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    B, H, Sq, _ = q.shape
    out = v.mean(dim=-2, keepdim=True).expand(B, H, Sq, v.shape[-1]).clone()
    return out, torch.full((B, H, Sq), math.log(k.shape[-2]), dtype=q.dtype)
'''),
    Degenerate("zeros", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    return q.new_zeros(*q.shape[:-1], v.shape[-1]), q.new_zeros(q.shape[:-1])
'''),
    Degenerate("NaN", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    return q.new_full((*q.shape[:-1], v.shape[-1]), float("nan")), q.new_full(q.shape[:-1], float("nan"))
'''),
    Degenerate("scores that ignore the queries", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    s = k.sum(dim=-1)[..., None, :].expand(*q.shape[:-1], k.shape[-2])
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)
'''),
]
