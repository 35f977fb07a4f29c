"""Hidden tests for train_model(model, inputs, targets, steps, lr) -> list of losses.

The student's loop trains the notebook's PatternModel inside the student's process; the trained
parameters come back and are evaluated here, with the reference model: the loss on the training
batch and the accuracy on held-out sequences are recomputed, and the reported losses are only
believed when the last one agrees with the loss of the parameters that came back.

PatternModel holds the student's CausalSelfAttention, an exercise of its own (BUILT_ON): where the trained
parameters fall short in the reference model, they are evaluated again in the model they were trained in,
the student's own (run in their process, the numbers computed here), and a loop that trains that model is
right, so a slip of CausalSelfAttention costs that exercise's points alone.
"""

import torch
import torch.nn.functional as F

from autograder.harness import checks
from autograder.harness.context import StudentError
from autograder.suites.helpers.common import run_module


def trained_pattern_model(student, reference, num_heads, steps, sequences):
    """Train the notebook's PatternModel with the student's train_model (once per submission);
    returns (reported losses, a reference PatternModel holding the trained parameters, the batch)."""
    key = ("trained_pattern_model", num_heads, steps, sequences)
    if key not in student.memo:
        inputs, targets = reference["make_pattern_data"](sequences, seed=1000)
        reply = run_module(student, "PatternModel", (num_heads,), train=True, dtype=None,
                           functions=[("train_model", (inputs, targets), {"steps": steps, "lr": 1e-2})])
        model = reference["PatternModel"](num_heads)
        trained = reply["parameters"]
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                checks.require(name in trained, f"The trained model has no parameter {name}.",
                               "Keep the parameter names of PatternModel and CausalSelfAttention.")
                checks.shape(trained[name], parameter.shape, f"The trained parameter {name}")
                parameter.copy_(trained[name])
        student.memo[key] = (reply["outputs"][0], model, (inputs, targets))
    return student.memo[key]


# The earlier exercises' classes its answers run on (the notebook's PatternModel builds the student's own).
BUILT_ON = {"causal_self_attention": ("CausalSelfAttention",)}


class OwnModel:
    """The student's own PatternModel (their CausalSelfAttention in it) holding `parameters`, run in a fresh
    child of their process that has only run the notebook's cells (nothing train_model left behind reaches
    it): a model as pattern_loss and the notebook's accuracy use one (eval(), model(inputs)[0]).  `strayed`:
    whether its logits differed from the reference model's (`reference`, holding the same parameters) on the
    inputs it was given, a slip CausalSelfAttention's own tests charge (checks.follows_theirs)."""

    def __init__(self, student, num_heads, parameters, reference):
        self.student, self.num_heads, self.parameters, self.reference = student, num_heads, parameters, reference
        self.strayed = False

    def eval(self):
        return self

    def __call__(self, inputs):
        reply = run_module(self.student, "PatternModel", (self.num_heads,), params=self.parameters, dtype=None,
                           calls=[((inputs,), {})], fresh=True)
        logits, weights = checks.pair(reply["outputs"][0], "PatternModel.forward", ("logits", "weights"))
        vocabulary = self.parameters["to_logits.weight"].shape[0]
        checks.shape(logits, (*inputs.shape, vocabulary), "PatternModel's logits")
        with torch.no_grad():
            self.strayed = self.strayed or not checks.is_close(logits, self.reference.eval()(inputs)[0])
        return logits, weights


def in_own_model(student, model, num_heads, measure):
    """measure(the trained parameters in the student's own PatternModel), or None where that model cannot run
    them or gives the reference model's logits on the inputs measured (then the reference model is the rule)."""
    own = OwnModel(student, num_heads, {name: value.detach() for name, value in model.named_parameters()}, model)
    try:
        measured = measure(own)
    except (StudentError, checks.Feedback):
        return None
    return measured if own.strayed else None


def pattern_loss(model, inputs, targets, flatten_targets=lambda t: t.reshape(-1)):
    """The training loss of a PatternModel on a batch, computed here (never taken from the student)."""
    model.eval()
    with torch.no_grad():
        logits = model(inputs)[0]
        return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), flatten_targets(targets)))


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "crossed": "It matches the loss with logits and targets flattened in different orders: flatten both the "
               "same way.",
    "unmoved": "The parameters did not move: no optimiser step ever saw a gradient (optimizer.step() is "
               "missing, or zero_grad() runs between backward() and step()).",
    "tensor_losses": "Append loss.item(): a tensor keeps the whole computation graph of its step alive.",
    "lr": "Pass lr to the optimiser: torch.optim.Adam(model.parameters(), lr=lr).",
    "return_list": "Append loss.item() after every step and return the list.",
    "one_per_step": "Record one loss per optimiser step.",
}

STEPS = 40
SEQUENCES = 128
THRESHOLD = 0.9  # a correct loop reaches about 1.0 within 40 steps


def losses_of(student, reference, num_heads=4, believed=True):
    """(reported losses, the trained model, its loss recomputed here); with `believed`, the last
    reported loss must agree with the recomputed one."""
    losses, model, (inputs, targets) = trained_pattern_model(student, reference, num_heads, STEPS, SEQUENCES)
    if isinstance(losses, torch.Tensor):
        losses = losses.tolist()
    checks.require(isinstance(losses, (list, tuple)), f"train_model returned {type(losses).__name__}, "
                   "not a list of losses.", CAUSES["return_list"])
    values = []
    for loss in losses:
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            loss = loss.item()
        checks.require(isinstance(loss, (int, float)), "train_model's list holds something other than numbers.",
                       "Append loss.item(), a float.")
        values.append(float(loss))
    checks.require(values, "train_model returned an empty list.", CAUSES["one_per_step"])
    actual = pattern_loss(model, inputs, targets)
    if not agrees(values[-1], actual):   # the loss of the model it trained, the student's own (BUILT_ON)?
        own = in_own_model(student, model, num_heads, lambda own_model: pattern_loss(own_model, inputs, targets))
        actual = own if own is not None and agrees(values[-1], own) else actual
    if believed and not agrees(values[-1], actual):
        cause = CAUSES["crossed"] if agrees(values[-1], crossed_loss(model, inputs, targets)) else ""
        raise checks.Feedback(f"The last loss train_model reported is {values[-1]:.3f}, but the parameters it "
                              f"left in the model give a loss of {actual:.3f} on the same batch.", cause)
    return values, model, actual


