"""The catalogue of online_softmax: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_online_softmax.py, and the tests it may fail), correct variants and
degenerate answers.  TODO: the mistakes students really make, each with its own cause."""

from tests.catalogue.entries import Degenerate, Mistake, Variant

MISTAKES = [
    Mistake("doubles its input", "doubled",
            fails=("matches_reference_solution",),
            code='''def online_softmax_update(x):
    return 2 * x
'''),
]


VARIANTS = [
    Variant("the reference written another way (TODO)", '''def online_softmax_update(x):
    return x.clone()
'''),
]


DEGENERATES = [
    Degenerate("zeros", '''def online_softmax_update(x):
    return torch.zeros_like(x)
'''),
]
