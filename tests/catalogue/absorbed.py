"""The catalogue of absorbed (absorbed_attention): its mistakes (with the cause each must be named by,
a key of CAUSES in autograder/suites/test_absorbed.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from functools import partial

from autograder.suites.test_absorbed import CAUSES
from tests.catalogue.entries import Degenerate, Gaming, Mistake, Alternative, edited
from tests.catalogue.rope import MISTAKES as ROPE_MISTAKES
from tests.notebooks import solution_answers

SOLUTION = solution_answers("latent_attention")["absorbed"]
changed = partial(edited, SOLUTION)
# The FLOPs are counted on a correct answer only (its values come first): a mistake in the values of
# that call (one new token after 512 cached) costs the counted points too.
COUNTED = "never_up_projects_the_cache"


MISTAKES = [
    Mistake("nn.Linear's weight read as [in, out]", "in_out",
            fails=("whole_sequence_equals_the_naive_path", COUNTED),
            code=changed("W_uk = mla.W_uk.weight.view(H, d_head, d_latent)",
                         "W_uk = mla.W_uk.weight.reshape(d_latent, H, d_head).permute(1, 2, 0)",
                         "W_uv = mla.W_uv.weight.view(H, d_head, d_latent)",
                         "W_uv = mla.W_uv.weight.reshape(d_latent, H, d_head).permute(1, 2, 0)")),
    Mistake("the new queries turned from position 0", "positions_from_zero",
            fails=("new_tokens_are_turned_at_their_positions", COUNTED),
            code=changed("positions = torch.arange(T - S, T)", "positions = torch.arange(S)")),
    Mistake("a mask without the offset", "no_offset",
            # one new token after the cache is hidden from it as well: the same property
            fails=("new_tokens_see_the_whole_cache", "new_tokens_are_turned_at_their_positions", COUNTED),
            code=changed("tril(diagonal=T - S)", "tril()")),
    Mistake("the cache up-projected (the naive path)", "up_projects",
            fails=("never_up_projects_the_cache",),
            code=changed("    q_latent = q @ W_uk                                                                 # [B, H, S, d_latent]\n",
                         "    keys = (cache_latent @ mla.W_uk.weight.T).view(B, T, H, d_head).transpose(1, 2)\n"
                         "    q_latent = None\n",
                         "    scores = (q_latent @ latent.transpose(-2, -1)\n",
                         "    scores = (q @ keys.transpose(-2, -1)\n")),
]


ALTERNATIVES = [
    Alternative("W_uv folded into W_o ahead of time, einsum", '''def absorbed_attention(mla, x_new, cache_latent, cache_rope):
    B, S, _ = x_new.shape
    T = cache_latent.shape[1]
    H, dh, dl, dr = mla.num_heads, mla.d_head, mla.d_latent, mla.d_rope
    pos = torch.arange(T - S, T)
    q = mla.W_q(x_new).view(B, S, H, dh)
    qr = apply_rope(mla.W_qr(x_new).view(B, S, H, dr).transpose(1, 2), pos)
    w_uk = mla.W_uk.weight.view(H, dh, dl)
    w_o_latent = torch.einsum("mhd,hdl->hml", mla.W_o.weight.view(-1, H, dh), mla.W_uv.weight.view(H, dh, dl))
    scores = torch.einsum("bshd,hdl,btl->bhst", q, w_uk, cache_latent) + torch.einsum("bhsr,btr->bhst", qr, cache_rope)
    scores = scores / math.sqrt(dh + dr)
    causal = torch.arange(T)[None, :] > torch.arange(T - S, T)[:, None]
    weights = scores.masked_fill(causal, float("-inf")).softmax(-1)
    context = torch.einsum("bhst,btl->bhsl", weights, cache_latent)
    return torch.einsum("bhsl,hml->bsm", context, w_o_latent)
'''),
    Alternative("a loop over the heads", '''def absorbed_attention(mla, x_new, cache_latent, cache_rope):
    B, S, _ = x_new.shape
    T = cache_latent.shape[1]
    H, dh, dr = mla.num_heads, mla.d_head, mla.d_rope
    queries = mla.W_q(x_new)
    rope_queries = apply_rope(mla.W_qr(x_new).reshape(B, S, H, dr).transpose(1, 2), torch.arange(T - S, T))
    mask = torch.ones(S, T, dtype=torch.bool).tril(T - S)
    outputs = []
    for h in range(H):
        w_uk = mla.W_uk.weight[h * dh:(h + 1) * dh]          # [d_head, d_latent]
        w_uv = mla.W_uv.weight[h * dh:(h + 1) * dh]
        q_lat = queries[..., h * dh:(h + 1) * dh] @ w_uk       # [B, S, d_latent]
        s = (q_lat @ cache_latent.transpose(1, 2) + rope_queries[:, h] @ cache_rope.transpose(1, 2)) / (dh + dr) ** 0.5
        w = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
        outputs.append((w @ cache_latent) @ w_uv.T)            # [B, S, d_head]
    return mla.W_o(torch.cat(outputs, dim=-1))
'''),
]

# A slip of apply_rope, an exercise of its own (rope), is charged there alone: a right absorbed_attention on the student's
# own wrong apply_rope keeps its points (test_absorbed.BUILT_ON).
ALTERNATIVES += [Alternative(f"a right absorbed_attention on apply_rope {slip.name!r} (rope's own slip)", slip.code + "\n\n" + SOLUTION)
                 for slip in ROPE_MISTAKES if slip.cause in ("clockwise", "half_split")]


DEGENERATES = [
    Degenerate("zeros", '''def absorbed_attention(mla, x_new, cache_latent, cache_rope):
    return torch.zeros_like(x_new)
'''),
    Degenerate("NaN", '''def absorbed_attention(mla, x_new, cache_latent, cache_rope):
    return torch.full_like(x_new, float("nan"))
'''),
    Degenerate("the mean of the cached latents, every query alike", '''def absorbed_attention(mla, x_new, cache_latent, cache_rope):
    B, S, _ = x_new.shape
    H, dh, dl = mla.num_heads, mla.d_head, mla.d_latent
    mean = cache_latent.mean(dim=1, keepdim=True).unsqueeze(1).expand(B, H, S, dl)
    heads = mean @ mla.W_uv.weight.view(H, dh, dl).transpose(-2, -1)
    return mla.W_o(heads.transpose(1, 2).reshape(B, S, H * dh))
'''),
]

# The naive path: the cache up-projected to per-head keys and values, written the ways that the count
# must still see (or refuse).
_NAIVE = '''def absorbed_attention(mla, x_new, cache_latent, cache_rope):
    B, S, _ = x_new.shape
    T = cache_latent.shape[1]
    H, d_head, d_latent, d_rope = mla.num_heads, mla.d_head, mla.d_latent, mla.d_rope
    positions = torch.arange(T - S, T)
    q = mla.W_q(x_new).view(B, S, H, d_head).transpose(1, 2)
    q_rope = apply_rope(mla.W_qr(x_new).view(B, S, H, d_rope).transpose(1, 2), positions)
    k, v = UP_PROJECT(cache_latent, mla.W_uk.weight), UP_PROJECT(cache_latent, mla.W_uv.weight)
    k, v = (t.view(B, T, H, d_head).transpose(1, 2) for t in (k, v))
    scores = (q @ k.transpose(-2, -1) + q_rope @ cache_rope.unsqueeze(1).transpose(-2, -1)) / math.sqrt(d_head + d_rope)
    allowed = torch.ones(S, T, dtype=torch.bool).tril(diagonal=T - S)
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    return mla.W_o((weights @ v).transpose(1, 2).reshape(B, S, H * d_head))
'''


def naive_with(up_project, prelude=""):
    return prelude + _NAIVE.replace("UP_PROJECT", up_project)


GAMING = [
    Gaming("the cache up-projected in NumPy", naive_with(
        "(lambda c, w: torch.from_numpy(c.detach().numpy() @ w.detach().numpy().T))"),
        loses=(COUNTED,), says="NumPy"),
    # The numbers taken out of torch without Tensor.numpy (torch.save to a file, read back by np.fromfile) and
    # the product done in NumPy: what comes back is memory torch did not allocate, refused in a counted call.
    Gaming("the cache up-projected in NumPy on the bytes torch.save wrote", naive_with("_saved_product", '''import os

import numpy


def _saved(t):
    kept = t.detach().contiguous().clone()
    path = os.path.join(os.getcwd(), "saved.pt")
    torch.save(kept, path, _use_new_zipfile_serialization=False)
    numbers = numpy.fromfile(path, dtype=numpy.uint8)[-kept.element_size() * kept.numel():]
    return numbers.view(str(kept.dtype).replace("torch.", "")).reshape(kept.shape)


def _saved_product(c, w):
    return torch.from_numpy(_saved(c) @ _saved(w).T)


'''), loses=(COUNTED,), says="work was done outside torch"),
    Gaming("the cache up-projected with element-wise products", naive_with(
        "(lambda c, w: (c[..., None, :] * w).sum(-1))"),
        loses=(COUNTED,), says=CAUSES["up_projects"]),
    Gaming("the cache up-projected by a 1-D convolution with a kernel of 1", naive_with(
        "(lambda c, w: torch.nn.functional.conv1d(c.transpose(1, 2), w[:, :, None]).transpose(1, 2))"),
        loses=(COUNTED,), says=CAUSES["up_projects"]),
    Gaming("the cache up-projected in NumPy, reached through Python lists", naive_with(
        "(lambda c, w: torch.tensor(numpy.array(c.tolist()) @ numpy.array(w.tolist()).T, dtype=c.dtype))",
        "import numpy\n\n\n"),
        loses=(COUNTED,), says="Python list"),
    Gaming("the cache up-projected with einsum", naive_with(
        "(lambda c, w: torch.einsum('btl,ol->bto', c, w))"),
        loses=(COUNTED,), says=CAUSES["up_projects"]),
    Gaming("the cache up-projected in a thread", naive_with("_in_thread", '''import threading


def _in_thread(c, w):
    found = []
    thread = threading.Thread(target=lambda: found.append(c @ w.T))
    thread.start()
    thread.join()
    return found[0]


'''), loses=(COUNTED,), says="thread"),
]
