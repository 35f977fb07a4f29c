"""Comparisons and the messages students see when one fails.

Every hidden test states its property through these helpers.  A failed check raises Feedback,
whose text says what was observed and the likely cause; it never contains the hidden tensors, the
expected values or test code.  It may name a call's sizes and small arguments (`causal_mask(1100)`,
the lengths of a padding mask): what a student needs to reproduce the failure, and nothing they can copy
into an answer that is a function.  Where the answer is numbers worked out from the student's own
variant, the right values appear only where the course's feedback policy lets them (`where`).
Anything else a test raises is reported as a grader error.

A cause (a suite's CAUSES entry) is either a description of what an answer does, a phrase without a
final full stop ("the scores not divided by sqrt(d_k)"), which the feedback words as "Likely cause: ..."
or "It matches what ... gives.", or an instruction, a sentence ("Slice the mask to mask[:T, :T]."),
shown as it is (`likely`, `known_mistake`).
"""

import contextlib
import contextvars
import math

import numpy as np
import torch

from autograder.pictures import Picture


class Feedback(AssertionError):
    """A failed check; str(feedback) is shown to the student as it is, with `picture` (a
    pictures.Picture), when the check drew one, beside it."""

    def __init__(self, observed, hint="", picture=None):
        self.observed, self.hint, self.picture = observed, hint, picture
        separator = "\n" if "\n" in observed else " "  # after a traceback, the hint gets its own line
        super().__init__(f"{observed}{separator}{hint}".strip())

    def text(self, said):
        """What the student sees, where `said` holds the hints already shown in this exercise's feedback:
        a hint said once is not said again (one cause, one mention), and is added to `said`."""
        if not self.hint or self.hint not in said:
            said.add(self.hint)
            return str(self)
        return f"{self.observed} (The hint given above applies here too.)"


# Tolerances, stated once.  float64 inputs let the grader demand near bit-level agreement with the
# reference; float32 leaves room for a different but correct order of operations (einsum vs
# matmul, a pre-scaled query, a manual softmax), whose rounding differs by a few ulps per step.
TOLERANCES = {
    torch.float64: dict(rtol=1e-7, atol=1e-9),
    torch.float32: dict(rtol=1e-4, atol=1e-5),
    torch.float16: dict(rtol=1e-2, atol=1e-3),
    torch.bfloat16: dict(rtol=2e-2, atol=1e-2),
}


_LOOSER = contextvars.ContextVar("looser_tolerances", default={})


def tolerance(dtype):
    """The tolerance for dtype: TOLERANCES', or a looser one where a suite said so (`tolerances`)."""
    return _LOOSER.get().get(dtype) or TOLERANCES.get(dtype, TOLERANCES[torch.float32])


@contextlib.contextmanager
def tolerances(looser):
    """Within the block, the tolerances of `looser` ({dtype: dict(rtol=, atol=)}) replace TOLERANCES'
    (the kernel suites on a GPU, where float32 products may be made in TF32)."""
    token = _LOOSER.set(dict(looser))
    try:
        yield
    finally:
        _LOOSER.reset(token)


def as_tensor(value):
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    return value


def is_close(actual, expected):
    actual, expected = as_tensor(actual), as_tensor(expected)
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return False
    actual = actual.to(expected.dtype) if actual.dtype != expected.dtype else actual
    return bool(torch.allclose(actual, expected, equal_nan=True, **tolerance(expected.dtype)))


def tensor(value, what, kind="tensor"):
    """Check that value is a tensor (or, with kind='ndarray', a NumPy array)."""
    wanted = np.ndarray if kind == "ndarray" else torch.Tensor
    if type(value) is not wanted:
        name = "a NumPy array" if kind == "ndarray" else "a torch tensor"
        raise Feedback(f"{what} should be {name}, but it is {_describe_type(value)}.")
    return value


def _describe_type(value):
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    return f"a {type(value).__name__}" if value is not None else "None"


def pair(value, what, names=("output", "weights")):
    """Check that a function returned a pair such as (output, weights), or as many items as `names`."""
    if not isinstance(value, (tuple, list)) or len(value) != len(names):
        kind = "a pair" if len(names) == 2 else f"{len(names)} items"
        raise Feedback(f"{what} should return {kind} ({', '.join(names)}), "
                       f"but it returned {_describe_type(value)}.")
    return value


def shape(value, expected, what, hint=""):
    tensor(value, what, "ndarray" if isinstance(value, np.ndarray) else "tensor")
    if tuple(value.shape) != tuple(expected):
        raise Feedback(f"{what} has shape {list(value.shape)}; expected {list(expected)}.", hint)


