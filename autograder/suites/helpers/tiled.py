"""Tiled attention (the flash_attention assignment): the logsumexp, the long inputs whose memory is
measured from outside the student's process, and the counted work of a call's products."""

import math

import torch

from autograder.harness import checks
from autograder.harness.checks import Feedback
from autograder.suites.helpers.common import attention_lse, counted, randn, scores
from autograder.suites.helpers.stored import stored


def tiled_attention(q, k, v, causal=False, block_q=64, block_k=64, mistake=None):
    """(out [..., Sq, d_v], lse [..., Sq]) of attention computed tile by tile as FlashAttention's forward
    computes it, in the inputs' dtype: for each tile of block_q queries, the key tiles of block_k one
    after another (a tile past the last key padded with zeros and masked, as a kernel loads it; with
    causal, the tiles wholly above the diagonal skipped and the one on it masked within), a running
    max m, a running sum l and an accumulator rescaled whenever m grows.  `mistake` switches on one
    named mistake of the suites' CAUSES:

      no_rescale             the accumulator not rescaled when the max grows
      block_max              each tile's own max taken for the running max
      lse_no_max             lse = log(l), without m
      lse_last_tile          lse from the last key tile's sum only
      no_scale               the scores not divided by sqrt(d)
      key_mask               the padding of the last key tile not masked
      no_diagonal_mask       causal: the tile on the diagonal not masked within
      skip_from_first_query  causal: tiles skipped from the tile's first query, not its last"""
    *lead, sq, d = q.shape
    sk, d_v = k.shape[-2], v.shape[-1]
    scale = 1.0 if mistake == "no_scale" else 1.0 / math.sqrt(d)
    out, lse = torch.zeros(*lead, sq, d_v, dtype=q.dtype), torch.zeros(*lead, sq, dtype=q.dtype)
    for i0 in range(0, sq, block_q):
        i1 = min(i0 + block_q, sq)
        m = torch.full((*lead, i1 - i0), -math.inf, dtype=q.dtype)     # [..., block]: the running max
        l, acc = torch.zeros_like(m), torch.zeros(*lead, i1 - i0, d_v, dtype=q.dtype)
        last = (i0 + 1 if mistake == "skip_from_first_query" else i1) if causal else sk
        for j0 in range(0, min(last, sk), block_k):
            j1, keys = min(j0 + block_k, sk), torch.arange(j0, j0 + block_k)
            k_tile = torch.zeros(*lead, block_k, d, dtype=q.dtype)        # [..., block_k, d], zeros past Sk
            v_tile = torch.zeros(*lead, block_k, d_v, dtype=q.dtype)
            k_tile[..., :j1 - j0, :], v_tile[..., :j1 - j0, :] = k[..., j0:j1, :], v[..., j0:j1, :]
            s = scores(q[..., i0:i1, :], k_tile, scale=scale)             # [..., block_q, block_k]
            if mistake != "key_mask":
                s = s.masked_fill(keys >= sk, -math.inf)
            if causal and mistake != "no_diagonal_mask":
                s = s.masked_fill(keys > torch.arange(i0, i1)[:, None], -math.inf)
            m_new = s.amax(dim=-1) if mistake == "block_max" else torch.maximum(m, s.amax(dim=-1))
            p = torch.exp(s - m_new[..., None])
            rescale = torch.exp(m - m_new)
            l_tile = p.sum(dim=-1)
            l = l * rescale + l_tile
            acc = (acc if mistake == "no_rescale" else acc * rescale[..., None]) + p @ v_tile
            m = m_new
        out[..., i0:i1, :] = acc / l[..., None]
        lse[..., i0:i1] = {"lse_last_tile": m + torch.log(l_tile), "lse_no_max": torch.log(l)}.get(
            mistake, m + torch.log(l))
    return out, lse


# A relative error (in norm) below this is precision's, not a slip of the arithmetic: the whole computation in
# bfloat16 is 2-2.5% off; no rescaling, no D, no 1/sqrt(d) or an overwritten sum are tens of percent off.
PRECISION_SIZED = 0.05


def relative_error(actual, expected):
    """||actual - expected|| / ||expected|| over the whole tensor, in float64 (NaN stays NaN)."""
    actual, expected = checks.as_tensor(actual).double(), checks.as_tensor(expected).double()
    return float((actual - expected).norm() / expected.norm())


def logsumexp(q, k, mask=None):
    """The natural logarithm of each query's sum of exp(scaled scores) over its allowed keys."""
    return scores(q, k, mask).logsumexp(dim=-1)


# The long inputs of the memory tests: one [N, N] float32 matrix (64 MiB) stands far out in a call's memory.
MEMORY_N, MEMORY_D, MEMORY_BLOCK = 4096, 32, 256
# What a fresh child holds to run a notebook's cells and take one call, beside the call's own tensors,
# in the OS's accounting (measured on the course's own answer: 3.5 to 6 MiB; see docs of make bench).
RUNTIME_BYTES = 8 << 20
HELD_AHEAD = ("The notebook's cells already held {held} before the call started: memory made ahead of the "
              "call (a workspace, a cache of scores) counts as the call's. Keep no large tensors at the top "
              "level of your cells.")


