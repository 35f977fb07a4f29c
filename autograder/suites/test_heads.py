"""Hidden tests for split_heads(x, num_heads) and merge_heads(x)."""

from autograder.harness import checks, substance
from autograder.suites.helpers.common import B, D_K, D_MODEL, H, SQ, named, randn


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "split_without_transpose": "a view straight to [B, H, S, d_k] without the transpose (it mixes tokens and "
                               "features)",
    "features_transposed": "splitting the features as [d_k, H] instead of [H, d_k]",
    "merge_without_transpose": "a view of [B, H, S, d_k] straight to [B, S, D] without moving the head axis back",
    "head_axis_last": "putting the head axis last ([B, S, d_k, H]) before flattening",
    "layout": "view(B, S, H, d_k) and then transpose(1, 2), so head h holds features h*d_k:(h+1)*d_k.",
}


def split_heads(student, x, num_heads):
    return checks.tensor(student.call("split_heads", x, num_heads)["output"], "split_heads(x)")


def merge_heads(student, x):
    return checks.tensor(student.call("merge_heads", x)["output"], "merge_heads(x)")


def split_heads_mistakes(x, num_heads):
    b, s, d = x.shape
    return named(CAUSES, split_without_transpose=x.reshape(b, num_heads, s, d // num_heads),
                   features_transposed=x.reshape(b, s, d // num_heads, num_heads).permute(0, 3, 1, 2))


def merge_heads_mistakes(x):
    b, h, s, d_k = x.shape
    return named(CAUSES, merge_without_transpose=x.reshape(b, s, h * d_k),
                   head_axis_last=x.permute(0, 2, 3, 1).reshape(b, s, h * d_k))


def test_rearranges_the_features(student):
    """The gate: both functions only move the entries of their input."""
    x = randn(B, SQ, D_MODEL, seed=4)
    substance.rearrangement(split_heads(student, x, H), x, (B, H, SQ, D_K), "split_heads(x, H)")
    heads = randn(B, H, SQ, D_K, seed=5)
    substance.rearrangement(merge_heads(student, heads), heads, (B, SQ, D_MODEL), "merge_heads(x)")


def test_split_heads_shape(student):
    x = randn(B, SQ, D_MODEL)
    checks.shape(split_heads(student, x, H), (B, H, SQ, D_K), "split_heads(x, H)")


def test_split_heads_layout(student, reference):
    x = randn(B, SQ, D_MODEL, seed=1)
    checks.close(split_heads(student, x, H), reference["split_heads"](x, H), "split_heads(x, H)",
                 CAUSES["layout"], split_heads_mistakes(x, H))


def test_merge_heads_inverts_split(student, reference):
    x = randn(B, SQ, D_MODEL, seed=2)
    heads = reference["split_heads"](x, H)  # a transposed, non-contiguous view
    checks.close(merge_heads(student, heads), x, "merge_heads(split_heads(x))",
                 "Move the head axis back next to d_k before flattening; after a transpose, call "
                 ".contiguous() before .view (or use .reshape).")


def test_merge_heads_layout(student, reference):
    x = randn(B, H, SQ, D_K, seed=3)
    checks.close(merge_heads(student, x), reference["merge_heads"](x), "merge_heads(x)",
                 "transpose(1, 2) first, then flatten the last two axes.", merge_heads_mistakes(x))
