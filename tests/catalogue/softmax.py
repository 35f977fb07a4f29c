"""The catalogue of softmax: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_softmax.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative
from tests.catalogue.snippets import _softmax


MISTAKES = [
    Mistake("no max subtraction", "overflow",
            fails=("rows_on_different_scales", "survives_large_inputs"),
            code=_softmax(
        "    e = np.exp(x)\n    return e / e.sum(axis=axis, keepdims=True)\n")),
    Mistake("global max instead of per-row", "global_max",
            fails=("rows_on_different_scales",),
            code=_softmax(
        "    e = np.exp(x - np.max(x))\n    return e / e.sum(axis=axis, keepdims=True)\n")),
    Mistake("max without keepdims", "keepdims",
            fails=("keeps_float32", "leaves_input_unchanged", "matches_softmax", "respects_axis",
                   "returns_an_array_of_the_same_shape", "rows_on_different_scales", "slices_sum_to_one",
                   "survives_large_inputs"),
            code=_softmax(
        "    e = np.exp(x - np.max(x, axis=axis))\n    return e / np.sum(e, axis=axis)\n")),
    Mistake("axis argument ignored", "last_axis",
            fails=("respects_axis",),
            code=_softmax(
        "    e = np.exp(x - x.max(axis=-1, keepdims=True))\n    return e / e.sum(axis=-1, keepdims=True)\n")),
    Mistake("normalised by the whole array's sum", "global_sum",
            fails=("matches_softmax", "respects_axis", "slices_sum_to_one"),
            also_fails=("rows_on_different_scales", "survives_large_inputs"),
            code=_softmax(
        "    e = np.exp(x - x.max(axis=axis, keepdims=True))\n    return e / e.sum()\n")),
    Mistake("modifies its input in place", "in_place",
            fails=("leaves_input_unchanged",),
            code=_softmax(
        "    x -= x.max(axis=axis, keepdims=True)\n    np.exp(x, out=x)\n"
        "    x /= x.sum(axis=axis, keepdims=True)\n    return x\n")),
    Mistake("casts to float64", "float64",
            fails=("keeps_float32",),
            code=_softmax(
        "    x = np.asarray(x, dtype=np.float64)\n    e = np.exp(x - x.max(axis=axis, keepdims=True))\n"
        "    return e / e.sum(axis=axis, keepdims=True)\n")),
]


ALTERNATIVES = [
    Alternative("logsumexp form", '''def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    log_norm = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))
    return np.exp(x - log_norm)
'''),
    Alternative("moveaxis and expand_dims, printing", '''def softmax(x, axis=-1):
    print("softmax called with shape", x.shape)
    moved = np.moveaxis(x, axis, -1)
    shifted = moved - np.expand_dims(moved.max(axis=-1), -1)
    e = np.exp(shifted)
    return np.moveaxis(e / np.expand_dims(e.sum(axis=-1), -1), -1, axis)
'''),
]


DEGENERATES = [
    Degenerate("ones / n (ignores its input)", _softmax("    return np.ones_like(x) / x.shape[axis]\n")),
    Degenerate("zeros", _softmax("    return np.zeros_like(x)\n")),
    Degenerate("NaN", _softmax("    return np.full_like(x, np.nan)\n")),
    Degenerate("returns its input", _softmax("    return x.copy()\n")),
]
