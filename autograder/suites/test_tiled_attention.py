"""Hidden tests for flash_attention(q, k, v, causal=False, block_q=64, block_k=64) -> (out, lse).

Values are compared with the grader's attention; the causal tile skip is read from the matrix
products' floating-point operations (counted in the student's process); the memory is read from
outside the student's process (docs/measured.md), on inputs long enough that one [Sq, Sk]
score matrix stands out."""

import math

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers.common import (B, D_K, D_V, H, SK, SQ, attention, check_inputs_unchanged,
                                              crash_hint, named, pick, qkv, tril)
from autograder.suites.helpers.stored import stored
from autograder.suites.helpers.tiled import (MEMORY_BLOCK, MEMORY_N, PRECISION_SIZED, check_measured_values,
                                             check_memory, check_work, logsumexp, memory_reference, relative_error,
                                             tiled_attention)


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "no_rescale": "an accumulated output that is not rescaled by exp(m - m_new) when the running maximum grows",
    "lse_last_tile": "a logsumexp from the last tile's sum alone instead of the running sum over every tile",
    "lse_no_max": "a logsumexp of log(l) without adding back the running maximum m",
    "tail": "The last tile is shorter when the block does not divide the length: take q[..., i:i + block_q] up to "
            "the end (range(0, S, block)), not only whole blocks.",
    "skip_from_first_query": "a key tile skipped when it starts after the query tile's first query; it is needed "
                             "until it starts after the tile's last query",
    "no_diagonal_mask": "no mask inside the tiles on the diagonal (key j > query i must get no weight)",
    "no_skip": "Tiles that lie wholly above the diagonal (every key after every query of the tile) need not be "
               "computed: stop the loop over key tiles at the query tile's end.",
    "whole_matrix": "The whole [Sq, Sk] score matrix was held at once: work tile by tile, holding one tile at "
                    "a time.",
    "causal_whole": "The causal path held a whole [Sq, Sk] matrix (a mask built with torch.ones(Sq, Sk).triu(), or "
                    "the scores masked at once): mask inside each diagonal tile, from the tile's own positions "
                    "(torch.arange(j0, j1) > torch.arange(i0, i1)[:, None]).",
    "dtypes": "out comes back in the inputs' dtype, and lse too for float32 and float64 inputs: make the buffers "
              "(torch.empty, torch.zeros, torch.full) in the accumulation dtype, torch.promote_types(q.dtype, "
              "torch.float32), not in torch's default float32",
    "half_state": "the scores, m, l, acc or lse kept in the inputs' 16-bit dtype (float16 or bfloat16) instead of the "
                  "accumulation dtype float32",
    "in_place": "an in-place operation on an input (q *= scale, q[...] /= ...) changes the caller's tensor: "
                "scale a copy (q * scale) instead",
    "shapes": "q is [B, H, Sq, d], k [B, H, Sk, d], v [B, H, Sk, d_v]; a tile of scores is "
              "q_tile @ k_tile.transpose(-2, -1).",
}
# What to do about half_state, the statement's rule: said beside the cause.
HALF_RULE = ("For float16 and bfloat16 inputs, cast each tile to the accumulation dtype torch.promote_types(q.dtype, "
             "torch.float32) before its products, keep m, l, acc and lse in it, and round only out to the inputs' "
             "dtype.")
HALF_DTYPES = ((torch.bfloat16, 14), (torch.float16, 16))   # every 16-bit dtype the statement names, with a seed
BLOCK_Q, BLOCK_K = 32, 16
DEFAULT_BLOCK = 64  # the statement's block_q and block_k


def flash(student, q, k, v, causal=False, block_q=BLOCK_Q, block_k=BLOCK_K, **options):
    """(out, lse, the reply) of the student's flash_attention; block_q=None leaves both blocks at the
    statement's defaults (the call passes q, k, v and causal only)."""
    blocks = () if block_q is None else (block_q, block_k)
    with crash_hint(CAUSES["shapes"]):
        reply = student.call("flash_attention", q, k, v, causal, *blocks, **options)
    out, lse = checks.pair(reply["output"], "flash_attention(q, k, v)", ("out", "lse"))
    return checks.tensor(out, "out"), checks.tensor(lse, "lse"), reply


