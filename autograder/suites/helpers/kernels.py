"""What the kernel suites share (the triton_attention assignment): inputs laid out in memory as the
grader chooses, attention and its logsumexp on the grader's side, and what a call's kernels must
have done, counted where the kernel runs and in torch (docs/kernels.md, docs/measured.md)."""

import contextlib
import math

import pytest
import torch

from autograder.harness import checks
from autograder.harness.checks import Feedback
from autograder.harness.context import Strided
from autograder.suites.helpers.common import attention_lse, counted, randn

# The words of the error a kernel gets when a load or store leaves every tensor it was given.
OUT_OF_BOUNDS = ("OutOfBounds",)


# On a GPU tl.dot multiplies float32 tiles in TF32 (a 10-bit mantissa) unless the kernel asks for
# "ieee", and Triton's GPU compiler may turn a broadcast product and its sum into such a tl.dot: float32
# results of a correct kernel then agree with attention to about 1e-3, as the notebook's own checks
# allow there.  The mistakes of the catalogue are wrong by far more.
TF32 = dict(rtol=1e-2, atol=1e-2)


@pytest.fixture(autouse=True)
def tf32_on_a_gpu(student):
    """float32 compared at TF32's precision where the kernels run on a GPU (the harness says where:
    the student's `device`), for the time of each test of a suite that binds this fixture
    (tf32_on_a_gpu = A.tf32_on_a_gpu); Triton's interpreter keeps checks.TOLERANCES'."""
    on_gpu = student.device == "cuda"
    with checks.tolerances({torch.float32: TF32}) if on_gpu else contextlib.nullcontext():
        yield


def laid_out(x):
    """x as the student's code will receive it: the same view of memory (its strides, and what lies
    between its elements), not a contiguous copy (Strided, as the harness hands it)."""
    return Strided(x)


def padded(x, extra=16, seed=None):
    """x as a view into a larger tensor: its last axis is followed by `extra` other elements in memory.
    They are NaN, so a kernel that reads past a row's end (a missing mask, a wrong stride) reads NaN
    instead of plausible numbers; or, with a seed, random finite numbers, so that a kernel walking x
    with another tensor's strides reads plausible numbers, which a recomputed mistake can name (NaN
    would make every such mistake look alike)."""
    wider = (*x.shape[:-1], x.shape[-1] + extra)
    storage = torch.full(wider, math.nan, dtype=x.dtype) if seed is None else randn(*wider, seed=seed).to(x.dtype)
    storage[..., :x.shape[-1]] = x
    return storage[..., :x.shape[-1]]


def sequence_major(x):
    """The same [B, H, S, D] values laid out as [B, S, H, D] in memory (a transposed view, as the
    heads of a projection come out): element [b, h, s, d] is not where a contiguous layout puts it."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def reference(q, k, v, causal=False):
    """(out, lse) that a kernel's answer is compared with: attention_lse in float64, whatever the
    inputs' dtype."""
    return attention_lse(q.double(), k.double(), v.double(), causal=causal)


def kernel_qkv(b, h, sq, sk, d, dtype=torch.float32, seed=0):
    return (randn(b, h, sq, d, seed=seed).to(dtype), randn(b, h, sk, d, seed=seed + 1).to(dtype),
            randn(b, h, sk, d, seed=seed + 2).to(dtype))


GRID = ("Launch the grid the statement gives (one program per row, or per query tile and head: "
        "(cdiv(Sq, BLOCK_M), B * H)), computed from the block sizes the call was given.")