def broadcasts(value, target, what, hint=""):
    """value must be a tensor that broadcasts against a tensor of shape `target` without growing it
    (a mask against the scores), so that the grader's own operations on it cannot fail."""
    tensor(value, what)
    try:
        fits = value.dim() >= 2 and torch.broadcast_shapes(value.shape, target) == torch.Size(target)
    except RuntimeError:
        fits = False
    require(fits, f"{what} has shape {list(value.shape)}, which does not broadcast against {list(target)}.", hint)
    return value


def dtype(value, expected, what, hint="", inputs=None):
    """value's dtype must be `expected`: the inputs' dtype, or what the statement says for `inputs`."""
    if value.dtype != expected:
        said = ("the dtype should be kept." if inputs in (None, expected) else f"it should be {expected}.")
        raise Feedback(f"{what} has dtype {value.dtype} for {inputs or expected} inputs; {said}", hint)


def finite(value, what, hint="", mistakes=None):
    value = as_tensor(value)
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        count = int((~torch.isfinite(value)).sum())
        raise Feedback(f"{what} contains {count} NaN or infinite value(s).", known_mistake(value, mistakes) or hint)


def is_description(cause):
    """Whether a cause describes what an answer does (a phrase) rather than says what to do (a sentence)."""
    return not cause.rstrip().endswith((".", "!", "?"))


def likely(cause):
    """The feedback's sentence for a cause: "Likely cause: <description>." or the instruction as it is."""
    return f"Likely cause: {cause}." if is_description(cause) else cause


def where(shown, gives, value):
    """The end of a sentence that compares an answer with the right value worked out from the student's
    own numbers ("The scores are [...]" + this): ", where <gives> <value>" when the course's feedback
    policy shows values at the time of grading (shown: Student.values_shown), else ", which is not what
    <gives>": before the due date one wrong try must not hand over the answer."""
    return f", where {gives} {value}" if shown else f", which is not what {gives}"


def _short(value):
    """A value of an answer as a failure names it: a tensor or array by its type and shape."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{'a tensor' if isinstance(value, torch.Tensor) else 'a NumPy array'} of shape {list(value.shape)}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _one(value):
    """A Python number from any form a notebook's own check takes for one: an int or a float (a NumPy
    scalar arrives as one), or a numeric array or tensor of one element (0-d or not); None for anything
    else (a bool is no number)."""
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iuf":
        value = value.item()
    elif isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool:
        value = value.item()
    return value if type(value) in (int, float) else None


def number(value, what, hint="", whole=False):
    """One number of an answer written as numbers, in every form the notebooks' own checks take (_one):
    the one rule of the suites for numbers.  whole: it must be a whole number (5 or 5.0), returned as an
    int; else a finite float.  Anything else fails with `what` and `hint`."""
    item = _one(value)
    fine = item is not None and math.isfinite(item) and (not whole or float(item).is_integer())
    require(fine, f"{what} is {_short(value)}, not {'a whole number' if whole else 'a finite number'}.", hint)
    return int(item) if whole else float(item)


def numbers(value, size, what, hint=""):
    """`size` numbers, as the notebooks' checks take them (np.array(value, dtype=float) of shape (size,)):
    a list or tuple of numbers (each as `number` takes it), or a 1-D array or tensor of `size` elements."""
    if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 1:
        value = value.tolist()
    require(isinstance(value, (list, tuple)) and len(value) == size,
            f"{what} is {_short(value)}, not {size} numbers.", hint)
    return [number(item, f"{what}[{index}]", hint) for index, item in enumerate(value)]


FLOAT32_HINT = ("It agrees with the correct values to about 7 digits only, the precision of float32: "
                "somewhere the computation runs in float32 (.float(), a float32 constant, np.float32). "
                "Keep the inputs' dtype throughout.")


def known_mistake(actual, mistakes):
    """'It matches what <mistake> gives.' when actual equals what one of the mistakes computes.
    mistakes may also be a function that returns them: the checks call it only for a wrong value,
    so a suite's recomputed mistakes cost nothing while the answers are right."""
    if callable(mistakes):
        mistakes = mistakes()
    for name, value in (mistakes or {}).items():
        if value is not None and is_close(actual, value):
            return f"It matches what {name} gives." if is_description(name) else name
    return ""


def float32_precision(actual, expected):
    """A float64 result that is right only to float32 precision was computed in float32."""
    actual, expected = as_tensor(actual), as_tensor(expected)
    return (isinstance(actual, torch.Tensor) and expected.dtype == torch.float64 and actual.shape == expected.shape
            and bool(torch.allclose(actual.double(), expected, equal_nan=True, **tolerance(torch.float32))))


