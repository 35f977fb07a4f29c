"""The catalogue of pattern_floor (what the best model can learn on the student's own pattern task): its
mistakes (with the cause each must be named by, a key of CAUSES in autograder/suites/test_pattern_floor.py,
and the tests it may fail), correct alternatives and degenerate answers.  Each entry is graded as a student
of its own, on that student's variant."""

from functools import partial

from tests.catalogue.entries import Degenerate, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("heads_at_work")["pattern_floor"]
changed = partial(edited, SOLUTION)


MISTAKES = [
    Mistake("the period as the first predictable position", "period", fails=("first_predictable",),
            code=changed('first = VARIANT["period"] - 1', 'first = VARIANT["period"]')),
    Mistake("the floor in bits", "log2", fails=("loss_floor",),
            code=changed("math.log(VARIANT", "math.log2(VARIANT")),
    Mistake("the predictable positions charged instead", "predictable_counted", fails=("loss_floor",),
            code=changed('"loss_floor": first / VARIANT["seq_len"]',
                         '"loss_floor": (VARIANT["seq_len"] - first) / VARIANT["seq_len"]')),
    Mistake("the floor from the period, first_predictable right", "period", fails=("loss_floor",),
            code=changed('"loss_floor": first / VARIANT["seq_len"]', '"loss_floor": VARIANT["period"] / VARIANT["seq_len"]')),
    Mistake("the released notebook's task (no variant.json)", "other_variant", fails=("first_predictable", "loss_floor"),
            code=SOLUTION.replace("VARIANT[", "DEFAULT_VARIANT[")),
]


ALTERNATIVES = [
    # Every form of a number the notebook's own check takes (0 < floor < ln(vocab), math.isclose): a 0-d tensor.
    Alternative("the floor as a 0-d tensor", '''first = VARIANT["period"] - 1
floor = torch.tensor(first / VARIANT["seq_len"]) * torch.log(torch.tensor(float(VARIANT["vocab"])))
pattern_floor = {"first_predictable": first, "loss_floor": floor}
'''),
    Alternative("the floor as a one-element tensor", '''first = VARIANT["period"] - 1
pattern_floor = {"first_predictable": first,
                 "loss_floor": torch.tensor([first * math.log(VARIANT["vocab"]) / VARIANT["seq_len"]])}
'''),
    Alternative("the floor from a sum over positions", '''period, vocab, length = VARIANT["period"], VARIANT["vocab"], VARIANT["seq_len"]
costs = [math.log(vocab) if t < period - 1 else 0.0 for t in range(length)]
pattern_floor = {"first_predictable": float(period - 1), "loss_floor": sum(costs) / len(costs)}
'''),
]


DEGENERATES = [
    Degenerate("zeros", 'pattern_floor = {"first_predictable": 0, "loss_floor": 0.0}\n'),
    Degenerate("a uniform guess everywhere", 'pattern_floor = {"first_predictable": 0, "loss_floor": math.log(VARIANT["vocab"])}\n'),
]
