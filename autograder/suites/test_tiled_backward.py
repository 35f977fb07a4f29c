"""Hidden tests for flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_q=64,
block_k=64) -> (dq, dk, dv).

The gradients are compared with autograd's through the grader's attention; the grader hands in the
true out and lse, so a slip in the student's forward costs nothing here.  The memory is read from
outside the student's process (docs/measured.md), as for the forward."""

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers.common import (B, D_K, D_V, H, SK, SQ, attention, check_inputs_unchanged,
                                              crash_hint, named, qkv, randn, recomputed_gradients, tril)
from autograder.suites.helpers.stored import stored
from autograder.suites.helpers.tiled import (MEMORY_BLOCK, MEMORY_N, PRECISION_SIZED, check_measured_values,
                                             check_memory, logsumexp, memory_gradients, relative_error)


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "no_delta": "dS = P * dP without subtracting D = rowsum(dO * O), the softmax's correction",
    "no_scale": "dQ and dK without the factor 1/sqrt(d) of the scores",
    "accumulate": "dK and dV collect a part from every query tile: accumulate them with +=, do not overwrite them "
                  "with =.",
    "no_mask": "no causal mask when the weights are recomputed (key j > query i has weight 0)",
    "whole_matrix": "The whole [Sq, Sk] weight matrix was held at once: work tile by tile, holding one tile at "
                    "a time.",
    "in_place": "an in-place operation on an input (out.mul_(d_out) for D, q *= scale) changes the caller's "
                "tensor: work on copies (d_out * out)",
    "half_state": "dq, dk and dv accumulated in the inputs' 16-bit dtype (float16 or bfloat16) instead of lse's "
                  "float32",
    "half_delta": "D = rowsum(dO * O) computed in the inputs' 16-bit dtype (float16 or bfloat16) instead of lse's "
                  "float32: dv is right, dq and dk carry D's rounding",
    "shapes": "dq has q's shape, dk k's and dv v's; lse is [B, H, Sq], so lse[..., i0:i1, None] broadcasts over a "
              "tile's keys.",
}
# What to do in 16-bit precision, the statement's rule: said beside the cause.
HALF_RULE = ("For float16 and bfloat16 inputs, lse arrives in float32 (the accumulation dtype): cast each tile and "
             "out to lse.dtype before its products, compute D and accumulate dq, dk and dv in it, and round them to "
             "the inputs' dtype at the end.")
# The 16-bit inputs, each with a seed: 512 tokens in tiles of 16, so that a sum held in 16 bits takes 32 roundings.
HALF_DTYPES, HALF_N, HALF_BLOCK = ((torch.bfloat16, 7), (torch.float16, 8)), 512, 16
# The relative error (in norm, over a whole gradient) that rounding a right answer to the dtype leaves, at most:
# an eighth of the unit roundoff (2**-8 for bfloat16, 2**-11 for float16), about halfway between a right answer
# and the nearest mistake on a log scale.  An answer computed in float32 and rounded stays 3 times under it
# (0.000-0.014% in bfloat16, 0.001-0.002% in float16, seeds 7 to 9); D in 16 bits puts dq and dk 3.5 times over
# it (0.18-0.25%, 0.023-0.031%); dq, dk and dv accumulated in 16 bits 8 times over (0.38-0.71%, 0.048-0.089%).
ROUNDING = {torch.bfloat16: 2.0 ** -8 / 8, torch.float16: 2.0 ** -11 / 8}
BLOCK_Q, BLOCK_K = 32, 16
NAMES = ("dq", "dk", "dv")


def backward(student, q, k, v, d_out, causal=False, block_q=BLOCK_Q, block_k=BLOCK_K, **options):
    """(dq, dk, dv, the reply) of the student's backward, handed the true out and lse."""
    mask = tril(q.shape[-2], k.shape[-2]) if causal else None
    out, lse = attention(q, k, v, mask)[0], logsumexp(q, k, mask)
    with crash_hint(CAUSES["shapes"]):
        reply = student.call("flash_attention_backward", q, k, v, out, lse, d_out, causal, block_q, block_k,
                             **options)
    grads = checks.pair(reply["output"], "flash_attention_backward(...)", NAMES)
    return (*(checks.tensor(grad, name) for grad, name in zip(grads, NAMES)), reply)


def autograd(q, k, v, d_out, mask=None, mistake=None, block_q=BLOCK_Q, block_k=BLOCK_K):
    """(dq, dk, dv) by autograd through attention, or what a named mistake gives (the recomputation's
    switches), tiled as the statement says (no_mask: the tiles above the diagonal skipped, no mask
    inside the others)."""
    if mistake is None:
        q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        out = attention(q, k, v, mask)[0]
        return torch.autograd.grad(out, (q, k, v), d_out)
    seen = mask
    if mask is not None and mistake == "no_mask":
        rows = torch.arange(q.shape[-2]) // block_q * block_q + block_q - 1   # each query tile's last query
        seen = torch.arange(k.shape[-2]) // block_k * block_k <= rows[:, None]
    return recomputed_gradients(q, k, v, attention(q, k, v, mask)[0], logsumexp(q, k, mask), d_out, seen,
                                delta=mistake != "no_delta", scaled=mistake != "no_scale")