def close(actual, expected, what, hint="", mistakes=None, picture=None):
    """actual must equal expected within the dtype's tolerance.

    mistakes maps a mistake's description to what a submission with that mistake would return (or
    is a function that returns that map, called only when actual is wrong);
    when the student's value matches one, the feedback names it; a float64 value right only to
    float32 precision is named as such; otherwise the feedback gives `hint` (a statement of the
    property, or nothing: never a guess).
    """
    actual_tensor, expected_tensor = as_tensor(actual), as_tensor(expected)
    shape(actual, expected_tensor.shape, what)
    if is_close(actual_tensor, expected_tensor):
        return
    named = known_mistake(actual_tensor, mistakes)
    actual_tensor, expected_tensor = actual_tensor.detach(), expected_tensor.detach()  # numbers, not a graph
    difference = (actual_tensor.double() - expected_tensor.double()).abs()
    difference = difference[torch.isfinite(difference)]
    largest = f"{float(difference.max()):.3g}" if difference.numel() else "NaN"
    fraction = 1.0 - float(torch.isclose(actual_tensor.to(expected_tensor.dtype), expected_tensor,
                                         **tolerance(expected_tensor.dtype)).float().mean())
    observed = (f"{what}: {fraction:.0%} of the entries differ from the correct values "
                f"(largest difference {largest}).")
    if named:
        raise Feedback(observed, named, picture)
    if float32_precision(actual_tensor, expected_tensor):
        raise Feedback(observed, FLOAT32_HINT, picture)
    raise Feedback(observed, hint, picture)


def same(actual, expected, what, hint="", mistakes=None):
    """Two results of the student's own code that the statement says are equal (batched and looped,
    masked and with the keys dropped, cached and uncached): equal up to float32 rounding whatever
    the dtype, since a different order of operations is no mistake here."""
    actual_tensor, expected_tensor = as_tensor(actual), as_tensor(expected)
    shape(actual, expected_tensor.shape, what)
    mine, theirs = actual_tensor.detach().double(), expected_tensor.detach().double()
    if bool(torch.allclose(mine, theirs, equal_nan=True, **tolerance(torch.float32))):
        return
    largest = (mine - theirs).abs().nan_to_num(0.0).max()
    raise Feedback(f"{what}: they differ (largest difference {float(largest):.3g}).",
                   known_mistake(actual_tensor, mistakes) or hint)


def rows_sum_to_one(weights, what, hint="", rows=None, mistakes=None):
    weights = as_tensor(weights)
    sums = weights.double().sum(-1)
    if rows is not None:
        sums = sums[rows]
    if sums.numel() and not bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-4)):
        low, high = float(sums.min()), float(sums.max())
        raise Feedback(f"{what}: rows sum to values between {_fmt(low)} and {_fmt(high)}; "
                       "every row should sum to 1.", known_mistake(weights, mistakes) or hint)


def exactly_zero_where(weights, blocked, what, hint="", mistakes=None, yours="your attention weights"):
    """No weight where the rule blocks; a failure shows the first [queries, keys] map that leaks
    beside the rule (`yours` names what the map is)."""
    weights = as_tensor(weights)
    blocked = blocked.expand_as(weights)
    leaked = weights[blocked]
    if leaked.numel() and bool((leaked != 0).any()):
        count = int((leaked != 0).sum())
        maps, rules = weights.detach().reshape(-1, *weights.shape[-2:]), blocked.reshape(-1, *weights.shape[-2:])
        first = int(((maps != 0) & rules).flatten(1).any(1).nonzero()[0])
        raise Feedback(f"{what}: {count} of {leaked.numel()} blocked positions have a non-zero value "
                       f"(largest {float(leaked.abs().max()):.3g}); they should be exactly 0.",
                       known_mistake(weights, mistakes) or hint,
                       Picture.of(what, maps[first], ~rules[first], yours=yours))


def equal(actual, expected, what, hint="", reveal=False):
    """actual == expected; the expected value is shown only when the exercise states it (reveal)."""
    if actual != expected:
        wanted = f"; expected {expected!r}" if reveal else ", which is not right"
        raise Feedback(f"{what} is {actual!r}{wanted}.", hint)


def _fmt(number):
    return "NaN" if math.isnan(number) else f"{number:.2f}"


def require(condition, observed, hint="", picture=None):
    if not condition:
        raise Feedback(observed, hint, picture)


