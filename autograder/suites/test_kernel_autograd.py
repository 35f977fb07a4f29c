"""Hidden tests for TritonAttention (torch.autograd.Function) through triton_attention(q, k, v, causal):
its forward pass is the student's kernel, its backward pass the course's recomputation.

Gradients are compared with those of the grader's attention in float64; the forward pass must run
the student's kernel (counted in Triton's interpreter, docs/kernels.md).  The lengths are
multiples of the kernel's default blocks, so a kernel that misses its masks on a partial tile loses
those points in its own exercise, not again here."""

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers import kernels
from autograder.suites.helpers.common import crash_hint, named, randn, recomputed_gradients, tril
from autograder.suites.helpers.kernels import (OUT_OF_BOUNDS, TRITON_CRASHES, check_kernel_work, kernel_qkv,
                                               reference)

CAUSES = {
    "no_none": "backward returns one gradient per input of forward: (dq, dk, dv, None), the None for causal",
    "not_causal_backward": "the backward pass called without causal: the gradients of the hidden keys are not zero",
    "grad_order": "the gradients returned in another order than forward's inputs (q, k, v)",
    "d_out_for_out": "out and d_out swapped in the call to flash_attention_backward(q, k, v, out, lse, d_out, causal)",
}
# The earlier exercises' functions its answers may call (checks.built_on): the forward is the student's own
# kernel, so an output or gradients that follow it are right here (a slip of the kernel is flash_kernel's).
BUILT_ON = {"flash_kernel": ("triton_flash_attention",)}
# What the student's kernel is compared with there (checks.students_functions): the grader's (out, lse), in float32.
RULES = {"triton_flash_attention": lambda q, k, v, causal=False: tuple(x.float() for x in reference(q, k, v, causal))}
STATEMENT = ("forward saves q, k, v, out and lse; backward returns (*flash_attention_backward(q, k, v, out, lse, d_out, "
             "causal), None).")



tf32_on_a_gpu = kernels.tf32_on_a_gpu   # an autouse fixture: float32 at TF32's precision on a GPU


def run(student, q, k, v, causal, upstream, **options):
    """(out, (dq, dk, dv), the reply) of the student's triton_attention, back-propagated from `upstream`."""
    with crash_hint([(("incorrect number of gradients",), CAUSES["no_none"]),
                       (OUT_OF_BOUNDS, "a load or store of your kernel outside its tensors")] + TRITON_CRASHES):
        reply = student.call("triton_attention", q, k, v, causal, grad=True, grad_outputs=[upstream], **options)
    out = checks.tensor(reply["output"], "triton_attention(q, k, v)")
    grads = reply["input_grads"] or [None, None, None, None]
    for name, grad in zip(("dq", "dk", "dv"), grads[:3]):
        checks.require(grad is not None, f"{name} is missing: the output has no gradient path to {name[1:]}.", STATEMENT)
    return out, tuple(grads[:3]), reply


def forward(student, q, k, v, causal=False, **options):
    """(out, the reply) of the student's triton_attention, forward only."""
    with crash_hint([(OUT_OF_BOUNDS, "a load or store of your kernel outside its tensors")] + TRITON_CRASHES):
        reply = student.call("triton_attention", q, k, v, causal, **options)
    return checks.tensor(reply["output"], "triton_attention(q, k, v)"), reply


def reference_gradients(q, k, v, causal, upstream):
    q64, k64, v64 = (x.double().requires_grad_() for x in (q, k, v))
    out, _ = reference(q64, k64, v64, causal)
    return out, torch.autograd.grad(out, (q64, k64, v64), upstream.double())


def named_gradients(q, k, v, causal, upstream, index):
    """What each named mistake gives for gradient `index` (0: dq, 1: dk, 2: dv)."""
    _, right = reference_gradients(q, k, v, causal, upstream)
    found = {"grad_order": right[(index + 1) % 3] if q.shape == k.shape else None}
    if causal:
        found["not_causal_backward"] = backward_without_mask(q, k, v, upstream)[index]
    q64, k64, v64 = (x.double() for x in (q, k, v))
    out, _ = reference(q64, k64, v64, causal)
    found["d_out_for_out"] = swapped_backward(q64, k64, v64, out, upstream.double(), causal)[index]
    return named(CAUSES, **{key: value.float() for key, value in found.items() if value is not None})