def memory_inputs(count, seed):
    """`count` float32 tensors [1, 1, MEMORY_N, MEMORY_D]."""
    return [randn(1, 1, MEMORY_N, MEMORY_D, seed=seed + i, dtype=torch.float32) for i in range(count)]


@stored
def memory_reference(seed, causal=False):
    """(q, k, v, out, lse) of the forward's memory input: the grader's attention in float32 (the
    inputs' dtype), causal or not, worked out once and stored (stored.py)."""
    q, k, v = memory_inputs(3, seed)
    return q, k, v, *attention_lse(q, k, v, causal=causal)


@stored
def memory_gradients(seed):
    """(q, k, v, d_out, out, lse, dq, dk, dv) of the backward's memory input, in float32: out and lse the
    grader's attention (attention_lse), the gradients autograd's through it, worked out once and stored
    (stored.py)."""
    q, k, v, d_out = memory_inputs(4, seed)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = attention_lse(*leaves)
    return q, k, v, d_out, out.detach(), lse.detach(), *torch.autograd.grad(out, leaves, d_out)


def megabytes(count):
    return f"{count / 2**20:.1f} MiB"


MEASURED_WRONG = "The measured call must first give the right answer: the memory of a wrong answer earns nothing."


def check_measured_values(actual, expected, what, names, mistakes_of=None):
    """A measured point is earned only by the right answer: the values of the very call that was
    measured, on its own inputs, within float32's tolerance.  mistakes_of(index), called only when
    a value is wrong, gives the named mistakes of that output (they are costly on long inputs)."""
    for index, (value, want, name) in enumerate(zip(actual, expected, names)):
        checks.shape(value, want.shape, f"{name} of {what}")
        if checks.is_close(checks.as_tensor(value), want):
            continue
        mistakes = {name: found.to(want.dtype) for name, found in (mistakes_of(index) if mistakes_of else {}).items()}
        cause = checks.known_mistake(checks.as_tensor(value), mistakes)
        checks.close(value, want, f"{name} of {what}",
                     f"{MEASURED_WRONG} {cause}" if cause else MEASURED_WRONG)


def check_memory(reply, function, tensors, matrix, whole, blocks=f"blocks of {MEMORY_BLOCK}"):
    """A call of `function` on the memory inputs (made with measure_memory=True, with `blocks`
    (as the feedback words them: MEMORY_BLOCK, or the statement's defaults), in a fresh child) was charged at most RUNTIME_BYTES, a quarter of one [N, N]
    float32 `matrix`, and three times `tensors`, the call's inputs and outputs (its window also holds
    the request as it arrives and the reply as it leaves).  With the OS's accounting the charge
    is everything the child held at the call's worst moment since before the notebook's first line
    ran; `whole` is the hint when the call itself reached the size of that matrix."""
    peak = reply.get("peak_memory")
    what = f"{function} on {MEMORY_N} queries and {MEMORY_N} keys (d = {MEMORY_D}, float32, {blocks})"
    if peak is None:
        raise Feedback(f"The memory of {what} could not be measured (the process stopped during the call).")
    matrix_bytes = MEMORY_N * MEMORY_N * 4
    allowed = RUNTIME_BYTES + matrix_bytes // 4 + 3 * sum(t.numel() * t.element_size() for t in tensors)
    if peak.bytes <= allowed:
        return
    held = f" ({megabytes(peak.held_before)} of it held before the call)" if peak.accounting == "cgroup" else ""
    if peak.held_before >= matrix_bytes // 4:
        hint = HELD_AHEAD.format(held=megabytes(peak.held_before))
    elif peak.bytes - peak.held_before >= matrix_bytes:
        hint = whole
    else:
        hint = "Hold one tile of scores at a time."
    raise Feedback(f"{what} held {megabytes(peak.bytes)} of memory at its peak{held}, where {megabytes(allowed)} "
                   f"is allowed (one {MEMORY_N} x {MEMORY_N} float32 {matrix} is {megabytes(matrix_bytes)}).", hint)


# -- counted work: the FLOPs of a call's products, counted in the student's process (docs/measured.md) ---

HIDDEN_WORK = ("Do the products with torch (@, torch.matmul, einsum or element-wise products): work done in "
               "NumPy or with Python numbers cannot be counted, and a count below what the algorithm itself "
               "needs earns nothing.")


def check_work(reply, what, low, high, observed, too_much):
    """The FLOPs of torch's products in a counted call lie in [low, high]: above is `too_much` (the
    hint), below is work the count cannot see.  The count must have stayed whole and the call must
    have been the child's only thread (common.counted)."""
    flops = counted(reply, what).torch_flops
    if flops > high:
        raise Feedback(f"{what} did {flops:,} floating-point operations in its products; {observed}", too_much)
    if flops < low:
        raise Feedback(f"{what} did {flops:,} floating-point operations in products torch could count, fewer "
                       f"than the {low:,} that computing every score it needs takes.", HIDDEN_WORK)