# -- an exercise built on an earlier one of its notebook ---------------------------------------------------
#
# A later exercise's answer may call the functions of an earlier exercise (attention calls softmax,
# MultiHeadAttention calls split_heads and merge_heads): a slip in those is the earlier exercise's to charge.
# Its suite declares them, BUILT_ON = {earlier exercise id: (its function and class names, ...)}, and compares
# an answer with `built_on`'s expectation: the grader's, unless two things hold on the test's own inputs, each
# seen by the grader and by nothing the student's process could arrange.  The earlier function is itself wrong
# there: each call of the witness (the grader's own computation with the student's functions in place of its
# own) is compared with the grader's function of that name on the same arguments (`strayed`), so credit
# follows only a slip the earlier exercise is charged for.  And the answer is what that witness gives: each of
# its calls runs in a fresh child of the sandbox that has only run the notebook's cells (Student.call's
# fresh), so nothing the graded call, or another witness call, left behind (a global holding the weights it
# handed out) can steer what the student's function answers.  A class is either replaced by the grader's
# stand-in (Student.module's stand_in: to_torch_mha, absorbed) or judged in the student's own model as well
# (train_model).  tests/test_feedback_policy.py holds every suite whose answers use an earlier exercise's
# functions or classes (read from the solution notebooks and the suite) to a BUILT_ON that names them.

# The grader's functions a witness call is compared with, by name: the reference namespace (reference.py, the
# solution notebook's definitions) while a run lasts (plugin.SuiteSession.run), unless a suite names its own.
REFERENCE = contextvars.ContextVar("reference_namespace", default={})


class Theirs(dict):
    """name -> the student's own function of that name (students_functions); `strayed`: whether one of the
    calls made so far gave other than the grader's function of that name on the same arguments."""
    strayed = False


def _strays(rule, output, args, kwargs):
    """Whether `output` of the student's function differs from what the grader's `rule` gives on the same
    arguments; a function without a rule, or whose rule cannot take these arguments, never strays (deny by
    default: no follow-through credit)."""
    if rule is None:
        return False
    try:
        with torch.no_grad():
            return not _alike(output, rule(*args, **kwargs))
    except Exception:   # noqa: BLE001 - the grader's rule cannot take them: no credit follows
        return False


def students_functions(student, built_on, rules=None):
    """name -> the student's own function of that name, for every name in a suite's BUILT_ON (a Theirs): each
    call made in a fresh child of the student's process that has only run the notebook's cells, its value the
    reply's output, compared with the grader's function of that name (`rules`, else the reference namespace's,
    taken now, before any block of `calling` puts the student's in its place)."""
    grader = {**REFERENCE.get(), **(rules or {})}
    grader = {name: grader.get(name) for names in built_on.values() for name in names}
    theirs = Theirs()

    def function(name):
        def call(*args, **kwargs):
            output = student.call(name, *args, fresh=True, **kwargs)["output"]
            theirs.strayed = theirs.strayed or _strays(grader[name], output, args, kwargs)
            return output
        return call
    theirs.update({name: function(name) for name in grader})
    return theirs


@contextlib.contextmanager
def calling(namespace, functions):
    """The reference namespace (reference.py) with `functions` in place of its own of those names, while the
    block runs: its classes and functions look their helpers up there as they run."""
    saved = {name: namespace[name] for name in functions if name in namespace}
    namespace.update(functions)
    try:
        yield namespace
    finally:
        for name in functions:
            if name in saved:
                namespace[name] = saved[name]
            else:
                namespace.pop(name, None)


def _number(value):
    return type(value) in (int, float)


def _alike(actual, expected):
    if isinstance(expected, (tuple, list)):
        return isinstance(actual, (tuple, list)) and len(actual) == len(expected) and \
            all(_alike(a, e) for a, e in zip(actual, expected))
    if _number(expected):
        return _number(actual) and math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-12)
    try:
        return is_close(as_tensor(actual), as_tensor(expected))
    except (TypeError, ValueError, RuntimeError):
        return False


def follows_theirs(student, declared, answer, on_functions, same=None, rules=None):
    """Whether `answer` (a value, or a tuple of values) earns follow-through credit: on_functions(functions),
    with the student's own functions of `declared` (its suite's BUILT_ON) in place of the grader's, gives it
    (compared by `same`, by default within the tolerances), and one of those functions strayed from the
    grader's (`rules`, see students_functions) on the arguments it was given there.  False where they raise
    or give something the grader's computation cannot take."""
    try:
        theirs = students_functions(student, declared, rules)
        with torch.no_grad():
            value = on_functions(theirs)
        return theirs.strayed and bool((same or _alike)(answer, value))
    except Exception:   # noqa: BLE001 - their functions raise, or reply in another form: the grader's is the rule
        return False


def built_on(student, declared, answer, right, on_functions, rules=None):
    """What `answer` should be, for an exercise whose answers may call the earlier exercises' functions
    `declared`: `right`, unless the answer differs from it and earns follow-through credit (follows_theirs);
    then the answer itself."""
    if _alike(answer, right) or not follows_theirs(student, declared, answer, on_functions, rules=rules):
        return right
    return answer
