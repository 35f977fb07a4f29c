"""Hidden tests for triton_softmax(x) -> softmax over each row of x, by the student's softmax_kernel.

The kernel runs in Triton's interpreter in the student's process (on the CUDA device where the grader
has one); a load or store outside every tensor of the launch stops it with OutOfBounds.  The strided
test's rows are a slice of wider rows, so a row found from a contiguous layout shows in the values."""

import torch

from autograder.harness import checks
from autograder.suites.helpers.common import check_inputs_unchanged, crash_hint, named, randn
from autograder.suites.helpers.kernels import OUT_OF_BOUNDS, TRITON_CRASHES, check_kernel_work, laid_out

CAUSES = {
    "no_mask": "a load or store without the mask cols < n_cols: the lanes of the block past the row's end (BLOCK is "
               "the next power of two) read and write outside the row",
    "other_zero": "masked lanes loaded as 0 instead of -inf: exp(0 - max) adds to the row's sum",
    "stride": "the row's start taken as row * n_cols instead of row * x_row_stride (x.stride(0)): rows lie "
              "x.stride(0) elements apart in memory",
    "no_max": "exp(x) without subtracting the row's maximum (it overflows for large scores)",
    "padding_max": "a row's maximum taken over the padding lanes too (the lanes past n_cols loaded as 0, then left "
                   "out of the sum): where every score of a row lies far below 0 that maximum is 0, exp(x - 0) "
                   "underflows to 0 in every lane, and the row divides 0 by 0",
    "dtype": "The output must have x's dtype: allocate it with torch.empty_like(x) or dtype=x.dtype.",
    "in_place": "the softmax stored over its input: allocate the output (torch.empty_like(x)) and leave x as it was",
    "fixed_block": "a BLOCK of fixed size: a row wider than it is cut short; BLOCK must cover the whole row, "
                   "triton.next_power_of_2(n_cols)",
}
STATEMENT = ("One program per row: load x_ptr + row * x_row_stride + tl.arange(0, BLOCK) with mask cols < n_cols and "
             "other=-inf, subtract the maximum, exponentiate, divide by the sum, store with the same mask.")


def softmax(student, x, **options):
    """(the output, the reply) of the student's triton_softmax(x)."""
    with crash_hint([(OUT_OF_BOUNDS, CAUSES["no_mask"])] + TRITON_CRASHES):
        reply = student.call("triton_softmax", x, **options)
    return checks.tensor(reply["output"], "triton_softmax(x)"), reply


def named_mistakes(x):
    """What each named mistake returns for x (a view into a larger tensor)."""
    x64 = x.double()
    rows, cols = x.shape
    block = 1 << (cols - 1).bit_length()
    zeros = torch.zeros(rows, block - cols, dtype=torch.float64)
    other_zero = torch.softmax(torch.cat([x64, zeros], dim=1), dim=-1)[:, :cols]
    memory = torch.as_strided(x, ((rows - 1) * x.stride(0) + cols,), (1,)).double()   # x's rows as they lie in memory
    contiguous_rows = torch.stack([memory[r * cols:(r + 1) * cols] for r in range(rows)])
    exponentials = torch.exp(x.float()).double()
    shifted = torch.exp(x.float() - x.float().amax(-1, keepdim=True).clamp(min=0)).double()   # padding's 0 in the max
    # (with every score below 0 the padding's maximum is no_max's exp(x): named first, it is the one
    # such rows reach, since no_max already fails the scores near +1000 before them)
    found = dict(padding_max=shifted / shifted.sum(-1, keepdim=True), other_zero=other_zero,
                 stride=torch.softmax(contiguous_rows, dim=-1),
                 no_max=exponentials / exponentials.sum(-1, keepdim=True))
    return named(CAUSES, **{key: value.to(x.dtype) for key, value in found.items()})


def compare(student, x, what, hint=STATEMENT):
    y, _ = softmax(student, x)
    checks.close(y, torch.softmax(x.double(), dim=-1).to(x.dtype), what, hint, lambda: named_mistakes(x))


def rows(n, cols, seed, scale=2.0, dtype=torch.float32):
    return (randn(n, cols, seed=seed) * scale).to(dtype)