# Errors of kernels written for other Triton versions or for a GPU only, and what to do instead.
TRITON_CRASHES = [
    (("0 active drivers",), "@triton.autotune (and anything else that benchmarks or compiles for a GPU) needs a GPU, "
                            "and the kernels are graded in Triton's interpreter: choose the block sizes and launch "
                            "the kernel yourself"),
    (("make_block_ptr", "'advance'", "Block pointers have been removed"),
     "block pointers (tl.make_block_ptr, tl.advance) are gone from Triton 3.9: compute the pointers from the "
     "strides (with masks), or use tl.make_tensor_descriptor"),
    (("create_descriptor_reduce",), "a tensor descriptor's atomics (desc.atomic_add and the rest) do not run in "
                                    "Triton's interpreter: use tl.atomic_add and the rest on pointers"),
    (("Uncounted",), "the kernel reaches memory by an operation of Triton's interpreter that the grader cannot "
                     "count: load and store with tl.load and tl.store, tensor descriptors (desc.load, desc.store) "
                     "or the tl.atomic_ operations"),
    (("trans_a", "trans_b"), "tl.dot takes no trans_a or trans_b since Triton 2.1: pass tl.trans(b)"),
    (("CompilationError",), "Triton could not compile the kernel for the GPU: its body is not Triton that a GPU "
                            "compiles (NumPy, Python lists or torch inside it, or a tl operation given what it "
                            "does not take); the GPU compiler's words above name the line"),
]
NOT_THE_KERNEL = ("The work must be your kernel's: launch it from the function, and compute inside it (tl.dot, "
                  "tl.exp, tl.sum): torch may allocate the outputs, but not compute the answer.")


def check_kernel_work(reply, what, least_flops=0, least_addressed=0, programs=None):
    """The call's kernels did the work: a kernel ran (and, in Triton's interpreter, its products reached
    `least_flops`, its loads read at least `least_addressed` distinct elements, and it ran the
    statement's grid of `programs` programs, and what the call returned is memory its kernels stored
    during it), and torch computed no exponential and almost no products (allocation, a scale of the
    inputs and copies of them are allowed).  Every count must have stayed whole, and no thread the
    notebook started may run beside the call (its work would not be counted)."""
    work = counted(reply, what)
    if work.exponentials:
        raise Feedback(f"{what} ran {work.exponentials} exponential or softmax operation(s) in torch.", NOT_THE_KERNEL)
    if work.interpreted and work.launches == 0:
        raise Feedback(f"{what} launched no Triton kernel.", NOT_THE_KERNEL)
    if work.torch_flops > max(least_flops // 8, 4096):
        raise Feedback(f"{what} did {work.torch_flops:,} floating-point operations in torch's products.", NOT_THE_KERNEL)
    if work.torch_flops + work.torch_elementwise > max(least_flops // 8, 4096):
        raise Feedback(f"{what} computed {work.torch_elementwise:,} floating-point results in torch's arithmetic "
                       "(divisions, sums, powers and the like) beside its products.", NOT_THE_KERNEL)
    if work.interpreted and work.kernel_flops < least_flops:
        unused = work.kernel_flops_made - work.kernel_flops
        unused = f" ({unused:,} more made whose results no store took)" if unused > 0 else ""
        raise Feedback(f"{what}'s kernels did {work.kernel_flops:,} floating-point operations in products whose "
                       f"results reached a store (tl.dot, *){unused}, fewer than the {least_flops:,} the computation "
                       "needs.", NOT_THE_KERNEL)
    if work.interpreted and work.distinct < least_addressed:
        raise Feedback(f"{what}'s kernels read {work.distinct:,} distinct elements (lanes a mask turns off read "
                       f"nothing), fewer than the {least_addressed:,} of its inputs.", NOT_THE_KERNEL)
    if work.interpreted and work.foreign_tensors:
        raise Feedback(f"{what} launched its kernels on {work.foreign_tensors} tensor(s) made before the call, "
                       "neither its inputs nor allocated during it.",
                       "Launch the kernel on the call's own inputs and on outputs the call allocates.")
    stored = work.output_stored
    if work.interpreted and stored is not None and stored < 1.0:
        raise Feedback(f"{1 - stored:.0%} of what {what} returned is memory its kernels did not store during the call.",
                       "Return the tensors your kernel stores into (allocate them, pass them to the launch, return "
                       "them): an answer kept from an earlier call, or copied after the kernel ran, is not its work.")
    if work.interpreted and programs is not None and work.programs != programs:
        raise Feedback(f"{what} ran {work.programs:,} programs; the statement's grid has {programs:,}.", GRID)
