"""Hidden tests for triton_flash_attention(q, k, v, causal=False, block_m=32, block_n=32) -> (out, lse),
by the student's flash_attention_kernel.

Values are compared with the grader's attention over shapes, dtypes, memory layouts and block sizes
the grader chooses.  The kernel runs in Triton's interpreter in the student's process, which counts
what the call's kernels did (docs/kernels.md): the elements their loads address show the causal
tile skip, their products show that the kernel did the work; a load or store outside every tensor
of the launch stops the kernel with OutOfBounds.  The strided test's inputs are transposed views and
views into NaN-padded tensors, so an address from a contiguous layout shows in the values."""

import math

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers import kernels
from autograder.suites.helpers.common import check_inputs_unchanged, counted, crash_hint, named
from autograder.suites.helpers.kernels import (OUT_OF_BOUNDS, TRITON_CRASHES, check_kernel_work, kernel_qkv,
                                               laid_out, padded, reference, sequence_major)
from autograder.suites.helpers.tiled import tiled_attention

CAUSES = {
    "no_rescale": "an accumulated output that is not rescaled by exp(m - m_new) when the running maximum grows",
    "block_max": "a running maximum taken from the current key tile alone instead of max(m, rowmax(S))",
    "lse_no_max": "a logsumexp of log(l) without adding back the running maximum m",
    "no_scale": "scores without the scale 1 / sqrt(D)",
    "key_mask": "key lanes past Sk (in the last key tile) not masked: their loads must be masked (other=0) and their "
                "scores set to -inf, or they get weight",
    "out_of_bounds": "a load or store whose lanes run past the end of a tensor: the last query tile and the last key "
                     "tile are shorter when the blocks do not divide the lengths, and need masks (rows < Sq, "
                     "cols < Sk)",
    "stride": "an element's address taken from a contiguous layout instead of the strides: element [b, h, s, d] of "
              "q lies at Q + b*stride_qb + h*stride_qh + s*stride_qs + d*stride_qd (pass *q.stride())",
    "no_diagonal_mask": "no causal mask inside the tiles on the diagonal (key j > query i must get no weight)",
    "no_skip": "Programs must not visit the key tiles that lie wholly after their last query: end the loop over "
               "key tiles at min((tile + 1) * BLOCK_M, Sk) when causal.",
    "no_cap": "a causal loop whose end is not capped by Sk: with BLOCK_M > BLOCK_N the last query tile's end, "
              "(tile + 1) * BLOCK_M, lies past the keys, and its program visits key tiles wholly past Sk (loads "
              "whose every lane the mask turns off); the end is min((tile + 1) * BLOCK_M, Sk)",
    "dtype": "out has q's dtype (allocate it with q.dtype) and lse is float32.",
    "in_place": "the output stored over an input: allocate out (torch.empty) and leave q, k and v as they were",
    "v_strides": "V's elements addressed with K's strides: V has its own layout (pass and use *v.stride())",
    "grid": "a grid other than the statement's (cdiv(Sq, BLOCK_M), B * H): some query tiles or heads get no "
            "program (a grid from BLOCK_N, or over H instead of B * H)",
    "swapped_ids": "tl.program_id(0) and tl.program_id(1) swapped: axis 0 of the grid counts query tiles and axis 1 "
                   "heads (b * H + h), so tile = tl.program_id(0) and head = tl.program_id(1)",
    "no_division": "the output not divided by l after the last key tile (out = acc / l): acc holds the weights' "
                   "numerators only",
    "m_zero": "a running maximum that starts at 0 instead of -inf: where every score of a row lies far below 0, "
              "exp(s - 0) underflows to 0 and the row divides 0 by 0",
}
STATEMENT = ("Each key tile: S = tl.dot(q, tl.trans(k)) * scale; m_new = max(m, rowmax(S)); P = exp(S - m_new); "
             "l = l * exp(m - m_new) + rowsum(P); acc = acc * exp(m - m_new) + tl.dot(P, V); at the end "
             "out = acc / l and lse = m + log(l).")
CRASHES = [(OUT_OF_BOUNDS, CAUSES["out_of_bounds"])] + TRITON_CRASHES


tf32_on_a_gpu = kernels.tf32_on_a_gpu   # an autouse fixture: float32 at TF32's precision on a GPU