def mistaken(q, k, v, causal, block_q, block_k, mistake):
    """(out, lse) of a named mistake, tiled as the statement says."""
    return tiled_attention(q, k, v, causal, block_q, block_k, mistake)


def mistakes(q, k, v, causal, block_q, block_k):
    """The named mistakes' (out, lse), by their causes."""
    keys = ["no_rescale", "lse_last_tile", "lse_no_max"] + (["skip_from_first_query", "no_diagonal_mask"]
                                                            if causal else [])
    return named(CAUSES, **{key: mistaken(q, k, v, causal, block_q, block_k, key) for key in keys})


def named_mistakes(q, k, v, causal, block_q, block_k, index):
    return pick(mistakes(q, k, v, causal, block_q, block_k), index)


def inputs(sq, sk, seed, d=D_K, d_v=D_V, dtype=torch.float64, scale=1.0):
    q, k, v = qkv(sq=sq, sk=sk, d_k=d, d_v=d_v, dtype=dtype, seed=seed)
    return q * scale, k, v


def compare_output(student, q, k, v, what, causal=False, block_q=BLOCK_Q, block_k=BLOCK_K, hint=""):
    out, _, _ = flash(student, q, k, v, causal, block_q, block_k)
    mask = tril(q.shape[-2], k.shape[-2]) if causal else None
    checks.close(out, attention(q, k, v, mask)[0], f"out ({what})", hint,
                 lambda: named_mistakes(q, k, v, causal, block_q, block_k, 0))


def tile_skip_flops(n, d, d_v, block_q, block_k):
    """The matrix products' FLOPs of causal tiled attention that skips every tile wholly above the
    diagonal (and computes all the others whole)."""
    total = 0
    for i0 in range(0, n, block_q):
        i1 = min(i0 + block_q, n)
        keys = min(n, math.ceil(i1 / block_k) * block_k)
        total += 2 * (i1 - i0) * keys * (d + d_v)
    return total


def test_computes_attention(student):
    """The gate: with the identity as the values, the output is the weights; they must be attention's.
    One tile holds everything here, so a slip in the tiling (kept for the tests of that) does not hide
    that the answer computes attention."""
    def call(q, k, v):
        eye = torch.eye(k.shape[-2], dtype=k.dtype).expand(*k.shape[:-1], k.shape[-2])
        return flash(student, q, k, v, block_q=64, block_k=64)[0], flash(student, q, k, eye, block_q=64, block_k=64)[0]
    substance.attention_function(call, *inputs(64, 48, seed=1))


def test_returns_output_and_logsumexp(student):
    q, k, v = inputs(SQ, SK, seed=2)
    out, lse, reply = flash(student, q, k, v, echo_args=True)
    check_inputs_unchanged(reply, (q, k, v), ("q", "k", "v"), "flash_attention", CAUSES["in_place"])
    checks.shape(out, (B, H, SQ, D_V), "out", "One output row of width d_v per query.")
    checks.shape(lse, (B, H, SQ), "lse", "One logsumexp per query: [B, H, Sq].")


def test_keeps_the_dtypes(student):
    """out in the inputs' dtype; lse too for float32 and float64 inputs (float64 is its own accumulation
    dtype, so buffers made in torch's default float32 round it)."""
    for dtype, seed in ((torch.float32, 3), (torch.float64, 13), (torch.bfloat16, 15), (torch.float16, 17)):
        out, lse, _ = flash(student, *(t.to(dtype) for t in inputs(SQ, SK, seed=seed)))
        checks.dtype(out, dtype, f"out ({dtype})", CAUSES["dtypes"])
        if dtype.itemsize > 2:
            checks.dtype(lse, dtype, f"lse ({dtype})", CAUSES["dtypes"])


