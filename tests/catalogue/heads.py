"""The catalogue of heads: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_heads.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative


MISTAKES = [
    Mistake("view without transpose", "split_without_transpose",
            fails=("split_heads_layout",),
            code='''def split_heads(x, num_heads):
    B, S, D = x.shape
    return x.view(B, num_heads, S, D // num_heads)


def merge_heads(x):
    B, H, S, d_k = x.shape
    return x.transpose(1, 2).reshape(B, S, H * d_k)
'''),
    Mistake("features split as [d_k, H]", "features_transposed",
            fails=("split_heads_layout",),
            code='''def split_heads(x, num_heads):
    B, S, D = x.shape
    return x.view(B, S, D // num_heads, num_heads).permute(0, 3, 1, 2)


def merge_heads(x):
    B, H, S, d_k = x.shape
    return x.transpose(1, 2).reshape(B, S, H * d_k)
'''),
    Mistake("merge without moving the head axis", "merge_without_transpose",
            fails=("merge_heads_inverts_split", "merge_heads_layout"),
            code='''def split_heads(x, num_heads):
    B, S, D = x.shape
    return x.view(B, S, num_heads, D // num_heads).transpose(1, 2)


def merge_heads(x):
    B, H, S, d_k = x.shape
    return x.reshape(B, S, H * d_k)
'''),
]


ALTERNATIVES = [
    Alternative("unflatten and permute", '''def split_heads(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)


def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(-2)
'''),
]


DEGENERATES = [
    Degenerate("zeros of the right shapes", '''def split_heads(x, num_heads):
    B, S, D = x.shape
    return torch.zeros(B, num_heads, S, D // num_heads, dtype=x.dtype)


def merge_heads(x):
    B, H, S, d_k = x.shape
    return torch.zeros(B, S, H * d_k, dtype=x.dtype)
'''),
    Degenerate("return their input", '''def split_heads(x, num_heads):
    return x


def merge_heads(x):
    return x
'''),
]