def test_is_a_softmax(student):
    """The gate: positive rows that sum to one and follow the order of the scores."""
    x = rows(5, 64, seed=1)
    y, _ = softmax(student, x)
    checks.shape(y, x.shape, "triton_softmax(x)")
    probabilities = y.double()
    checks.require(bool(torch.isfinite(probabilities).all() and (probabilities > 0).all()),
                   "triton_softmax(x) of ordinary scores is not made of positive numbers, so it is not a softmax yet.")
    checks.require(bool(torch.allclose(probabilities.sum(-1), torch.ones(5, dtype=torch.float64), atol=1e-3)),
                   "The rows of triton_softmax(x) do not sum to one, so it is not a softmax yet.")
    checks.require(bool((torch.argsort(probabilities, dim=-1) == torch.argsort(x.double(), dim=-1)).all()),
                   "triton_softmax(x) does not follow the scores (a larger score must get a larger probability), "
                   "so it ignores its input: it is not a softmax yet.")


def test_returns_the_shape_and_dtype(student):
    x = rows(3, 32, seed=2)
    y, _ = softmax(student, x)
    checks.shape(y, x.shape, "triton_softmax(x)", "One output row per input row, as wide.")
    checks.dtype(y, torch.float32, "triton_softmax(x)", CAUSES["dtype"])


def test_matches_softmax(student):
    x = rows(6, 64, seed=3)
    y, reply = softmax(student, x, echo_args=True)
    checks.close(y, torch.softmax(x.double(), dim=-1).float(), "triton_softmax(x), 6 rows of 64", STATEMENT,
                 lambda: named_mistakes(x))
    check_inputs_unchanged(reply, (x,), ("x",), "triton_softmax(x)", CAUSES["in_place"])


def cut_short(x, y):
    """Whether y is the softmax of a fixed number of x's first columns (a power of two below its
    width), the rest of each row left unwritten: a BLOCK of fixed size."""
    for block in (16, 32, 64, 128, 256):
        if block < x.shape[1] and checks.is_close(y[:, :block], torch.softmax(x[:, :block].double(), -1).to(x.dtype)):
            return True
    return False


def test_columns_not_a_power_of_two(student):
    for cols, seed in ((100, 4), (37, 5), (300, 12)):
        x = rows(4, cols, seed=seed)
        y, _ = softmax(student, x)
        what = f"triton_softmax(x), rows of {cols} (BLOCK {1 << (cols - 1).bit_length()})"
        checks.shape(y, x.shape, what)
        if not checks.is_close(y, torch.softmax(x.double(), dim=-1).float()) and cut_short(x, y):
            raise checks.Feedback(f"{what}: only the first columns of each row hold its softmax.", CAUSES["fixed_block"])
        checks.close(y, torch.softmax(x.double(), dim=-1).float(), what,
                     "Mask the lanes past n_cols on the load (other=-inf) and on the store.", lambda: named_mistakes(x))


def test_rows_with_a_stride(student):
    big = randn(5, 96, seed=6).float() * 2
    x = big[:, 10:74]   # 64 columns, rows 96 elements apart
    y, _ = softmax(student, laid_out(x))
    checks.close(y, torch.softmax(x.double(), dim=-1).float(), "triton_softmax(big[:, 10:74]), rows 96 elements apart",
                 "Row r starts at x_ptr + r * x.stride(0).", lambda: named_mistakes(x))


def test_keeps_float16(student):
    x = rows(4, 48, seed=7, dtype=torch.float16)
    y, _ = softmax(student, x)
    checks.dtype(y, torch.float16, "triton_softmax(x) of float16 x", CAUSES["dtype"])
    checks.close(y, torch.softmax(x.double(), dim=-1).half(), "triton_softmax(x), float16 rows of 48",
                 "Compute in float32 inside the kernel (.to(tl.float32) after the load).", lambda: named_mistakes(x))


def test_survives_large_scores(student):
    compare(student, rows(3, 64, seed=8, scale=300.0), "triton_softmax(x) of scores near ±1000",
            "Subtract the row's maximum before tl.exp.")
    # Every score near -10000, in rows of 37 (a BLOCK of 64): the row's maximum must be its own, not the
    # padding lanes' (exp(x - 0) underflows to 0 in every lane).
    compare(student, rows(4, 37, seed=10) - 1e4, "triton_softmax(x) of rows of 37 scores near -10000",
            "The row's maximum is over its own n_cols lanes: load the lanes past n_cols as -inf.")


def test_the_kernel_does_the_work(student):
    """One counted call: its values first, then what its kernel did (every element loaded, in
    Triton's interpreter) and what torch did (no exponential, no product)."""
    x = rows(8, 64, seed=9)
    y, reply = softmax(student, x, count=True)
    checks.close(y, torch.softmax(x.double(), dim=-1).float(), "triton_softmax(x) of the counted call",
                 "The counted call must first give the right answer.", lambda: named_mistakes(x))
    check_kernel_work(reply, "triton_softmax(x)", least_addressed=x.numel(), programs=x.shape[0])