def backward_without_mask(q, k, v, upstream):
    """The gradients from weights recomputed without the mask, with the causal forward's lse and out."""
    q64, k64, v64 = (x.double() for x in (q, k, v))
    out, lse = reference(q64, k64, v64, causal=True)
    return recomputed_gradients(q64, k64, v64, out, lse, upstream.double())


def swapped_backward(q, k, v, out, d_out, causal):
    """The course's recomputation handed d_out for out and out for d_out."""
    _, lse = reference(q, k, v, causal)
    return recomputed_gradients(q, k, v, d_out, lse, out, tril(q.shape[-2], k.shape[-2]) if causal else None)


def prepare():
    """autograd's first call with output gradients imports torch's symbolic shapes (half a second): once
    before the grading processes fork (plugin.py), not in each."""
    q, k, v = inputs(4, seed=0, heads=1, d=2)
    reference_gradients(q, k, v, False, upstream_of(q, seed=0))


def attention_out(q, k, v, causal=False):
    """The right out of triton_attention, in float32 (the grader's attention in float64)."""
    return reference(q, k, v, causal)[0].float()


def inputs(sq, seed, heads=2, d=16):
    return kernel_qkv(1, heads, sq, sq, d, seed=seed)


def upstream_of(q, seed):
    return randn(*q.shape, seed=seed).float()


def on_their_kernel(q, k, v, causal, upstream=None):
    """on_functions for checks.built_on: what triton_attention gives with the given triton_flash_attention (the
    student's): its out, or, for `upstream`, the course's recomputation from its out and lse (dq, dk, dv)."""
    def run_with(functions):
        out, lse = functions["triton_flash_attention"](q, k, v, causal)
        if upstream is None:
            return out
        seen = tril(q.shape[-2], k.shape[-2]) if causal else None
        grads = recomputed_gradients(q.double(), k.double(), v.double(), out.double(), lse.double(), upstream.double(),
                                     seen)
        return tuple(grad.float() for grad in grads)
    return run_with


def compare_gradients(student, q, k, v, causal, seed, what):
    upstream = upstream_of(q, seed)
    _, grads, _ = run(student, q, k, v, causal, upstream)
    _, want = reference_gradients(q, k, v, causal, upstream)
    want = checks.built_on(student, BUILT_ON, grads, tuple(grad.float() for grad in want),
                           on_their_kernel(q, k, v, causal, upstream), RULES)
    for index, (name, grad, expected) in enumerate(zip(("dq", "dk", "dv"), grads, want)):
        checks.close(grad, expected.float(), f"{name} ({what})", STATEMENT,
                     lambda: named_gradients(q, k, v, causal, upstream, index))


def test_forward_is_attention(student):
    """The gate: the forward pass computes attention (its weights read through the identity as values)."""
    def call(q, k, v):
        eye = torch.eye(32).expand(1, 2, 32, 32).contiguous()
        return forward(student, q, k, v)[0], forward(student, q, k, eye)[0]
    substance.attention_function(call, *kernel_qkv(1, 2, 32, 32, 32, seed=1))


def test_returns_the_output(student):
    q, k, v = inputs(64, seed=2)
    out, _ = forward(student, q, k, v)
    checks.shape(out, q.shape, "triton_attention(q, k, v)", "forward returns out [B, H, Sq, D] from your kernel.")
    want = checks.built_on(student, BUILT_ON, out, attention_out(q, k, v), on_their_kernel(q, k, v, False), RULES)
    checks.close(out, want, "triton_attention(q, k, v)",
                 "forward returns out from your kernel: where triton_flash_attention's own tests fail, fix those first.")


def test_gradients(student):
    compare_gradients(student, *inputs(64, seed=4), False, 5, "64 tokens")


def test_causal_gradients(student):
    compare_gradients(student, *inputs(64, seed=6), True, 7, "causal, 64 tokens")


def test_forward_runs_the_kernel(student):
    """One counted call of the forward pass: its values first, then its kernels did attention's products
    and torch did none of its work."""
    q, k, v = inputs(32, seed=8)
    out, reply = forward(student, q, k, v, count=True)
    want = checks.built_on(student, BUILT_ON, out, attention_out(q, k, v), on_their_kernel(q, k, v, False), RULES)
    checks.close(out, want, "triton_attention(q, k, v) of the counted call",
                 "The counted call must first give the right answer.")
    check_kernel_work(reply, "TritonAttention.forward", least_flops=4 * 32 * 32 * 16 * 2,
                        least_addressed=q.numel() + k.numel() + v.numel())