def named_mistakes(q, k, v, d_out, mask, index, block_q, block_k):
    return named(CAUSES, **{key: autograd(q, k, v, d_out, mask, key, block_q, block_k)[index]
                              for key in ("no_delta", "no_scale", "no_mask")})


def inputs(sq, sk, seed, d=D_K, d_v=D_V, dtype=torch.float64):
    q, k, v = qkv(sq=sq, sk=sk, d_k=d, d_v=d_v, dtype=dtype, seed=seed)
    return q, k, v, randn(B, H, sq, d_v, seed=seed + 50, dtype=dtype)


HINT = {"dv": "dV = P^T @ dO with P = exp(S - lse). " + CAUSES["accumulate"],
        "dq": "dQ = dS @ K / sqrt(d) with dS = P * (dP - D), dP = dO @ V^T and D = rowsum(dO * O).",
        "dk": "dK = dS^T @ Q / sqrt(d) with dS = P * (dP - D). " + CAUSES["accumulate"]}


def compare(student, q, k, v, d_out, what, names=NAMES, causal=False, block_q=BLOCK_Q, block_k=BLOCK_K):
    *grads, _ = backward(student, q, k, v, d_out, causal, block_q, block_k)
    mask = tril(q.shape[-2], k.shape[-2]) if causal else None
    want = autograd(q, k, v, d_out, mask)
    for index, name in enumerate(NAMES):
        if name in names:
            checks.close(grads[index], want[index], f"{name} ({what})", HINT[name],
                         lambda: named_mistakes(q, k, v, d_out, mask, index, block_q, block_k))


def test_computes_gradients(student):
    """The gate: finite, non-zero gradients, where dv follows the queries and dq follows the keys."""
    q, k, v, d_out = inputs(40, 36, seed=1)
    dq, dk, dv, _ = backward(student, q, k, v, d_out)
    for grad, name in zip((dq, dk, dv), NAMES):
        substance.finite(grad, name)
        checks.require(bool(grad.abs().sum() > 0), f"{name} is zero for ordinary inputs, so no gradient is computed yet.")
    _, _, sharper, _ = backward(student, q * 4, k, v, d_out)
    checks.require(substance.differs(sharper, dv), "dv stays the same when the queries change, so it does not come "
                   "from the attention weights (dV = P^T @ dO) yet.")
    moved, _, _, _ = backward(student, q, k.flip(-2), v, d_out)
    checks.require(substance.differs(moved, dq), "dq stays the same when the keys change, so it does not come from "
                   "the scores' gradient yet.")


def test_returns_three_gradients(student):
    q, k, v, d_out = inputs(SQ, SK, seed=2)
    dq, dk, dv, reply = backward(student, q, k, v, d_out, echo_args=True)
    out, lse = attention(q, k, v)[0], logsumexp(q, k)
    check_inputs_unchanged(reply, (q, k, v, out, lse, d_out), ("q", "k", "v", "out", "lse", "d_out"),
                             "flash_attention_backward", CAUSES["in_place"])
    for grad, source, name in zip((dq, dk, dv), (q, k, v), NAMES):
        checks.shape(grad, source.shape, name, CAUSES["shapes"])


def test_dv(student):
    compare(student, *inputs(64, 80, seed=3), "64 queries, 80 keys", names=("dv",))


def test_dq_and_dk(student):
    compare(student, *inputs(64, 80, seed=4), "64 queries, 80 keys", names=("dq", "dk"))


def test_causal(student):
    compare(student, *inputs(64, 64, seed=5), "causal, 64 tokens", causal=True)


def test_lengths_the_blocks_do_not_divide(student):
    compare(student, *inputs(70, 45, seed=6), "70 queries, 45 keys, blocks of 32 and 24", block_k=24)


def given_out_gradients(q, k, v, out, lse, d_out):
    """(dq, dk, dv) in float64 for exactly the inputs handed in: D = rowsum(dO * O) of the `out` given (rounded
    to the inputs' dtype), which is what a right answer computes; autograd's D would use the exact output."""
    return recomputed_gradients(*(t.double() for t in (q, k, v, out, lse, d_out)))


PROPERTY = ("dV = P^T @ dO, dS = P * (dP - D) with D = rowsum(dO * O), dQ = dS @ K / sqrt(d) and dK = dS^T @ Q / "
            "sqrt(d), summed over the tiles.")