def crossed_loss(model, inputs, targets):
    """The loss of a loop that flattens logits and targets in different orders."""
    return pattern_loss(model, inputs, targets, flatten_targets=lambda t: t.T.reshape(-1))


def agrees(reported, recomputed):
    return abs(reported - recomputed) <= 0.05 + 0.1 * recomputed


def moved(before, after):
    """The names of the parameters that differ between two {name: tensor} states."""
    return sorted(name for name in before if name in after and not torch.equal(before[name], after[name]))


def unmoved(student, model, num_heads):
    """The cause, when the trained parameters are still the initial ones."""
    initial = run_module(student, "PatternModel", (num_heads,), train=True, dtype=None)["parameters"]
    if not moved(initial, model.state_dict()):
        return CAUSES["unmoved"]
    return ""


def held_out_accuracy(reference, model, student=None, num_heads=4):
    """The accuracy of the trained parameters on held-out sequences: in the reference model, or, where they
    fall short there and `student` is given, in the student's own PatternModel if it is higher (BUILT_ON)."""
    inputs, targets = reference["make_pattern_data"](256, seed=4242)
    accuracy = reference["accuracy"](model, inputs, targets)
    if accuracy < THRESHOLD and student is not None:
        own = in_own_model(student, model, num_heads, lambda own_model: reference["accuracy"](own_model, inputs, targets))
        accuracy = max(accuracy, own if own is not None else accuracy)
    return accuracy


def test_trains_the_model(student, reference):
    """The gate: train_model changes the model's parameters, or at least reports the model's losses."""
    values, model, actual = losses_of(student, reference, believed=False)
    inputs, targets = trained_pattern_model(student, reference, 4, STEPS, SEQUENCES)[2]
    reported = agrees(values[-1], actual) or agrees(values[-1], crossed_loss(model, inputs, targets))
    checks.require(reported or not unmoved(student, model, 4),
                   f"train_model left the parameters where they started and its last reported loss "
                   f"({values[-1]:.3f}) is not the model's ({actual:.3f}), so it does not train yet.")


def test_returns_one_loss_per_step(student, reference):
    losses, _, _ = losses_of(student, reference, believed=False)
    checks.require(len(losses) == STEPS, f"train_model(..., steps={STEPS}) returned {len(losses)} losses.",
                   CAUSES["one_per_step"])
    reported = trained_pattern_model(student, reference, 4, STEPS, SEQUENCES)[0]
    kinds = sorted({type(loss).__name__ for loss in reported if type(loss) is not float})
    checks.require(not kinds, f"The losses should be Python floats, but some are {', '.join(kinds)}.",
                   CAUSES["tensor_losses"])


def test_uses_the_learning_rate(student, reference):
    """With lr=1e-2 the parameters move; with lr=0 Adam's steps are zero and they must not."""
    _, model, _ = losses_of(student, reference, believed=False)
    cause = unmoved(student, model, 4)
    checks.require(not cause, "train_model(..., lr=1e-2) left every parameter where it started.", cause)
    inputs, targets = reference["make_pattern_data"](16, seed=1001)
    untouched = run_module(student, "PatternModel", (2,), train=True, dtype=None)["parameters"]
    trained = run_module(student, "PatternModel", (2,), train=True, dtype=None,
                           functions=[("train_model", (inputs, targets), {"steps": 3, "lr": 0.0})])["parameters"]
    changed = moved(untouched, trained)
    checks.require(not changed, f"train_model(..., lr=0.0) changed the parameters ({', '.join(changed[:3])}...).",
                   CAUSES["lr"])


def test_loss_decreases(student, reference):
    _, model, final = losses_of(student, reference)
    inputs, targets = reference["make_pattern_data"](SEQUENCES, seed=1000)
    torch.manual_seed(0)
    initial = pattern_loss(reference["PatternModel"](4), inputs, targets)
    if final >= 0.6 * initial:  # the cause is looked for only when there is a failure to explain
        raise checks.Feedback(f"The training loss went from about {initial:.2f} (an untrained model) to "
                              f"{final:.2f} (the returned parameters); a correct loop roughly divides it by three.",
                              unmoved(student, model, 4))


def test_learns_the_pattern(student, reference):
    _, model, _ = losses_of(student, reference, believed=False)
    accuracy = held_out_accuracy(reference, model, student)
    if accuracy < THRESHOLD:
        raise checks.Feedback(f"After training, the 4-head model predicts {accuracy:.0%} of held-out tokens "
                              f"correctly (from position 2 on); at least {THRESHOLD:.0%} was expected.",
                              unmoved(student, model, 4))


def test_learns_with_one_head(student, reference):
    _, model, _ = losses_of(student, reference, num_heads=1, believed=False)
    accuracy = held_out_accuracy(reference, model, student, num_heads=1)
    if accuracy < THRESHOLD:
        raise checks.Feedback(f"After training, the 1-head model predicts {accuracy:.0%} of held-out tokens "
                              f"correctly; at least {THRESHOLD:.0%} was expected.", unmoved(student, model, 1))
