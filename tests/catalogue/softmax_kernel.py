"""The catalogue of softmax_kernel: its mistakes (with the cause each must be named by, a key of CAUSES
in autograder/suites/test_softmax_kernel.py, and the tests it may fail), correct alternatives, degenerate
answers and answers that game the kernel's measured point."""

from functools import partial

from tests.catalogue.entries import UNDEFINED_ON_A_GPU, Degenerate, Gaming, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("triton_attention")["softmax_kernel"]
# Every test that launches the kernel (all but the gate that reads what the answer computes).
KERNEL_CALLS = ("returns_the_shape_and_dtype", "matches_softmax", "columns_not_a_power_of_two", "rows_with_a_stride",
                "keeps_float16", "survives_large_scores", "the_kernel_does_the_work")
changed = partial(edited, SOLUTION)
UNEVEN = ("columns_not_a_power_of_two",)
LOAD = 'x = tl.load(x_ptr + row * x_row_stride + cols, mask=inside, other=-float("inf")).to(tl.float32)'
STORE = "tl.store(out_ptr + row * out_row_stride + cols, y, mask=inside)"


MISTAKES = [
    Mistake("no mask on the load or the store", "no_mask",
            fails=UNEVEN + ("keeps_float16", "survives_large_scores"), on_gpu=UNDEFINED_ON_A_GPU,
            code=changed(LOAD, 'x = tl.load(x_ptr + row * x_row_stride + cols).to(tl.float32)',
                         STORE, "tl.store(out_ptr + row * out_row_stride + cols, y)")),
    Mistake("the lanes past the row loaded as 0", "other_zero",
            fails=UNEVEN + ("keeps_float16", "survives_large_scores"),
            code=changed('mask=inside, other=-float("inf"))', "mask=inside, other=0.0)")),
    # Right wherever some score of a row is above 0: the padding's 0 is then no row's maximum.
    Mistake("the lanes past the row loaded as 0 and left out of the sum, but not of the maximum", "padding_max",
            fails=("survives_large_scores",),
            code=changed('mask=inside, other=-float("inf"))', "mask=inside, other=0.0)",
                         "numerator = tl.exp(x) ", "numerator = tl.where(inside, tl.exp(x), 0.0) ")),
    Mistake("rows found at row * n_cols (a contiguous layout assumed)", "stride",
            fails=("rows_with_a_stride",),
            code=changed("x_ptr + row * x_row_stride + cols", "x_ptr + row * n_cols + cols")),
    Mistake("exp without subtracting the maximum", "no_max",
            fails=("survives_large_scores",),
            code=changed("    x = x - tl.max(x, axis=0)                                # the row's maximum becomes 0: no overflow\n",
                         "")),
    Mistake("BLOCK fixed at 128 (the widest row tried in the notebook is 100)", "fixed_block",
            fails=UNEVEN,
            code=changed("BLOCK=triton.next_power_of_2(cols))", "BLOCK=128)")),
    Mistake("the softmax stored over its input", "in_place",
            fails=("matches_softmax",),
            code=changed("    out = torch.empty(rows, cols, dtype=x.dtype, device=x.device)\n", "    out = x\n")),
    Mistake("a float32 output for every input", "dtype",
            fails=("keeps_float16",),
            code=changed("out = torch.empty(rows, cols, dtype=x.dtype, device=x.device)",
                         "out = torch.empty(rows, cols, dtype=torch.float32, device=x.device)")),
]


ALTERNATIVES = [
    Alternative("two passes over the row in blocks of 16 (a row longer than one block)", '''@triton.jit
def softmax_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    start = x_ptr + row * x_row_stride
    top = tl.full([16], -float("inf"), tl.float32)
    for first in range(0, n_cols, 16):
        cols = first + tl.arange(0, 16)
        top = tl.maximum(top, tl.load(start + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32))
    top_all = tl.max(top, axis=0)
    total = tl.zeros([16], tl.float32)
    for first in range(0, n_cols, 16):
        cols = first + tl.arange(0, 16)
        total += tl.exp(tl.load(start + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32) - top_all)
    denominator = tl.sum(total, axis=0)
    for first in range(0, n_cols, 16):
        cols = first + tl.arange(0, 16)
        x = tl.load(start + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        tl.store(out_ptr + row * out_row_stride + cols, tl.exp(x - top_all) / denominator, mask=cols < n_cols)


def triton_softmax(x):
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    softmax_kernel[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1], BLOCK=16)
    return out
'''),
    Alternative("a contiguous copy first, the row stride from the shape", '''@triton.jit
def softmax_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    r = tl.program_id(axis=0)
    idx = tl.arange(0, BLOCK)
    valid = idx < n_cols
    logits = tl.load(x_ptr + r * x_row_stride + idx, mask=valid, other=float("-inf"))
    logits = logits.to(tl.float32)
    shifted = logits - tl.max(logits, axis=0)
    e = tl.where(valid, tl.exp(shifted), 0.0)
    tl.store(out_ptr + r * out_row_stride + idx, e / tl.sum(e, axis=0), mask=valid)


def triton_softmax(x):
    n_rows, n_cols = x.shape
    source = x.contiguous()
    result = torch.empty_like(source)
    softmax_kernel[(n_rows,)](result, source, n_cols, n_cols, n_cols, BLOCK=max(16, triton.next_power_of_2(n_cols)))
    return result
'''),
]