def test_half_precision_works_in_float32(student):
    """float16 and bfloat16 inputs, each with lse in float32 as the forward returns it: the gradients come
    back in the inputs' dtype, each within ROUNDING of the right answer rounded to it, in norm (an element
    test cannot see a sum held in 16 bits: no element leaves the dtype's tolerance).  dv needs no D, so
    dv right and dq or dk wrong is D computed in 16 bits; dv wrong too, the sums held in 16 bits.  D may come
    from the out handed in (as the statement does) or from the exact output (autograd through attention): each
    is right.  An answer off by more than precision can make is judged element by element, its named
    mistakes named."""
    for dtype, seed in HALF_DTYPES:
        q, k, v, d_out = (t.to(dtype) for t in inputs(HALF_N, HALF_N, seed=seed, d=32, d_v=32))
        q = 2 * q   # sharper weights: a 16-bit state shows
        wide = [t.double() for t in (q, k, v)]
        out, lse = attention(*wide)[0].to(dtype), logsumexp(*wide[:2]).float()
        with crash_hint(f"{checks.likely(CAUSES['half_state'])} {HALF_RULE}", when=("dtype", "scalar type")):
            reply = student.call("flash_attention_backward", q, k, v, out, lse, d_out, False, HALF_BLOCK, HALF_BLOCK)
        grads = checks.pair(reply["output"], "flash_attention_backward(...)", NAMES)
        for grad, name in zip(grads, NAMES):
            checks.tensor(grad, name)
            checks.shape(grad, (*q.shape[:-2], HALF_N, 32), name)
            checks.dtype(grad, dtype, f"{name} ({dtype} inputs)", "The gradients are rounded to the inputs' dtype "
                         "at the end.")
        wanted = [want.to(dtype) for want in given_out_gradients(q, k, v, out, lse, d_out)]
        exact = [want.to(dtype) for want in autograd(*wide, d_out.double())]
        errors = {name: min(relative_error(grad, want), relative_error(grad, other))
                  for grad, want, other, name in zip(grads, wanted, exact, NAMES)}
        if not max(errors.values()) <= PRECISION_SIZED:   # NaN too
            for index, (grad, want, name) in enumerate(zip(grads, wanted, NAMES)):
                checks.close(grad, want, f"{name} ({dtype} inputs)", PROPERTY, lambda: {
                    cause: value.to(dtype) for cause, value in
                    named(CAUSES, **{key: autograd(*wide, d_out.double(), None, key, HALF_BLOCK, HALF_BLOCK)[index]
                                     for key in ("no_delta", "no_scale")}).items()})
        off = [f"{name} by {error:.3%}" for name, error in errors.items() if not error <= ROUNDING[dtype]]
        cause = CAUSES["half_state" if not errors["dv"] <= ROUNDING[dtype] else "half_delta"]
        checks.require(not off, f"The gradients for {dtype} inputs are off in norm (||yours - right|| / ||right||): "
                       f"{', '.join(off)}, where rounding a right answer to {dtype} leaves at most "
                       f"{ROUNDING[dtype]:.3%}.", f"{checks.likely(cause)} {HALF_RULE}")


def prepare():
    """The grader's gradients on the memory input, and autograd's first call with output gradients (it
    imports torch's symbolic shapes, half a second), once before the grading processes fork (plugin.py)."""
    memory_gradients(20)
    autograd(*qkv(sq=4, sk=4, d_k=2, d_v=2), randn(B, H, 4, 2))


@stored
def memory_input_gradients():
    """What the named mistakes of the values give on the memory input (not causal, so no_mask is the
    right answer there): the same for every submission, so worked out once (and stored: stored.py),
    and only when an answer is wrong there."""
    q, k, v, d_out, *_ = memory_gradients(20)
    return {key: autograd(q, k, v, d_out, None, key, MEMORY_BLOCK, MEMORY_BLOCK) for key in ("no_delta", "no_scale")}


def memory_input_mistakes(index):
    return named(CAUSES, **{key: grads[index] for key, grads in memory_input_gradients().items()})


def test_memory_stays_below_one_score_matrix(student):
    """One measured call, in a fresh child: its gradients first, then what the kernel charged the child."""
    q, k, v, d_out, out, lse, *want = memory_gradients(20)
    block = MEMORY_BLOCK
    with crash_hint(CAUSES["shapes"]):
        reply = student.call("flash_attention_backward", q, k, v, out, lse, d_out, False, block, block,
                             measure_memory=True)
    grads = [checks.tensor(grad, name) for grad, name in
             zip(checks.pair(reply["output"], "flash_attention_backward(...)", NAMES), NAMES)]
    check_measured_values(grads, want, f"flash_attention_backward on the {MEMORY_N}-token memory input", NAMES,
                            memory_input_mistakes)
    check_memory(reply, "flash_attention_backward", (q, k, v, d_out, out, lse, *grads), "matrix of weights",
                   CAUSES["whole_matrix"])