def flash(student, q, k, v, causal=False, block_m=32, block_n=16, **options):
    """(out, lse, the reply) of the student's triton_flash_attention."""
    with crash_hint(CRASHES):
        reply = student.call("triton_flash_attention", q, k, v, causal, block_m, block_n, **options)
    out, lse = checks.pair(reply["output"], "triton_flash_attention(q, k, v)", ("out", "lse"))
    return checks.tensor(out, "out"), checks.tensor(lse, "lse"), reply


def mistaken(q, k, v, causal, block_m, block_n, mistake):
    """(out, lse) in float64 of a named mistake, tiled as the kernel tiles."""
    return tiled_attention(q.double(), k.double(), v.double(), causal, block_m, block_n, mistake)


def as_if_contiguous(x):
    """What a kernel that assumes a contiguous layout reads for x: its memory taken in row-major order."""
    strides, step = [], 1
    for size in reversed(x.shape):
        strides.insert(0, step)
        step *= size
    return torch.as_strided(x, x.shape, strides)


def named_mistakes(q, k, v, causal, block_m, block_n, index):
    keys = ["no_rescale", "block_max", "lse_no_max", "no_scale"]
    keys += ["key_mask"] if k.shape[-2] % block_n else []
    keys += ["no_diagonal_mask"] if causal else []
    found = {key: mistaken(q, k, v, causal, block_m, block_n, key)[index].to(q.dtype) for key in keys}
    if not all(x.is_contiguous() for x in (q, k, v)):
        found["stride"] = reference(*map(as_if_contiguous, (q, k, v)), causal)[index].to(q.dtype)
    if v.stride() != k.stride():   # V read through K's strides, from V's own memory
        found["v_strides"] = reference(q, k, torch.as_strided(v, v.shape, k.stride()), causal)[index].to(q.dtype)
    return named(CAUSES, **found)


def check_grid(out, want, what, block_m, block_n):
    """Name the grid when out is right only for the rows a wrong grid reaches: the query tiles of a grid
    counted in BLOCK_N tiles, or the heads of the first batch element (a grid over H); or the rows that
    programs with their two ids swapped reach (head from axis 0, tile from axis 1 of the statement's grid)."""
    right = torch.isclose(out.double(), want.double(), **checks.tolerance(out.dtype)).all(dim=-1)   # [B, H, Sq]
    if right.all() or not right.any():
        return
    reached = min(out.shape[2], math.ceil(out.shape[2] / block_n) * block_m)
    by_block_n = bool(right[..., :reached].all()) and not bool(right[..., reached:].any())
    over_h = out.shape[0] > 1 and bool(right[0].all()) and not bool(right[1:].any())
    if by_block_n or over_h:
        raise checks.Feedback(f"out ({what}): right for {'the first query tiles' if by_block_n else 'the first batch element'}"
                              " only, the rest never written.", CAUSES["grid"])
    batch, heads, sq = out.shape[:3]
    tiles = math.ceil(sq / block_m)
    swapped = torch.zeros(batch * heads, sq, dtype=torch.bool)     # head < tiles, tile < B * H: rows written
    swapped[:tiles, :min(sq, batch * heads * block_m)] = True
    if torch.equal(right.reshape(batch * heads, sq), swapped):
        raise checks.Feedback(f"out ({what}): right for the first {min(tiles, batch * heads)} head(s) only, the rest "
                              "never written.", CAUSES["swapped_ids"])


def compare(student, q, k, v, what, causal=False, block_m=32, block_n=16, hint=STATEMENT, lse_too=False,
            unchanged=False, not_finite=""):
    """The student's (out, lse) against attention's; unchanged: the inputs must also be left as they were;
    not_finite: the cause to name when out holds NaN or infinity (where attention's does not)."""
    sent = [laid_out(x) if not x.is_contiguous() else x for x in (q, k, v)]
    out, lse, reply = flash(student, *sent, causal, block_m, block_n, echo_args=unchanged)
    want_out, want_lse = reference(q, k, v, causal)
    if not_finite:
        checks.require(bool(torch.isfinite(out).all()), f"out ({what}) holds NaN or infinity.", not_finite)
    if out.shape == want_out.shape:
        check_grid(out, want_out, what, block_m, block_n)
    checks.close(out, want_out.to(q.dtype), f"out ({what})", hint,
                 lambda: named_mistakes(q, k, v, causal, block_m, block_n, 0))
    if unchanged:
        check_inputs_unchanged(reply, (q, k, v), ("q", "k", "v"), "triton_flash_attention", CAUSES["in_place"])
    if lse_too:
        checks.close(lse, want_lse.float(), f"lse ({what})", "lse = m + log(l) after the last key tile.",
                     lambda: named_mistakes(q, k, v, causal, block_m, block_n, 1))


