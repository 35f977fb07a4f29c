"""The catalogue of pruning_curve: its mistakes (with the cause each must be named by, a key of CAUSES
in autograder/suites/test_pruning_curve.py, and the tests it may fail), correct alternatives and degenerate
answers."""

from functools import partial

from tests.catalogue.entries import Degenerate, Gaming, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("head_pruning")["pruning_curve"]
changed = partial(edited, SOLUTION)


MISTAKES = [
    Mistake("a tensor of losses, not a list", "list",
            fails=("returns_one_loss_per_count",),
            code=changed("    mask.fill_(1.0)\n    return losses\n", "    mask.fill_(1.0)\n    return torch.tensor(losses)\n")),
    Mistake("one head at a time, not cumulative", "one_at_a_time",
            fails=("matches_the_recomputed_curve",),
            code=changed("        losses.append(loss_of(model, inputs, targets))\n",
                         "        losses.append(loss_of(model, inputs, targets))\n        mask[h] = 1.0\n")),
    Mistake("heads removed in index order", "order_ignored",
            fails=("matches_the_recomputed_curve",),
            code=changed("    for h in order:\n", "    for h in range(len(order)):\n")),
    Mistake("measured in training mode", "train_mode",
            fails=("matches_the_recomputed_curve",),
            code=changed("    model.eval()\n", "")),
    Mistake("the mask not restored", "left_masked",
            fails=("hands_the_model_back",),
            code=changed("    mask.fill_(1.0)\n", "")),
]


ALTERNATIVES = [
    Alternative("a fresh mask per point, the original copied back", '''def pruning_curve(model, inputs, targets, order):
    model.eval()
    original = model.attention.head_mask.clone()
    losses = []
    for k in range(len(order) + 1):
        model.attention.head_mask.fill_(1)
        model.attention.head_mask[list(order[:k])] = 0
        losses.append(float(loss_of(model, inputs, targets)))
    model.attention.head_mask.copy_(original)
    return losses
'''),
]


DEGENERATES = [
    Degenerate("zeros", '''def pruning_curve(model, inputs, targets, order):
    return [0.0] * (len(order) + 1)
'''),
    Degenerate("NaN", '''def pruning_curve(model, inputs, targets, order):
    return [float("nan")] * (len(order) + 1)
'''),
    Degenerate("the whole model's loss repeated", '''def pruning_curve(model, inputs, targets, order):
    model.eval()
    return [loss_of(model, inputs, targets)] * (len(order) + 1)
'''),
    Degenerate("a straight line", '''def pruning_curve(model, inputs, targets, order):
    return [0.1 * k for k in range(len(order) + 1)]
'''),
]


GAMING = [
    Gaming("a curve read off the weights (the heads' shares of W_o, removed one by one), no model run", '''def pruning_curve(model, inputs, targets, order):
    H = model.attention.head_mask.shape[0]
    weight = model.attention.W_o.weight
    width = weight.shape[1] // H
    share = [float(weight[:, h * width:(h + 1) * width].norm()) for h in range(H)]
    losses, gone = [1.0], 0.0
    for h in order:
        gone += share[h]
        losses.append(1.0 + gone)
    return losses
''', loses=("matches_the_recomputed_curve", "hands_the_model_back"), says="on another batch"),
]
