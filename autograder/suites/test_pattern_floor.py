"""Hidden tests for pattern_floor: what the best model can learn on the student's own pattern task
(student.variant: period, vocab, seq_len, drawn again here from the student's id).

pattern_floor = {"first_predictable": period - 1, "loss_floor": first_predictable / seq_len * ln(vocab)}.
The floor is checked against the student's own first_predictable, so that a slip there costs that test
alone.
"""

import math

from autograder.harness import checks
from autograder.suites.helpers.common import whose_numbers

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "other_variant": "These are the numbers of another variant, not yours: work from VARIANT, your copy's "
                     "pattern task (the variant.json beside your notebook).",
    "period": "the period taken for the first predictable position: the target at t is token t + 1, a copy of "
              "token t + 1 - period, so position period - 1 is the first whose target is known",
    "log2": "the floor in bits (log2): cross-entropy in PyTorch uses the natural log",
    "predictable_counted": "the floor counts the positions that can be predicted: they cost nothing, the others "
                           "ln(vocab) each",
    "format": 'Give pattern_floor = {"first_predictable": an int, "loss_floor": a number}.',
}
TOLERANCE = 0.01   # relative, on the floor


def answer(student):
    value = student.value("pattern_floor")["output"]
    checks.require(isinstance(value, dict) and {"first_predictable", "loss_floor"} <= set(value),
                   f"pattern_floor is {type(value).__name__}, not a dict with first_predictable and loss_floor.",
                   CAUSES["format"])
    return (checks.number(value["first_predictable"], "pattern_floor['first_predictable']", CAUSES["format"], whole=True),
            checks.number(value["loss_floor"], "pattern_floor['loss_floor']", CAUSES["format"]))


def floor_of(numbers, first=None, log=math.log):
    first = numbers["period"] - 1 if first is None else first
    return first / numbers["seq_len"] * log(numbers["vocab"])


def close(got, want):
    return math.isclose(got, want, rel_tol=TOLERANCE)


def test_answers_the_task(student):
    """The gate: a position inside the sequence, and a floor between a perfect model and a uniform guess."""
    first, floor = answer(student)
    numbers = student.variant
    checks.require(0 < first < numbers["seq_len"], f"first_predictable is {first}, no position after the first "
                   f"of a sequence of {numbers['seq_len']}.")
    checks.require(0 < floor < math.log(numbers["vocab"]), f"loss_floor is {floor:.4f}, not between a perfect "
                   f"model (0) and a uniform guess over your vocabulary (ln {numbers['vocab']}).")


def test_answer_format(student):
    answer(student)


def test_first_predictable(student):
    first, floor = answer(student)
    want = student.variant["period"] - 1
    if first == want:
        return
    observed = f"first_predictable is {first}{checks.where(student.values_shown, 'your task gives', want)}."
    if first == student.variant["period"]:
        raise checks.Feedback(observed, checks.likely(CAUSES["period"]))
    other = whose_numbers(student, lambda numbers: first == numbers["period"] - 1
                          and close(floor, floor_of(numbers)))
    raise checks.Feedback(observed, CAUSES["other_variant"] if other else
                          "The target at t is token t + 1: from which t on is it a copy of an earlier token?")


def test_loss_floor(student):
    first, floor = answer(student)
    numbers = student.variant
    # A floor that follows from the student's own first_predictable is charged once (by that test), but
    # only from a position a model could start at: no first token is ever predictable, and from 0 any
    # floor would be 0.
    if close(floor, floor_of(numbers)) or (first >= 1 and close(floor, floor_of(numbers, first))):
        return
    want = floor_of(numbers, first)
    gives = checks.where(student.values_shown, "your task and your first_predictable give", f"{want:.4f}")
    observed = f"loss_floor is {floor:.4f}{gives}."
    firsts = (first, numbers["period"] - 1)
    slips = {"log2": [floor_of(numbers, f, math.log2) for f in firsts],
             "predictable_counted": [(numbers["seq_len"] - f) / numbers["seq_len"] * math.log(numbers["vocab"])
                                     for f in firsts],
             "period": [floor_of(numbers, numbers["period"])]}
    for cause, values in slips.items():
        if any(close(floor, value) for value in values):
            raise checks.Feedback(observed, checks.likely(CAUSES[cause]))
    other = whose_numbers(student, lambda others: close(floor, floor_of(others)) or close(floor, floor_of(others, first)))
    raise checks.Feedback(observed, CAUSES["other_variant"] if other else
                          "Each position before first_predictable costs ln(vocab); average over all seq_len positions.")