def inputs(b, h, sq, sk, d, seed, dtype=torch.float32, scale=1.0):
    q, k, v = kernel_qkv(b, h, sq, sk, d, dtype, seed)
    return q * scale, k, v


def test_computes_attention(student):
    """The gate: with the identity as the values, the output is the weights; they must be attention's.
    One tile of 32 holds every key here."""
    def call(q, k, v):
        eye = torch.eye(32).expand(1, 2, 32, 32).contiguous()
        out, weights = flash(student, q, k, v, False, 32, 32)[0], flash(student, q, k, eye, False, 32, 32)[0]
        if out.shape == q.shape:
            check_grid(out, reference(q, k, v)[0], "one tile of queries and keys, 2 heads", 32, 32)
        return out, weights
    substance.attention_function(call, *kernel_qkv(1, 2, 32, 32, 32, seed=1), unnormalised=CAUSES["no_division"])


def test_returns_output_and_logsumexp(student):
    q, k, v = inputs(2, 3, 40, 32, 16, seed=2)
    out, lse, _ = flash(student, q, k, v, False, 64, 32)
    checks.shape(out, (2, 3, 40, 16), "out", "One output row of width D per query: [B, H, Sq, D].")
    checks.shape(lse, (2, 3, 40), "lse", "One logsumexp per query: [B, H, Sq].")
    checks.dtype(out, torch.float32, "out", CAUSES["dtype"])
    checks.dtype(lse, torch.float32, "lse", CAUSES["dtype"])


def test_matches_attention(student):
    compare(student, *inputs(2, 1, 48, 64, 16, seed=3), "2 batch elements, 48 queries, 64 keys, blocks of 16 and 32",
            block_m=16, block_n=32, unchanged=True)


def test_logsumexp(student):
    for causal, seed in ((False, 4), (True, 5)):
        q, k, v = inputs(1, 1, 64, 64 if causal else 80, 16, seed=seed)
        _, lse, _ = flash(student, q, k, v, causal)
        checks.close(lse, reference(q, k, v, causal)[1].float(), f"lse ({'causal' if causal else 'not causal'})",
                     "lse = m + log(l) after the last key tile.", lambda: named_mistakes(q, k, v, causal, 32, 16, 1))


def test_lengths_the_blocks_do_not_divide(student):
    compare(student, *inputs(1, 1, 70, 45, 16, seed=6), "70 queries, 45 keys, blocks of 32 and 16",
            hint="The last query tile and the last key tile are shorter: mask rows >= Sq and cols >= Sk.",
            lse_too=True)


def test_strided_inputs(student):
    q, k, v = inputs(2, 2, 40, 40, 16, seed=7)
    q, k, v = sequence_major(q), padded(k, extra=8), padded(v, extra=16, seed=14)
    compare(student, q, k, v, "q laid out as [B, S, H, D] in memory, k's rows 24 and v's 32 elements apart",
            block_m=64, block_n=32, hint="Use the strides the wrapper passes (*q.stride()), never a contiguous layout.")


def test_causal(student):
    compare(student, *inputs(1, 1, 70, 70, 16, seed=8), "causal, 70 tokens, blocks of 32 and 16", causal=True,
            hint="With causal=True, query i attends to keys j <= i.", lse_too=True)


def test_keeps_float16(student):
    q, k, v = inputs(1, 1, 48, 48, 32, seed=9, dtype=torch.float16)
    out, lse, _ = flash(student, q, k, v, False, 16, 16)
    checks.dtype(out, torch.float16, "out of float16 inputs", CAUSES["dtype"])
    checks.dtype(lse, torch.float32, "lse of float16 inputs", CAUSES["dtype"])
    checks.close(out, reference(q, k, v)[0].half(), "out (float16, 48 tokens, D = 32)",
                 "Accumulate m, l and acc in float32.", lambda: named_mistakes(q, k, v, False, 16, 16, 0))


def test_large_scores_stay_finite(student):
    compare(student, *inputs(1, 1, 64, 48, 16, seed=10, scale=40.0), "queries scaled by 40",
            hint="Subtract the running maximum before tl.exp.")
    # Every score near -256: a running maximum must start at -inf, not 0, or exp(s - 0) underflows to 0.
    q, k, v = inputs(1, 1, 32, 32, 16, seed=13)
    compare(student, -8.0 - 0.1 * q.abs(), 8.0 + 0.1 * k.abs(), v, "every score below -250",
            hint="Start the running maximum at -inf.", not_finite=CAUSES["m_zero"])


