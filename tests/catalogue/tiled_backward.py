"""The catalogue of tiled_backward: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_tiled_backward.py, and the tests it may fail), correct variants and
degenerate answers.  TODO: the mistakes students really make, each with its own cause."""

from tests.catalogue.entries import Degenerate, Mistake, Variant

MISTAKES = [
    Mistake("doubles its input", "doubled",
            fails=("matches_reference_solution",),
            code='''def flash_attention_backward(x):
    return 2 * x
'''),
]


VARIANTS = [
    Variant("the reference written another way (TODO)", '''def flash_attention_backward(x):
    return x.clone()
'''),
]


DEGENERATES = [
    Degenerate("zeros", '''def flash_attention_backward(x):
    return torch.zeros_like(x)
'''),
]
