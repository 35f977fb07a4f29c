"""The catalogue of by_hand (attention worked out by hand on the student's own numbers): its mistakes
(with the cause each must be named by, a key of CAUSES in autograder/suites/test_by_hand.py, and the
tests it may fail), correct alternatives and degenerate answers.  Each entry is graded as a student of its
own, on that student's variant: the code reads VARIANT as a student's would.  An answer worked out for
a classmate's numbers is tests/test_variants.py's."""

from functools import partial

from tests.catalogue.entries import Degenerate, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("attention_basics")["by_hand"]
changed = partial(edited, SOLUTION)


MISTAKES = [
    Mistake("scores not divided by sqrt(d_k)", "unscaled", fails=("scores",),
            code=changed("s = K @ q / np.sqrt(2)", "s = K @ q")),
    Mistake("scores divided by d_k, not its square root", "divide_by_d_k", fails=("scores",),
            code=changed("s = K @ q / np.sqrt(2)", "s = K @ q / 2")),
    Mistake("weights of the unscaled scores", "weights_unscaled", fails=("weights",),
            code=changed("w = softmax(s)", "w = softmax(K @ q)")),
    Mistake("the context from the keys", "keys", fails=("context",),
            code=changed('"context": (w @ V)', '"context": (w @ K)')),
    Mistake("the released notebook's numbers (no variant.json)", "other_variant", fails=("scores", "context"),
            code=changed("np.array(VARIANT[name], dtype=float)", "np.array(DEFAULT_VARIANT[name], dtype=float)")),
]


ALTERNATIVES = [
    # Every form of a number the notebook's own check takes (np.array(..., dtype=float) of shape (3,)).
    Alternative("arrays, and a list of 0-d arrays", '''q, K, V = (np.array(VARIANT[name], dtype=float) for name in ("query", "keys", "values"))
s = K @ q / math.sqrt(2)
w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
by_hand = {"scores": s, "weights": [np.array(x) for x in w], "context": w @ V}
'''),
    Alternative("two decimals, worked out in plain Python", '''import math
query, keys, values = VARIANT["query"], VARIANT["keys"], VARIANT["values"]
scores = [(query[0] * k[0] + query[1] * k[1]) / math.sqrt(2) for k in keys]
exps = [math.exp(s) for s in scores]
weights = [e / sum(exps) for e in exps]
context = [sum(w * v[j] for w, v in zip(weights, values)) for j in range(2)]
by_hand = {"scores": [round(s, 2) for s in scores], "weights": [round(w, 2) for w in weights],
           "context": [round(c, 2) for c in context]}
'''),
    Alternative("the notebook's attention function, as arrays", '''q, K, V = (np.array(VARIANT[name], dtype=float) for name in ("query", "keys", "values"))
context, weights = attention(q[None, :], K, V)
by_hand = {"scores": K @ q / np.sqrt(2), "weights": weights[0], "context": context[0]}
'''),
]

# A slip of softmax, an exercise of its own, is charged there alone: weights worked out with the student's own
# wrong softmax (its own weights: positive, summing to one) keep by_hand's points (test_by_hand.BUILT_ON).
ALTERNATIVES += [Alternative("a right by_hand on a softmax in base 2 (softmax's own slip)", '''def softmax(x, axis=-1):
    powers = 2.0 ** (x - np.max(x, axis=axis, keepdims=True))
    return powers / np.sum(powers, axis=axis, keepdims=True)


''' + SOLUTION)]


DEGENERATES = [
    Degenerate("zeros", 'by_hand = {"scores": [0.0, 0.0, 0.0], "weights": [0.0, 0.0, 0.0], "context": [0.0, 0.0]}\n'),
    Degenerate("uniform weights", '''V = np.array(VARIANT["values"], dtype=float)
by_hand = {"scores": [0.0, 0.0, 0.0], "weights": [1 / 3] * 3, "context": V.mean(axis=0).tolist()}
'''),
]
