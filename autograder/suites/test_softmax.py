"""Hidden tests for the NumPy softmax(x, axis=-1)."""

import numpy as np

from autograder.harness import checks
from autograder.suites import adapters as A
from autograder.suites.mistakes import softmax_mistakes

KEEPDIMS_HINT = "Reduce with keepdims=True (np.max(x, axis=axis, keepdims=True)) so the shapes broadcast."


def scores(*shape, seed=0, dtype=np.float64):
    return A.randn(*shape, seed=seed).numpy().astype(dtype) * 3


def test_is_a_softmax(student):
    """The gate, on one 1-D slice: positive probabilities that follow the order of the scores."""
    x = scores(A.SK, seed=8)
    result, _ = A.softmax(student, x)
    checks.shape(result, x.shape, "softmax of a 1-D array")
    probabilities = np.asarray(result, dtype=np.float64)
    checks.require(bool(np.all(np.isfinite(probabilities)) and np.all(probabilities > 0)),
                   "softmax(x) of ordinary scores is not made of positive numbers, so it is not a softmax yet.")
    checks.require(np.array_equal(np.argsort(probabilities), np.argsort(x)) and
                   bool(np.all(np.diff(np.sort(probabilities)) > 0)),
                   "softmax(x) does not follow the scores (a larger score must get a larger probability), so it "
                   "ignores its input: it is not a softmax yet.")


def test_returns_an_array_of_the_same_shape(student):
    for shape in [(A.SK,), (A.SQ, A.SK), (A.B, A.SQ, A.SK)]:
        result, _ = A.softmax(student, scores(*shape))
        checks.shape(result, shape, f"softmax of a {len(shape)}-D array", KEEPDIMS_HINT)


def test_matches_softmax(student):
    x = scores(A.B, A.SQ, A.SK, seed=1)
    result, _ = A.softmax(student, x)
    checks.close(result, A.numpy_softmax(x), "softmax(x)", "softmax(x) = exp(x - max) / sum(exp(x - max)).",
                 softmax_mistakes(x))


def test_slices_sum_to_one(student):
    x = scores(A.SQ, A.SK, seed=2)
    result, _ = A.softmax(student, x)
    checks.shape(result, x.shape, "softmax(x)")
    checks.rows_sum_to_one(result, "softmax(x)", mistakes=softmax_mistakes(x))


def test_survives_large_inputs(student):
    x = scores(A.SQ, A.SK, seed=3)
    for offset in (1000.0, -1000.0):
        result, _ = A.softmax(student, x + offset)
        hint = ("np.exp overflows (or underflows to 0/0) for large scores: subtract the maximum of each "
                "slice before taking the exponential.")
        checks.finite(result, f"softmax(x {'+' if offset > 0 else '-'} 1000)", hint)
        checks.close(result, A.numpy_softmax(x), f"softmax(x {'+' if offset > 0 else '-'} 1000)", "",
                     softmax_mistakes(x + offset))


def test_rows_on_different_scales(student):
    x = scores(A.SQ, A.SK, seed=4)
    x[0] += 2000.0  # one row far above the others
    result, _ = A.softmax(student, x)
    checks.finite(result, "softmax of rows on very different scales", mistakes=softmax_mistakes(x))
    checks.close(result, A.numpy_softmax(x), "softmax of rows on very different scales", "", softmax_mistakes(x))


def test_respects_axis(student):
    x = scores(A.B, A.SQ, A.SK, seed=5)
    for axis in (0, 1, -2):
        result, _ = A.softmax(student, x, axis=axis)
        checks.close(result, A.numpy_softmax(x, axis), f"softmax(x, axis={axis})",
                     "Use the axis argument in every reduction (max and sum).", softmax_mistakes(x, axis))


def test_keeps_float32(student):
    x = scores(A.SQ, A.SK, seed=6, dtype=np.float32)
    result, _ = A.softmax(student, x)
    checks.dtype(result, np.dtype(np.float32), "softmax of a float32 array",
                 "Avoid converting to float64 (np.float64(...), astype).")


def test_leaves_input_unchanged(student):
    x = scores(A.SQ, A.SK, seed=7)
    _, after = A.softmax(student, x.copy())
    checks.require(np.array_equal(after, x), "softmax(x) changed the array it was given.",
                   "In-place operations such as x -= x.max(...) modify the caller's array; "
                   "compute x - x.max(...) into a new array.")
