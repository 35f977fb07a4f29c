"""Hidden tests for split_heads(x, num_heads) and merge_heads(x)."""

from autograder.harness import checks, substance
from autograder.suites import adapters as A
from autograder.suites.mistakes import merge_heads_mistakes, split_heads_mistakes

LAYOUT_HINT = "view(B, S, H, d_k) and then transpose(1, 2), so head h holds features h*d_k:(h+1)*d_k."


def test_rearranges_the_features(student):
    """The gate: both functions only move the entries of their input."""
    x = A.randn(A.B, A.SQ, A.D_MODEL, seed=4)
    substance.rearrangement(A.split_heads(student, x, A.H), x, (A.B, A.H, A.SQ, A.D_K), "split_heads(x, H)")
    heads = A.randn(A.B, A.H, A.SQ, A.D_K, seed=5)
    substance.rearrangement(A.merge_heads(student, heads), heads, (A.B, A.SQ, A.D_MODEL), "merge_heads(x)")


def test_split_heads_shape(student):
    x = A.randn(A.B, A.SQ, A.D_MODEL)
    checks.shape(A.split_heads(student, x, A.H), (A.B, A.H, A.SQ, A.D_K), "split_heads(x, H)")


def test_split_heads_layout(student, reference):
    x = A.randn(A.B, A.SQ, A.D_MODEL, seed=1)
    checks.close(A.split_heads(student, x, A.H), reference["split_heads"](x, A.H), "split_heads(x, H)",
                 LAYOUT_HINT, split_heads_mistakes(x, A.H))


def test_merge_heads_inverts_split(student, reference):
    x = A.randn(A.B, A.SQ, A.D_MODEL, seed=2)
    heads = reference["split_heads"](x, A.H)  # a transposed, non-contiguous view
    checks.close(A.merge_heads(student, heads), x, "merge_heads(split_heads(x))",
                 "Move the head axis back next to d_k before flattening; after a transpose, call "
                 ".contiguous() before .view (or use .reshape).")


def test_merge_heads_layout(student, reference):
    x = A.randn(A.B, A.H, A.SQ, A.D_K, seed=3)
    checks.close(A.merge_heads(student, x), reference["merge_heads"](x), "merge_heads(x)",
                 "transpose(1, 2) first, then flatten the last two axes.", merge_heads_mistakes(x))