def attention_flops(sq, sk, d, heads):
    """The products of attention itself: S = Q K^T and P V, 2 * Sq * Sk * d FLOPs each."""
    return heads * 4 * sq * sk * d


def test_the_kernel_does_the_work(student):
    """One counted call: its values first, then what its kernels did (the products of attention and a
    load of every input element, in Triton's interpreter) and what torch did (no exponential, no
    product worth the name)."""
    q, k, v = inputs(1, 2, 64, 48, 16, seed=11)
    out, lse, reply = flash(student, q, k, v, False, 32, 16, count=True)
    checks.close(out, reference(q, k, v)[0].float(), "out of the counted call (64 queries, 48 keys)",
                 "The counted call must first give the right answer.", lambda: named_mistakes(q, k, v, False, 32, 16, 0))
    check_kernel_work(reply, "triton_flash_attention", least_flops=attention_flops(64, 48, 16, 2),
                        least_addressed=q.numel() + k.numel() + v.numel(), programs=math.ceil(64 / 32) * 2)


def tile_loads(n, d, block_m, block_n, causal):
    """Elements addressed by the loads of one head: each program loads its query tile once and, per key
    tile it visits, a tile of K and one of V."""
    total = 0
    for start in range(0, n, block_m):
        visited = math.ceil(min(start + block_m, n) / block_n) if causal else math.ceil(n / block_n)
        total += block_m * d + visited * 2 * block_n * d
    return total


def test_causal_skips_tiles_above_the_diagonal(student):
    """Two counted calls on the same input, causal and not: values first, then the elements their
    loads addressed.  Visiting only the tiles on or below the diagonal addresses 0.67 of what
    visiting every tile does here (4 query tiles of 16); up to 0.75 is accepted."""
    n, d, block = 64, 16, 16
    q, k, v = inputs(1, 1, n, n, d, seed=12)
    addressed = {}
    for causal in (False, True):
        out, _, reply = flash(student, q, k, v, causal, block, block, count=True)
        checks.close(out, reference(q, k, v, causal)[0].float(),
                     f"out of the counted call ({'causal' if causal else 'not causal'}, {n} tokens)",
                     "The counted call must first give the right answer.",
                     lambda: named_mistakes(q, k, v, causal, block, block, 0))
        check_kernel_work(reply, f"triton_flash_attention(causal={causal})",
                            least_flops=attention_flops(n, n, d, 1) // (3 if causal else 1))
        addressed[causal] = reply["work"].addressed
    if not reply["work"].interpreted:
        return  # compiled for a GPU: its loads cannot be counted, the values above are what is checked
    ratio = addressed[True] / max(addressed[False], 1)
    skip = tile_loads(n, d, block, block, True) / tile_loads(n, d, block, block, False)
    checks.require(ratio <= 0.75,
                   f"The causal call's loads addressed {addressed[True]:,} elements, {ratio:.2f} of the "
                   f"{addressed[False]:,} of the call without the mask; visiting only the tiles on or below the "
                   f"diagonal addresses {skip:.2f} of it here.", CAUSES["no_skip"])
    check_no_tile_past_the_keys(student)


def check_no_tile_past_the_keys(student, n=40, block_m=32, block_n=8):
    """Query tiles longer than key tiles, on a length the query tiles do not divide: the last query
    tile's end, (tile + 1) * BLOCK_M = 64, lies past the 40 keys, and its program must still stop at Sk.
    A visit of a tile wholly past Sk reads nothing (every lane masked off) and changes no value: the
    count of loads whose every lane is off shows it.  The values of causal calls are checked above and
    by test_causal; a grid other than the statement's is judged by the value tests (its extra programs'
    loads are off too)."""
    q, k, v = inputs(1, 1, n, n, 16, seed=15)
    work = counted(flash(student, q, k, v, True, block_m, block_n, count=True)[2], "triton_flash_attention")
    if not work.interpreted or work.programs != math.ceil(n / block_m):
        return
    checks.require(work.idle_loads == 0,
                   f"The causal call on {n} tokens with blocks of {block_m} queries and {block_n} keys ran "
                   f"{work.idle_loads} load(s) whose every lane the mask turned off: its programs visit tiles "
                   "that lie wholly past the end of their tensor.", CAUSES["no_cap"])
