"""The catalogue of head_importance: its mistakes (with the cause each must be named by, a key of CAUSES
in autograder/suites/test_head_importance.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from functools import partial

from tests.catalogue.entries import Degenerate, Gaming, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("head_pruning")["head_importance"]
changed = partial(edited, SOLUTION)


MISTAKES = [
    Mistake("a new mask tensor for each head, not the model's own buffer", "new_mask",
            fails=("hands_the_model_back",),
            code=changed("        mask[h] = 0.0                                      # remove head h alone\n",
                         "        mask = torch.ones_like(mask)\n        mask[h] = 0.0\n"
                         "        model.attention.head_mask = mask\n",
                         "        mask[h] = 1.0                                      # and put it back\n",
                         "        model.attention.head_mask = torch.ones_like(mask)\n")),
    Mistake("each head not put back before the next", "not_restored",
            fails=("matches_the_recomputed_importances",),
            code=changed("        mask[h] = 1.0                                      # and put it back\n", "",
                         "    return torch.tensor(scores)\n", "    mask.fill_(1.0)\n    return torch.tensor(scores)\n")),
    Mistake("the loss, not its increase", "raw_loss",
            fails=("matches_the_recomputed_importances",),
            code=changed("loss_of(model, inputs, targets) - base", "loss_of(model, inputs, targets)")),
    Mistake("measured in training mode", "train_mode",
            fails=("matches_the_recomputed_importances",),
            code=changed("    model.eval()\n", "")),
    Mistake("a new mask per head, the last one left in the model", "left_masked",
            fails=("hands_the_model_back",),
            code='''def head_importance(model, inputs, targets):
    model.eval()
    heads = model.attention.num_heads
    base = loss_of(model, inputs, targets)
    scores = torch.zeros(heads)
    for h in range(heads):
        keep = torch.ones(heads)
        keep[h] = 0
        model.attention.head_mask = keep
        scores[h] = loss_of(model, inputs, targets) - base
    return scores
'''),
]


ALTERNATIVES = [
    Alternative("a saved mask, restored with copy_", '''def head_importance(model, inputs, targets):
    model.eval()
    saved = model.attention.head_mask.clone()
    full = loss_of(model, inputs, targets)
    result = torch.empty(len(saved), dtype=torch.float64)
    for head in range(len(saved)):
        model.attention.head_mask.copy_(saved)
        model.attention.head_mask[head] = 0
        result[head] = loss_of(model, inputs, targets) - full
    model.attention.head_mask.copy_(saved)
    return result
'''),
    Alternative("its own cross-entropy, under no_grad", '''def head_importance(model, inputs, targets):
    model.train(False)
    mask = model.attention.head_mask

    def loss():
        with torch.no_grad():
            logits = model(inputs)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()

    whole = loss()
    out = []
    for h in range(len(mask)):
        mask[h] = 0
        out.append(loss() - whole)
        mask[h] = 1
    return torch.tensor(out, dtype=torch.float32)
'''),
]


DEGENERATES = [
    Degenerate("zeros", '''def head_importance(model, inputs, targets):
    return torch.zeros(model.attention.num_heads)
'''),
    Degenerate("NaN", '''def head_importance(model, inputs, targets):
    return torch.full((model.attention.num_heads,), float("nan"))
'''),
    Degenerate("the head's index", '''def head_importance(model, inputs, targets):
    return torch.arange(model.attention.num_heads, dtype=torch.float32)
'''),
    Degenerate("the whole model's loss for every head", '''def head_importance(model, inputs, targets):
    model.eval()
    return torch.full((model.attention.num_heads,), loss_of(model, inputs, targets))
'''),
]


GATED = ("matches_the_recomputed_importances", "hands_the_model_back")
GAMING = [
    Gaming("importances read off the weights (each head's share of W_o), no model run", '''def head_importance(model, inputs, targets):
    H = model.attention.head_mask.shape[0]
    weight = model.attention.W_o.weight
    width = weight.shape[1] // H
    return torch.stack([weight[:, h * width:(h + 1) * width].norm() for h in range(H)]).detach()
''', loses=GATED, says="on another batch"),
    Gaming("the whole model's outputs per head, the mask never touched", '''def head_importance(model, inputs, targets):
    model.eval()
    H = model.attention.head_mask.shape[0]
    with torch.no_grad():
        logits = model(inputs)
    return logits.float().mean(dim=(0, 1))[:H] - logits.float().mean()
''', loses=("matches_the_recomputed_importances", "hands_the_model_back"), says="match no recomputed measurement"),
]