DEGENERATES = [
    Degenerate("uniform rows (1 / n_cols)", changed(
        "    y = numerator / tl.sum(numerator, axis=0)\n",
        "    y = tl.where(inside, 1.0 / n_cols, 0.0)\n")),
    Degenerate("zeros", changed("    y = numerator / tl.sum(numerator, axis=0)\n", "    y = numerator * 0.0\n")),
    Degenerate("the input handed back", changed("    y = numerator / tl.sum(numerator, axis=0)\n",
                                                "    y = tl.load(x_ptr + row * x_row_stride + cols, mask=inside)\n")),
    Degenerate("NaN", changed("    y = numerator / tl.sum(numerator, axis=0)\n", "    y = numerator * float('nan')\n")),
]


# The softmax worked out in NumPy from x's bytes as torch.save wrote them (its numbers at the file's end),
# then written into the output by a kernel that only copies (BROUGHT_BACK: how NumPy's answer comes back).
_NUMPY_SOFTMAX = '''

import os

import numpy as np


@triton.jit
def copy_kernel(out_ptr, src_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    y = tl.load(src_ptr + row * n_cols + cols, mask=inside)
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=inside)


def triton_softmax(x):
    rows, cols = x.shape
    kept = x.float().contiguous().clone()
    path = os.path.join(os.getcwd(), "scores.pt")
    torch.save(kept, path, _use_new_zipfile_serialization=False)
    scores = np.fromfile(path, dtype=np.uint8)[-4 * kept.numel():].view(np.float32).reshape(rows, cols)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    answer = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    source = BROUGHT_BACK
    out = torch.empty(rows, cols, dtype=x.dtype, device=x.device)
    copy_kernel[(rows,)](out, source, cols, BLOCK=triton.next_power_of_2(cols))
    return out
'''


