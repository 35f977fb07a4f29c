"""Head pruning (the head_pruning assignment): the notebook's PrunableModel, evaluated here with the
grader's weights."""

import torch

from autograder.harness import checks
from autograder.harness.checks import Feedback
from autograder.suites.helpers.common import run_module


PRUNING_HEADS = 4


def prunable_parameters(reference, seed):
    """Random float64 weights of the notebook's PrunableModel(PRUNING_HEADS), named as in the module."""
    torch.manual_seed(seed)
    model = reference["PrunableModel"](PRUNING_HEADS).double()
    return {name: parameter.detach().clone() for name, parameter in model.named_parameters()}


def pruning_data(reference, seed):
    return reference["make_pattern_data"](96, seed=seed)


def louder_head(params, head, factor=4.0):
    """The weights with head `head`'s share of W_o (its d_k = 8 input columns) multiplied by factor."""
    louder = {**params, "attention.W_o.weight": params["attention.W_o.weight"].clone()}
    louder["attention.W_o.weight"][:, 8 * head: 8 * (head + 1)] *= factor
    return louder


def loss_without(reference, params, inputs, targets, removed=()):
    """The notebook's loss_of for the reference model (eval mode) with the given weights and the heads
    in `removed` masked."""
    model = reference["PrunableModel"](PRUNING_HEADS).double()
    model.load_state_dict(params, strict=False)
    model.eval()
    for head in removed:
        model.attention.head_mask[head] = 0.0
    return reference["loss_of"](model, inputs, targets)


def run_pruning(student, function, params, args, train=True):
    """function(model, *args) in the student's process on the notebook's PrunableModel holding params
    (handed over in training mode, as a model straight out of training is, unless train=False);
    returns (output, reply)."""
    reply = run_module(student, "PrunableModel", (PRUNING_HEADS,), params=params, dtype=torch.float64, train=train,
                       functions=[(function, args, {})])
    return reply["outputs"][0], reply


IN_PLACE_MASK = ("a new head_mask tensor put in the model: change the entries of model.attention.head_mask in "
                 "place (mask[h] = 0.0, then mask[h] = 1.0); the model's own buffer is the one to write")
HANDED_BACK = "the model handed back with heads still removed: set every entry of head_mask back to 1"


def check_values_before_handing_back(values, expected, what):
    """The hands-back point is earned by an answer that measured the model: the values of that very call
    (the model handed over in eval mode) equal the recomputed ones or a named mistake's."""
    if not any(checks.is_close(values, want) for want in expected):
        raise Feedback(f"{what} gave values that match no recomputed measurement of the model, so handing the "
                       "model back earns nothing yet.", "Remove the heads with model.attention.head_mask and "
                       "measure with the notebook's loss_of.")


def check_model_handed_back(reply, what):
    """After the call every head is back: head_mask is all ones, and still the module's own buffer."""
    mask = reply["buffers"].get("attention.head_mask")
    checks.require(mask is not None, f"After {what} the model has no head_mask buffer any more.", IN_PLACE_MASK)
    checks.require(bool((checks.as_tensor(mask) == 1).all()),
                   f"After {what} the model's head_mask is {checks.as_tensor(mask).tolist()}.",
                   f"Likely cause: {HANDED_BACK}.")
    checks.require("attention.head_mask" not in reply.get("replaced_buffers", []),
                   f"After {what} the model's head_mask is another tensor than the one it was handed over with.",
                   f"Likely cause: {IN_PLACE_MASK}")
