"""Hidden tests for by_hand: attention worked out by hand for one query, on the student's own numbers.

by_hand = {"scores": 3 numbers, "weights": 3 numbers, "context": 2 numbers}, for the query, keys and
values of the student's variant (student.variant, drawn again here from the student's id: the
notebook's VARIANT and its variant.json are never trusted).  Each step is checked against the
student's previous one, so that a slip costs its own test: the scores against the keys and the
query, the weights against the student's scores, the context against the student's weights.  An
answer that holds another variant's numbers is named as such.
"""

import math

import numpy as np

from autograder.harness import checks
from autograder.suites.helpers.common import whose_numbers

# The earlier exercises' functions its answers may call (checks.built_on): the weights may be the student's
# own softmax of their scores.
BUILT_ON = {"softmax": ("softmax",)}

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "other_variant": "These are the numbers of another variant, not yours: work from VARIANT, your copy's "
                     "numbers (the variant.json beside your notebook).",
    "unscaled": "the scores not divided by sqrt(d_k) = sqrt(2)",
    "divide_by_d_k": "the scores divided by d_k = 2 instead of sqrt(d_k) = sqrt(2)",
    "keys": "the weights applied to the keys: the context is the weighted sum of the values",
    "weights_unscaled": "the weights are the softmax of the scores before the division by sqrt(2): take the softmax "
                        "of the scaled scores",
    "format": 'Give by_hand = {"scores": [3 numbers], "weights": [3 numbers], "context": [2 numbers]}.',
}
SCORES, WEIGHTS, CONTEXT = 0.01, 0.02, 0.05   # what two decimals by hand may be off by, step by step


def answer(student):
    """The student's (scores, weights, context) as lists of floats."""
    value = student.value("by_hand")["output"]
    checks.require(isinstance(value, dict) and {"scores", "weights", "context"} <= set(value),
                   f"by_hand is {type(value).__name__}, not a dict with scores, weights and context.", CAUSES["format"])
    return [checks.numbers(value[name], size, f"by_hand[{name!r}]", CAUSES["format"])
            for name, size in (("scores", 3), ("weights", 3), ("context", 2))]


def scores_of(numbers, scale=True):
    """The scores of the numbers' query: divided by sqrt(d_k) (scale=True), by nothing (False), or by `scale`."""
    q = numbers["query"]
    divisor = math.sqrt(len(q)) if scale is True else (scale or 1)
    return [sum(a * b for a, b in zip(q, key)) / divisor for key in numbers["keys"]]


def softmax(scores):
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    return [e / sum(exps) for e in exps]


def weighted(weights, rows):
    return [sum(w * row[j] for w, row in zip(weights, rows)) for j in range(len(rows[0]))]


def near(got, want, tolerance):
    return all(abs(a - b) <= tolerance for a, b in zip(got, want))


def shown(numbers):
    return "[" + ", ".join(f"{x:.3f}" for x in numbers) + "]"


def test_answers_are_attention(student):
    """The gate: weights, positive and summing to one, that are not all equal (the student's query does
    not weigh their keys alike)."""
    scores, weights, context = answer(student)
    checks.require(all(w >= 0 for w in weights) and abs(sum(weights) - 1) <= WEIGHTS,
                   f"The weights {shown(weights)} are not positive numbers that sum to one.")
    checks.require(max(weights) - min(weights) > WEIGHTS, f"The weights {shown(weights)} are all equal: your "
                   "query does not weigh your keys alike, so they are not worked out yet.")


def test_answer_format(student):
    answer(student)


def test_scores(student):
    scores, _, _ = answer(student)
    want = scores_of(student.variant)
    if near(scores, want, SCORES):
        return
    observed = f"The scores are {shown(scores)}{checks.where(student.values_shown, 'your query and keys give', shown(want))}."
    for cause, scale in (("unscaled", False), ("divide_by_d_k", len(student.variant["query"]))):
        if near(scores, scores_of(student.variant, scale), SCORES):
            raise checks.Feedback(observed, checks.likely(CAUSES[cause]))
    other = whose_numbers(student, lambda numbers: any(near(scores, scores_of(numbers, scale), SCORES)
                                                       for scale in (True, False)))
    raise checks.Feedback(observed, CAUSES["other_variant"] if other else
                          "Each score is the dot product of your query with one key, divided by sqrt(2).")


def test_weights(student):
    scores, weights, _ = answer(student)
    want = softmax(scores)
    if not near(weights, want, WEIGHTS) and checks.follows_theirs(
            student, BUILT_ON, weights, lambda functions: functions["softmax"](np.array(scores), axis=-1),
            same=lambda got, theirs: near(got, np.asarray(theirs, dtype=float).tolist(), WEIGHTS)):
        return   # the softmax of the student's own softmax exercise: a slip there is that exercise's to charge
    unscaled = near(weights, softmax([s * math.sqrt(2) for s in scores]), WEIGHTS)
    gives = checks.where(student.values_shown, f"the softmax of your scores {shown(scores)} gives", shown(want))
    checks.require(near(weights, want, WEIGHTS), f"The weights are {shown(weights)}{gives}.",
                   checks.likely(CAUSES["weights_unscaled"]) if unscaled else "w_i = exp(s_i) / sum_j exp(s_j).")


def test_context(student):
    _, weights, context = answer(student)
    # The context is checked against the student's own weights (a slip in them is charged once, by
    # test_weights), but only weights that are attention weights: any context "follows" from zeros.
    checks.require(min(weights) >= -WEIGHTS and abs(sum(weights) - 1) <= WEIGHTS,
                   f"The weights {shown(weights)} are not attention weights (they sum to {sum(weights):.3f}), "
                   "so no context follows from them.", "w_i = exp(s_i) / sum_j exp(s_j): each at least 0, "
                   "summing to 1.")
    values = student.variant["values"]
    want = weighted(weights, values)
    if near(context, want, CONTEXT):
        return
    observed = f"The context is {shown(context)}{checks.where(student.values_shown, 'your weights and values give', shown(want))}."
    if near(context, weighted(weights, student.variant["keys"]), CONTEXT):
        raise checks.Feedback(observed, checks.likely(CAUSES["keys"]))
    other = whose_numbers(student, lambda numbers: near(context, weighted(weights, numbers["values"]), CONTEXT))
    raise checks.Feedback(observed, CAUSES["other_variant"] if other else "The context is sum_i w_i v_i over your three values.")