def half_precision_mistakes(q, k, v, index):
    """The named mistakes on 16-bit inputs: the whole computation in the inputs' dtype, and the value
    mistakes computed in float32 (their own causes, not the precision's); out (index 0) rounded to the
    inputs' dtype, lse (1) in float32, as the answer's are compared."""
    wide = [t.float() for t in (q, k, v)]
    found = {key: mistaken(*wide, False, BLOCK_Q, BLOCK_K, key)[index]
             for key in ("no_rescale", "lse_last_tile", "lse_no_max")}
    found["half_state"] = mistaken(q, k, v, False, BLOCK_Q, BLOCK_K, None)[index]
    wanted = q.dtype if index == 0 else torch.float32
    return named(CAUSES, **{key: value.to(wanted) for key, value in found.items()})


def test_half_precision_keeps_the_state_in_float32(student):
    """float16 and bfloat16 inputs, each: lse in float32 and as exact as float32 allows (the scores, m and l
    held in bfloat16 put it off by about 3e-2 here, in float16 by about 4e-3, every weight rebuilt from it
    by as much), and out right to the inputs' precision.  An lse that is wrong otherwise than a named
    value mistake, by no more than precision can make (PRECISION_SIZED), is put down to the state's dtype:
    the float64 tests check the arithmetic itself."""
    for dtype, seed in HALF_DTYPES:
        q, k, v = (t.to(dtype) for t in inputs(256, 256, seed=seed, d=32, d_v=32, scale=2.0))
        out, lse, _ = flash(student, q, k, v)
        hint = f"{checks.likely(CAUSES['half_state'])} {HALF_RULE}"
        checks.dtype(lse, torch.float32, f"lse ({dtype} inputs)", hint, inputs=dtype)
        wide = [t.double() for t in (q, k, v)]
        for index, value, want, name in ((1, lse, logsumexp(*wide[:2]).float(), "lse"),
                                         (0, out.to(dtype), attention(*wide)[0].to(dtype), "out")):
            checks.shape(value, want.shape, f"{name} ({dtype} inputs)")   # before relative_error reads it
            checks.close(value, want, f"{name} ({dtype} inputs)",
                         hint if relative_error(value, want) <= PRECISION_SIZED else "",
                         lambda: half_precision_mistakes(q, k, v, index))


def test_matches_attention(student):
    compare_output(student, *inputs(64, 96, seed=4), "64 queries, 96 keys, blocks of 32 and 16",
                   hint="Each new tile: m_new = max(m, rowmax(S)); P = exp(S - m_new); l = l * exp(m - m_new) + "
                        "rowsum(P); acc = acc * exp(m - m_new) + P @ V; at the end out = acc / l.")


def test_logsumexp(student):
    for causal, seed in ((False, 5), (True, 6)):
        q, k, v = inputs(64, 64 if causal else 80, seed=seed)
        _, lse, _ = flash(student, q, k, v, causal)
        want = logsumexp(q, k, tril(64) if causal else None)
        checks.close(lse, want, f"lse ({'causal' if causal else 'not causal'})", "lse = m + log(l) after the last tile.",
                     lambda: named_mistakes(q, k, v, causal, BLOCK_Q, BLOCK_K, 1))


def test_lengths_the_blocks_do_not_divide(student):
    compare_output(student, *inputs(70, 45, seed=7), "70 queries, 45 keys, blocks of 32 and 16",
                   hint=CAUSES["tail"])


def test_causal(student):
    compare_output(student, *inputs(64, 64, seed=8), "causal, 64 tokens, blocks of 32 and 16", causal=True,
                   hint="With causal=True, query i attends to keys j <= i.")


def test_causal_with_uneven_blocks(student):
    compare_output(student, *inputs(70, 70, seed=9), "causal, 70 tokens, blocks of 32 and 24", causal=True,
                   block_q=32, block_k=24, hint="With causal=True, query i attends to keys j <= i.")


