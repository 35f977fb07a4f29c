"""Hidden tests for head_importance(model, inputs, targets) -> tensor [H].

The student's function runs in the student's process on the notebook's PrunableModel, holding the
grader's weights and handed over in training mode; every importance is recomputed here, with the
reference model and the same weights, never taken from the student."""

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
    "not_restored": "head h measured with heads 0 .. h all removed (each head is not put back before the next "
                    "one is removed)",
    "raw_loss": "the loss with the head removed, not its increase over the loss of the whole model",
    "train_mode": "the measurements taken in training mode, with dropout on: call model.eval() first",
    "left_masked": HANDED_BACK,
    "new_mask": IN_PLACE_MASK,
    "shape": "Return a float tensor [H]: one score per head.",
}
H = PRUNING_HEADS


def importance(student, reference, params, data, train=True):
    output, reply = run_pruning(student, "head_importance", params, data, train)
    scores = checks.tensor(output, "head_importance(model, inputs, targets)")
    checks.shape(scores, (H,), "head_importance(...) for a model of 4 heads", CAUSES["shape"])
    return scores.double(), reply


def removal_losses(reference, params, data, cumulative=False):
    """The loss of the whole model and, per head h, the loss with head h removed (with heads 0 .. h
    removed when cumulative, as a mask that is never put back leaves them), recomputed here."""
    losses = [loss_without(reference, params, *data, range(h + 1) if cumulative else (h,)) for h in range(H)]
    return loss_without(reference, params, *data), torch.tensor(losses, dtype=torch.float64)


def test_depends_on_the_model(student, reference):
    """The gate: finite scores that differ between heads and respond to the model's behaviour: they
    change when one head's output weights do and when the batch does (scores read off the weights
    alone do not run the model)."""
    params, data = prunable_parameters(reference, 700), pruning_data(reference, 701)
    scores, _ = importance(student, reference, params, data, train=False)
    finite(scores, "The importances")
    checks.require(differs(scores, scores[0].expand(H)),
                   "Every head gets the same score, so the scores do not measure the heads yet.")
    checks.require(differs(importance(student, reference, louder_head(params, 0), data, train=False)[0], scores),
                   "The scores stay the same when head 0's output weights are multiplied by 4, so they do not "
                   "measure what the heads do in this model yet.")
    checks.require(differs(importance(student, reference, params, pruning_data(reference, 708), train=False)[0],
                           scores),
                   "The scores stay the same on another batch, so they do not come from running the model on the "
                   "given inputs yet.")


def test_returns_one_score_per_head(student, reference):
    """A float tensor [H], as the statement says."""
    params, data = prunable_parameters(reference, 702), pruning_data(reference, 703)
    output = importance(student, reference, params, data)[1]["outputs"][0]
    checks.require(isinstance(output, torch.Tensor) and output.is_floating_point(),
                   f"head_importance returned a {type(output).__name__}"
                   + (f" of dtype {output.dtype}" if isinstance(output, torch.Tensor) else "")
                   + ", not a float tensor.", CAUSES["shape"])


def test_matches_the_recomputed_importances(student, reference):
    params, data = prunable_parameters(reference, 704), pruning_data(reference, 705)
    scores, reply = importance(student, reference, params, data)
    base, alone = removal_losses(reference, params, data)
    named = common.named(CAUSES, not_restored=removal_losses(reference, params, data, cumulative=True)[1] - base,
                    raw_loss=alone)
    checks.close(scores, alone - base, "The importances, recomputed here with your model's weights",
                 CAUSES["train_mode"] if reply["training"] else "Importance of h = loss with head h alone removed "
                 "- loss of the whole model, both with loss_of on the given batch.", named)


def test_hands_the_model_back(student, reference):
    params, data = prunable_parameters(reference, 706), pruning_data(reference, 707)
    scores, reply = importance(student, reference, params, data, train=False)
    base, alone = removal_losses(reference, params, data)
    check_values_before_handing_back(scores, (alone - base, alone, removal_losses(reference, params, data, True)[1] - base),
                                       "head_importance")
    check_model_handed_back(reply, "head_importance")
