"""Hidden tests for the NumPy softmax(x, axis=-1)."""

import numpy as np
import torch

from autograder.harness import checks
from autograder.suites.helpers.common import B, SK, SQ, crash_hint, named, randn


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "no_max": "exp(x) / sum(exp(x)) without subtracting the maximum (it overflows for large x)",
    "global_max": "subtracting the maximum of the whole array instead of each slice's",
    "global_sum": "normalising by the sum of the whole array instead of each slice's",
    "last_axis": "a softmax over the last axis whatever `axis` says",
    "axis_0": "a softmax over axis 0 instead of the given axis",
    "overflow": "np.exp overflows (or underflows to 0/0) for large scores: subtract the maximum of each slice "
                "before taking the exponential.",
    "keepdims": "Reduce with keepdims=True (np.max(x, axis=axis, keepdims=True)) so the shapes broadcast.",
    "axis": "Use the axis argument in every reduction (max and sum).",
    "float64": "Avoid converting to float64 (np.float64(...), astype).",
    "in_place": "In-place operations such as x -= x.max(...) modify the caller's array; compute x - x.max(...) "
                "into a new array.",
}


def softmax(student, x, **kwargs):
    """The student's softmax; returns (result, the input as it is after the call)."""
    with crash_hint(CAUSES["keepdims"]):
        reply = student.call("softmax", x, echo_args=True, **kwargs)
    return checks.tensor(reply["output"], "softmax(x)", "ndarray"), reply["args_after"][0]


def numpy_softmax(x, axis=-1):
    return torch.softmax(torch.from_numpy(x), dim=axis).numpy()


def named_mistakes(x, axis=-1):
    """What each named mistake gives for softmax(x, axis)."""
    with np.errstate(all="ignore"):
        slice_max = x - x.max(axis=axis, keepdims=True)
        found = named(CAUSES,
                        no_max=np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True),
                        global_max=np.exp(x - x.max()) / np.exp(x - x.max()).sum(axis=axis, keepdims=True),
                        global_sum=np.exp(slice_max) / np.exp(slice_max).sum())
        if x.ndim >= 2:
            found.update(named(CAUSES, last_axis=numpy_softmax(x, -1), axis_0=numpy_softmax(x, 0)))
    return found


def scores(*shape, seed=0, dtype=np.float64):
    return randn(*shape, seed=seed).numpy().astype(dtype) * 3


def test_is_a_softmax(student):
    """The gate, on one 1-D slice: positive probabilities that follow the order of the scores."""
    x = scores(SK, seed=8)
    result, _ = softmax(student, x)
    checks.shape(result, x.shape, "softmax of a 1-D array")
    probabilities = np.asarray(result, dtype=np.float64)
    checks.require(bool(np.all(np.isfinite(probabilities)) and np.all(probabilities > 0)),
                   "softmax(x) of ordinary scores is not made of positive numbers, so it is not a softmax yet.")
    checks.require(np.array_equal(np.argsort(probabilities), np.argsort(x)) and
                   bool(np.all(np.diff(np.sort(probabilities)) > 0)),
                   "softmax(x) does not follow the scores (a larger score must get a larger probability), so it "
                   "ignores its input: it is not a softmax yet.")


def test_returns_an_array_of_the_same_shape(student):
    for shape in [(SK,), (SQ, SK), (B, SQ, SK)]:
        result, _ = softmax(student, scores(*shape))
        checks.shape(result, shape, f"softmax of a {len(shape)}-D array", CAUSES["keepdims"])


def test_matches_softmax(student):
    x = scores(B, SQ, SK, seed=1)
    result, _ = softmax(student, x)
    checks.close(result, numpy_softmax(x), "softmax(x)", "softmax(x) = exp(x - max) / sum(exp(x - max)).",
                 named_mistakes(x))


def test_slices_sum_to_one(student):
    x = scores(SQ, SK, seed=2)
    result, _ = softmax(student, x)
    checks.shape(result, x.shape, "softmax(x)")
    checks.rows_sum_to_one(result, "softmax(x)", mistakes=named_mistakes(x))


def test_survives_large_inputs(student):
    x = scores(SQ, SK, seed=3)
    for offset in (1000.0, -1000.0):
        result, _ = softmax(student, x + offset)
        checks.finite(result, f"softmax(x {'+' if offset > 0 else '-'} 1000)", CAUSES["overflow"])
        checks.close(result, numpy_softmax(x), f"softmax(x {'+' if offset > 0 else '-'} 1000)", "",
                     named_mistakes(x + offset))


def test_rows_on_different_scales(student):
    x = scores(SQ, SK, seed=4)
    x[0] += 2000.0  # one row far above the others
    result, _ = softmax(student, x)
    checks.finite(result, "softmax of rows on very different scales", mistakes=named_mistakes(x))
    checks.close(result, numpy_softmax(x), "softmax of rows on very different scales", "", named_mistakes(x))


def test_respects_axis(student):
    x = scores(B, SQ, SK, seed=5)
    for axis in (0, 1, -2):
        result, _ = softmax(student, x, axis=axis)
        checks.close(result, numpy_softmax(x, axis), f"softmax(x, axis={axis})",
                     CAUSES["axis"], named_mistakes(x, axis))


def test_keeps_float32(student):
    x = scores(SQ, SK, seed=6, dtype=np.float32)
    result, _ = softmax(student, x)
    checks.dtype(result, np.dtype(np.float32), "softmax of a float32 array",
                 CAUSES["float64"])


def test_leaves_input_unchanged(student):
    x = scores(SQ, SK, seed=7)
    _, after = softmax(student, x.copy())
    checks.require(np.array_equal(after, x), "softmax(x) changed the array it was given.",
                   CAUSES["in_place"])