GAMING = [
    # NumPy inside the kernel's body, on the row the interpreter loaded (its .handle.data): Triton's
    # interpreter runs a body as Python, the GPU compiler refuses it (sandbox/inside/gpu_compiler.py).
    Gaming("NumPy on the loaded row inside the kernel's body", '''import numpy as np


@triton.jit
def softmax_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=inside, other=-float("inf")).to(tl.float32)
    e = np.exp(x.handle.data - x.handle.data.max())
    x.handle.data = (e / e.sum()).astype(np.float32)
    tl.store(out_ptr + row * out_row_stride + cols, x, mask=inside)


''' + SOLUTION[SOLUTION.index("def triton_softmax"):], loses=KERNEL_CALLS, says="not Triton that a GPU compiles"),
    # The thread is started when the cell runs, before any counted call: torch's count does not see
    # another thread's work, and the grader holds the call itself to one thread; the reading of the code
    # refuses threads and queues in the first place (deny by default: reach.ALLOWED_MODULES).
    # An exponential by another name: e raised to a tensor, a tensor of e's raised to it (counter.py).
    Gaming("the softmax from a tensor of e's raised to the scores, a kernel launched for show", SOLUTION + '''

_by_the_kernel = triton_softmax


def triton_softmax(x):
    _by_the_kernel(x)
    powers = torch.full_like(x.float(), 2.718281828459045) ** (x.float() - x.float().amax(-1, keepdim=True))
    return (powers / powers.sum(-1, keepdim=True)).to(x.dtype)
''', loses=("the_kernel_does_the_work",), says="exponential"),
    Gaming("torch's softmax in a thread started when the cell ran, a kernel launched for show", SOLUTION + '''

import queue
import threading

_asked, _answered = queue.Queue(), queue.Queue()


def _softmax_server():
    while True:
        rows = _asked.get()
        _answered.put(torch.softmax(rows.float(), dim=-1).to(rows.dtype))


threading.Thread(target=_softmax_server, daemon=True).start()
_by_the_kernel = triton_softmax


def triton_softmax(x):
    _by_the_kernel(x)
    _asked.put(x)
    return _answered.get()
''', loses=KERNEL_CALLS, says="imports queue"),   # the reading flags it (the thread beside a counted call is seen, too)
    # The interpreter reached through vars() and built names, its load swapped during the call and put
    # back before it returns: the reading of the code flags it (and the wrappers would see the swap).
    Gaming("the interpreter's load swapped during the call and put back", SOLUTION + '''

_by_the_kernel = triton_softmax


def triton_softmax(x):
    space = vars(triton)["run" + "time"]
    space = vars(space)["inter" + "preter"]
    builder = vars(space)["Interpreter" + "Builder"]
    counted = vars(builder)["create_masked_load"]
    type.__setattr__(builder, "create_masked_load", lambda self, *args: counted(self, *args))
    try:
        return _by_the_kernel(x)
    finally:
        type.__setattr__(builder, "create_masked_load", counted)
''', loses=("returns_the_shape_and_dtype", "matches_softmax", "columns_not_a_power_of_two", "rows_with_a_stride",
           "keeps_float16", "survives_large_scores", "the_kernel_does_the_work"),
        says="reaches into what enforces that"),   # a from-scratch exercise: such code earns nothing of it
    Gaming("the softmax in Python lists (tolist), a kernel launched for show", SOLUTION + '''

_by_the_kernel = triton_softmax


def triton_softmax(x):
    _by_the_kernel(x)
    rows = [[math.exp(value - max(row)) for value in row] for row in x.float().tolist()]
    return torch.tensor([[value / sum(row) for value in row] for row in rows], dtype=x.dtype, device=x.device)
''', loses=("the_kernel_does_the_work",), says="Python list"),
    # A number raised to a tensor is an exponential the count reads as one (counter.py); and what is
    # returned is not what the kernel stored (kernels.py's output_stored).
    Gaming("the softmax from math.e ** x in torch, the kernel run for show", SOLUTION + '''

_by_the_kernel = triton_softmax


def triton_softmax(x):
    _by_the_kernel(x)
    e = math.e ** (x.float() - x.float().amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
''', loses=("the_kernel_does_the_work",), says="exponential"),
    # The numbers taken out of torch without Tensor.numpy (torch.save to a file, read back by np.fromfile),
    # the softmax computed in NumPy, and brought back for a kernel that only copies it: a counted call
    # computes on memory torch keeps to itself, with few numbers in or out of Python (counter.py), so
    # NumPy's answer cannot come back in, by either door.
    Gaming("the softmax in NumPy on the bytes torch.save wrote, brought back as Python numbers for a copying kernel",
           SOLUTION + _NUMPY_SOFTMAX.replace("BROUGHT_BACK", "torch.tensor(answer.tolist())"),
           loses=("the_kernel_does_the_work",), says="work was done outside torch"),
    Gaming("the softmax in NumPy on the bytes torch.save wrote, copied into a torch tensor for a copying kernel",
           SOLUTION + _NUMPY_SOFTMAX.replace("BROUGHT_BACK", "torch.empty(rows, cols).copy_(torch.from_numpy(answer))"),
           loses=("the_kernel_does_the_work",), says="work was done outside torch"),
    # The same answer brought back as a tensor torch itself allocated and can resize, which no operator of the
    # call made: a storage made from its bytes and set_() onto a tensor, or torch.load of the pickle torch.save
    # wrote with NumPy's bytes in place of x's.  A counted call reads only what it was given and what its own
    # operators made (counter.NOT_SEEN: provenance, not the memory's properties), so neither comes back in.
    Gaming("the softmax in NumPy on the bytes torch.save wrote, brought back through a storage made from its bytes",
           SOLUTION + _NUMPY_SOFTMAX.replace("BROUGHT_BACK", (
               "torch.empty(rows, cols).copy_(torch.empty(0, dtype=torch.float32).set_("
               "torch.UntypedStorage.from_buffer(answer.tobytes(), dtype=torch.uint8)).view(rows, cols))")),
           loses=("the_kernel_does_the_work",), says="work was done outside torch"),
    Gaming("the softmax in NumPy on the bytes torch.save wrote, brought back by torch.load of that pickle with "
           "NumPy's bytes in place of x's", SOLUTION + _NUMPY_SOFTMAX.replace("BROUGHT_BACK", (
               "(np.concatenate([np.fromfile(path, dtype=np.uint8)[:-answer.nbytes], answer.view(np.uint8).ravel()])"
               ".tofile(path), torch.load(path))[1]")),
           loses=("the_kernel_does_the_work",), says="work was done outside torch"),
    Gaming("torch's softmax, with a kernel launched beside it", SOLUTION.replace(
        "    return out\n", "    return torch.softmax(x.float(), dim=-1).to(x.dtype)\n"),
        loses=("the_kernel_does_the_work",), says="exponential or softmax operation"),
    Gaming("the softmax in torch from exp and sum (no kernel)", '''@triton.jit
def softmax_kernel(out_ptr, x_ptr, x_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    pass


def triton_softmax(x):
    e = torch.exp(x.float() - x.float().amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
''',
        loses=("the_kernel_does_the_work",), says="exponential or softmax operation"),
]
