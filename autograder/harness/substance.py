"""Gates: the properties that show an answer does the essential work of its exercise at all.

An exercise's gate (course.yml: `gate:`) runs before its other tests.  Every realistic attempt
passes it, mistakes included (a missing 1/sqrt(d_k), a softmax over the wrong axis, a mask
applied after the softmax); answers that compute no attention do not: uniform weights, zeros,
NaN, outputs that ignore the queries or the keys, the values or the input handed back.  Until
the gate passes, only the exercise's basic tests count (scoring.py), so the properties that any
row-wise function has (batching equals looping, masking equals dropping keys, gradients equal
finite differences of its own forward) cannot add up to a grade for code that attends to nothing.

Each check states what was observed; the message is shown once, at the top of the exercise.
"""

import torch

from autograder.harness import checks

NOT_ATTENTION = "so this is not attention yet"


def _double(value):
    return checks.as_tensor(value).detach().double()


def differs(first, second):
    """Two results of the student's code differ by more than float32 rounding where both are finite
    (a row that a mistake turns into NaN is charged by the tests of that property, not here)."""
    first, second = _double(first), _double(second)
    if first.shape != second.shape:
        return True
    both = torch.isfinite(first) & torch.isfinite(second)
    return not bool(torch.allclose(first[both], second[both], **checks.tolerance(torch.float32)))


def finite(value, what):
    """Mostly finite: NaN or infinity in a few rows is a mistake of its own, everywhere is no answer."""
    checks.require(float(torch.isfinite(_double(value)).double().mean()) >= 0.5,
                   f"{what} is NaN or infinite almost everywhere for ordinary inputs, {NOT_ATTENTION}.")


def concentration(weights):
    """How far attention weights are from spread out: the sum of their squares."""
    weights = _double(weights)
    return float((weights[torch.isfinite(weights)] ** 2).sum())


def any_passes(attempts):
    """The gate on inputs the answer can handle: run each attempt (a function that raises when its
    check fails) until one passes; when none does, raise the first one's failure.  Used where the
    statement allows several shapes (any number of leading dimensions): an answer that handles only
    some of them still computes attention, and loses the tests of the others."""
    first = None
    for attempt in attempts:
        try:
            attempt()
            return
        except Exception as failure:  # noqa: BLE001 - a Feedback or the student's error: try the next shape
            first = first or failure
    raise first


def attention_function(call, q, k, v, unnormalised=""):
    """call(q, k, v) -> (output, weights) of the student's attention, on inputs of their choice.

    Attention's weights come from the query-key scores (larger queries give sharper weights;
    reordering the keys reorders the weights' columns) and its output is those weights applied
    to the values.  A scale, an axis or a mask handled wrongly keeps all of this.  Weights that do
    not sharpen because their rows were never divided by their sum are said to be that
    (`unnormalised`: the suite's words for the cause), not to ignore the scores.
    """
    output, weights = call(q, k, v)
    checks.shape(weights, (*q.shape[:-1], k.shape[-2]), "The weights")
    checks.shape(output, (*q.shape[:-1], v.shape[-1]), "The output")
    finite(weights, "The weights")
    finite(output, "The output")
    checks.require(not differs(output, _double(weights) @ _double(v)),
                   f"The output is not the weights applied to the values (weights @ v), {NOT_ATTENTION}.")
    _, sharper = call(q * 4, k, v)
    if not concentration(sharper) > 1.05 * concentration(weights):
        sums = _double(weights).sum(dim=-1)
        sums = sums[torch.isfinite(sums)]
        if sums.numel() and not bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-2)):
            raise checks.Feedback(f"The weights' rows sum to between {float(sums.min()):.3g} and {float(sums.max()):.3g}, "
                                  f"not 1: they are not normalised, {NOT_ATTENTION}.", unnormalised)
        raise checks.Feedback("The weights do not sharpen when the queries grow (queries scaled by 4 should move each "
                              f"row's weight towards its best-matching keys): they ignore the query-key scores, "
                              f"{NOT_ATTENTION}.")
    order = torch.arange(k.shape[-2] - 1, -1, -1)
    moved_output, moved_weights = call(q, k[..., order, :], v[..., order, :])
    checks.require(not differs(moved_weights, _double(weights)[..., order]) and not differs(moved_output, output),
                   "Reversing the order of the keys (and their values) should reverse the columns of the weights "
                   f"and leave the output unchanged; here it does not, so the weights do not follow the keys, "
                   f"{NOT_ATTENTION}.")


def scaled(params, name, factor):
    """The weights of a module with linear layer `name` multiplied by factor."""
    return {key: value * factor if key.startswith(f"{name}.") else value for key, value in params.items()}


def replaced(params, name, seed=9000):
    """The weights of a module with linear layer `name` given other random values."""
    return {key: torch.randn(value.shape, generator=torch.Generator().manual_seed(seed), dtype=value.dtype)
            / value.shape[-1] ** 0.5 if key.startswith(f"{name}.") else value for key, value in params.items()}


def attention_module(run, params, queries="W_q", keys="W_k", keys_changed=None):
    """run(params) -> the output of the student's module with those weights, inputs fixed.

    Attention's output depends on the queries (sharper queries change which values are mixed)
    and on the keys.  keys_changed() gives the output with other keys when the module's own key
    projection is not the way to change them (default: `keys` gets other weights).
    """
    base = run(params)
    finite(base, "The output")
    checks.require(differs(run(scaled(params, queries, 4.0)), base),
                   f"The output does not change when the queries change ({queries} scaled by 4): it ignores the "
                   f"queries, {NOT_ATTENTION}.")
    other_keys = keys_changed() if keys_changed else run(replaced(params, keys))
    checks.require(differs(other_keys, base),
                   f"The output does not change when the keys change: it ignores the keys, {NOT_ATTENTION}.")


def rearrangement(result, source, shape, what):
    """result holds exactly the entries of source, in the given shape (a view, a transpose)."""
    checks.shape(result, shape, what)
    same_values = torch.equal(_double(result).flatten().sort().values, _double(source).flatten().sort().values)
    checks.require(same_values, f"{what} does not hold the entries of its input (it should only rearrange them).")
