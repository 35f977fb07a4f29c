"""Hidden tests for pruning_curve(model, inputs, targets, order) -> list of H + 1 losses.

As for head_importance: the student's function runs on the notebook's PrunableModel holding the
grader's weights, and every loss is recomputed here with the reference model."""

import torch

from autograder.harness import checks
from autograder.harness.substance import differs, finite
from autograder.suites.helpers import common
from autograder.suites.helpers.pruning import (HANDED_BACK, IN_PLACE_MASK, PRUNING_HEADS,
                                               check_model_handed_back, check_values_before_handing_back,
                                               loss_without, louder_head, prunable_parameters, pruning_data,
                                               run_pruning)

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "one_at_a_time": "only the k-th head of the order removed at step k (the heads removed before it are put back)",
    "order_ignored": "the heads removed in the order 0, 1, 2, ... instead of the given order",
    "train_mode": "the measurements taken in training mode, with dropout on: call model.eval() first",
    "left_masked": HANDED_BACK,
    "new_mask": IN_PLACE_MASK,
    "length": "Return H + 1 losses: the whole model first, then one more head removed at a time.",
    "list": "Return a list of Python floats (loss_of gives floats: append them; no tensor, no tuple).",
}
H = PRUNING_HEADS


def curve(student, reference, params, data, order, train=True):
    output, reply = run_pruning(student, "pruning_curve", params, (*data, list(order)), train)
    if isinstance(output, (list, tuple)):   # each item checked for a number before the grader reads it
        checks.require(len(output) == H + 1, f"pruning_curve(...) for a model of 4 heads returned {len(output)} "
                       f"losses.", CAUSES["length"])
        output = torch.tensor(checks.numbers(output, H + 1, "pruning_curve(...)", CAUSES["list"]), dtype=torch.float64)
    values = checks.tensor(output, "pruning_curve(...)")
    checks.shape(values, (H + 1,), "pruning_curve(...) for a model of 4 heads", CAUSES["length"])
    return values.double(), reply


def recomputed(reference, params, data, order, mistake=None):
    if mistake == "order_ignored":
        order = list(range(H))
    removed = [order[k - 1:k] if mistake == "one_at_a_time" else order[:k] for k in range(H + 1)]
    return torch.tensor([loss_without(reference, params, *data, heads) for heads in removed], dtype=torch.float64)


ORDER = [2, 0, 3, 1]


def test_depends_on_the_model(student, reference):
    """The gate: finite losses that change along the curve and respond to the model's behaviour: when
    one head's output weights change and when the batch does."""
    params, data = prunable_parameters(reference, 720), pruning_data(reference, 721)
    values, _ = curve(student, reference, params, data, ORDER, train=False)
    finite(values, "The losses")
    checks.require(differs(values, values[0].expand(H + 1)),
                   "The losses are the same for every number of heads removed, so no head is removed yet.")
    checks.require(differs(curve(student, reference, louder_head(params, 2), data, ORDER, train=False)[0], values),
                   "The curve stays the same when head 2's output weights are multiplied by 4, so it does not "
                   "measure this model yet.")
    checks.require(differs(curve(student, reference, params, pruning_data(reference, 728), ORDER, train=False)[0],
                           values),
                   "The curve stays the same on another batch, so it does not come from running the model on the "
                   "given inputs yet.")


def test_returns_one_loss_per_count(student, reference):
    """H + 1 losses, as the statement says: a list of Python floats (the other tests also read a tensor)."""
    params, data = prunable_parameters(reference, 722), pruning_data(reference, 723)
    output = curve(student, reference, params, data, ORDER)[1]["outputs"][0]
    checks.require(type(output) is list and all(type(value) is float for value in output),
                   f"pruning_curve returned a {type(output).__name__}"
                   + (f" of {', '.join(sorted({type(v).__name__ for v in output}))}" if isinstance(output, (list, tuple)) else "")
                   + ", not a list of floats.", CAUSES["list"])


def test_matches_the_recomputed_curve(student, reference):
    params, data = prunable_parameters(reference, 724), pruning_data(reference, 725)
    values, reply = curve(student, reference, params, data, ORDER)
    named = common.named(CAUSES, one_at_a_time=recomputed(reference, params, data, ORDER, "one_at_a_time"),
                    order_ignored=recomputed(reference, params, data, ORDER, "order_ignored"))
    checks.close(values, recomputed(reference, params, data, ORDER),
                 f"The losses with the first k heads of {ORDER} removed, recomputed here with your model's weights",
                 CAUSES["train_mode"] if reply["training"] else "Loss k has the first k heads of the order removed "
                 "together.", named)


def test_hands_the_model_back(student, reference):
    params, data = prunable_parameters(reference, 726), pruning_data(reference, 727)
    values, reply = curve(student, reference, params, data, ORDER, train=False)
    check_values_before_handing_back(values, [recomputed(reference, params, data, ORDER, mistake) for mistake in
                                                (None, "one_at_a_time", "order_ignored")], "pruning_curve")
    check_model_handed_back(reply, "pruning_curve")