def every_score_flops(n, d, d_v):
    """The matrix products' FLOPs of causal attention that computes exactly the scores it needs."""
    return sum(2 * (i + 1) * (d + d_v) for i in range(n))


def test_causal_skips_tiles_above_the_diagonal(student):
    """One counted call: its values first, then its products' FLOPs between what every needed score
    takes and what the tile skip takes (a quarter more for the element-wise products of the online
    softmax); computing every key tile takes about 1.65 times the skip here."""
    n, block_q, block_k = 72, 16, 8
    q, k, v = inputs(n, n, seed=10, d=8, d_v=8)
    out, _, reply = flash(student, q, k, v, True, block_q, block_k, count=True)
    checks.close(out, attention(q, k, v, tril(n))[0], f"out of the counted call (causal, {n} tokens)",
                 "The counted call must first give the right answer: the work of a wrong answer earns nothing.",
                 lambda: named_mistakes(q, k, v, True, block_q, block_k, 0))
    heads = q.shape[0] * q.shape[1]
    skip = heads * tile_skip_flops(n, 8, 8, block_q, block_k)
    check_work(reply, f"flash_attention(causal=True) on {n} tokens with blocks of {block_q} and {block_k}",
                 low=int(0.9 * heads * every_score_flops(n, 8, 8)), high=int(1.25 * skip),
                 observed=f"skipping the tiles above the diagonal needs {skip:,} in its matrix products.",
                 too_much=CAUSES["no_skip"])


def test_large_scores_stay_finite(student):
    compare_output(student, *inputs(64, 48, seed=11, scale=40.0), "queries scaled by 40",
                   hint="Subtract the running maximum before exp.")


def prepare():
    """The grader's answers on the memory inputs, once before the grading processes fork (plugin.py)."""
    for causal in (False, True):
        memory_reference(12, causal)


@stored
def memory_input_mistakes(causal=False):
    """The named mistakes' (out, lse) on the memory input, tiled as the call is: the same for every
    submission, so worked out once (and stored: stored.py), and only when an answer is wrong there."""
    q, k, v, *_ = memory_reference(12, causal)
    block = DEFAULT_BLOCK if causal else MEMORY_BLOCK
    return mistakes(q, k, v, causal, block, block)


def memory_mistakes_of(causal):
    """mistakes_of(index) for check_measured_values: the named mistakes' out (index 0) or lse (1)."""
    return lambda index: pick(memory_input_mistakes(causal), index)


def test_memory_stays_below_one_score_matrix(student):
    """One measured call, in a fresh child: its values first, then what the kernel charged the child."""
    q, k, v, *want = memory_reference(12)
    block = MEMORY_BLOCK
    out, lse, reply = flash(student, q, k, v, False, block, block, measure_memory=True)
    check_measured_values((out, lse), want, f"flash_attention on the {MEMORY_N}-token memory input", ("out", "lse"),
                            memory_mistakes_of(causal=False))
    check_memory(reply, "flash_attention", (q, k, v, out, lse), "score matrix", CAUSES["whole_matrix"])


def test_causal_memory_stays_below_one_score_matrix(student):
    """The causal path, measured as the other: flash_attention(q, k, v, causal=True) with the statement's
    default blocks (64), so a causal path that builds a whole [S, S] mask or score matrix, or defaults
    that are not the statement's small tiles, shows."""
    q, k, v, *want = memory_reference(12, causal=True)
    out, lse, reply = flash(student, q, k, v, True, None, measure_memory=True)
    check_measured_values((out, lse), want, f"flash_attention(causal=True) on the {MEMORY_N}-token memory input",
                            ("out", "lse"), memory_mistakes_of(causal=True))
    check_memory(reply, "flash_attention(causal=True)", (q, k, v, out, lse), "score matrix", CAUSES["causal_whole"],
                   blocks=f"the default blocks of {DEFAULT_BLOCK}")
