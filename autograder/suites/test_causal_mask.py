"""Hidden tests for causal_mask(seq_len, device=None) -> bool [seq_len, seq_len]."""

import torch

from autograder.harness import checks
from autograder.pictures import Picture
from autograder.suites.helpers import common
from autograder.suites.helpers.common import B, D_K, SK, randn, tril


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "upper_triangle": "the upper triangle (torch.triu), the opposite of key <= query",
    "no_diagonal": "a mask that excludes the diagonal (tril(diagonal=-1)): a token may not see itself",
    "blocked_convention": "the blocked-positions convention (triu(diagonal=1), True = blocked)",
    "float_mask": "torch.tril(torch.ones(n, n)) is float: pass dtype=torch.bool or call .bool().",
    "fixed_size": "the mask has the same size whatever seq_len: build it from seq_len, not from a fixed-size "
                  "buffer.",
    "leading_axis": "a mask with a leading axis of 1 ([1, seq_len, seq_len]): it broadcasts like the square, but "
                    "the statement asks for [seq_len, seq_len] (drop the extra axis: mask[0] or .squeeze(0))",
}


def causal_mask(student, seq_len, *args, square=True, **kwargs):
    """The student's mask; with square, leading axes of 1 ([1, S, S], which broadcasts like the square)
    are dropped, so that only test_is_boolean_and_square charges that convention."""
    mask = student.call("causal_mask", seq_len, *args, **kwargs)["output"]
    mask = checks.tensor(mask, f"causal_mask({seq_len})")
    if square and mask.dim() > 2 and mask.shape[-2:] == (seq_len, seq_len) and mask.numel() == seq_len ** 2:
        mask = mask.reshape(seq_len, seq_len)
    return mask


def named_mistakes(seq_len):
    """What each named mistake gives: cause text -> mask."""
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return common.named(CAUSES, upper_triangle=ones.triu(), no_diagonal=ones.tril(diagonal=-1),
                   blocked_convention=ones.triu(diagonal=1))


def test_depends_on_the_position(student):
    """The gate: a causal mask lets each query see a different number of keys (a mask with leading axes
    of 1 is read as the [6, 6] it broadcasts to: that convention costs the shape test, not the gate)."""
    mask = causal_mask(student, 6)
    checks.shape(mask, (6, 6), "causal_mask(6)")
    allowed = mask != 0
    checks.require(bool(allowed.any()) and bool((~allowed).any()) and len(set(allowed.sum(-1).tolist())) > 1,
                   "causal_mask(6) gives every query the same keys ("
                   + ("all of them" if bool(allowed.all()) else "none" if not bool(allowed.any()) else "the same number")
                   + "): a causal mask lets query i see keys 0..i, so it is not a causal mask yet.")


def test_is_boolean_and_square(student):
    mask = causal_mask(student, 6, square=False)
    checks.shape(mask, (6, 6), "causal_mask(6)", CAUSES["leading_axis"] if mask.dim() > 2 else "")
    checks.equal(mask.dtype, torch.bool, "The dtype of the mask",
                 CAUSES["float_mask"],
                 reveal=True)


def test_allows_keys_up_to_the_query(student):
    for seq_len in (4, 9, 1, 300, 1100):  # beyond any fixed buffer a mask might be cut from
        mask = causal_mask(student, seq_len)
        square = mask.dim() == 2 and mask.shape[0] == mask.shape[1]
        checks.shape(mask, (seq_len, seq_len), f"causal_mask({seq_len})", CAUSES["fixed_size"] if square else "")
        allowed = mask != 0
        named = [name for name, wrong in named_mistakes(seq_len).items()
                 if seq_len > 1 and torch.equal(allowed, wrong)]
        checks.require(torch.equal(allowed, tril(seq_len)),
                       f"causal_mask({seq_len}) allows the wrong positions.",
                       f"It matches {named[0]}." if named else
                       "mask[i, j] should be True exactly when j <= i.",
                       Picture.of(f"causal_mask({seq_len}) (1 = may attend)", allowed.double(), tril(seq_len),
                                  yours="your mask"))


def test_diagonal_is_allowed(student):
    mask = causal_mask(student, 5)
    checks.shape(mask, (5, 5), "causal_mask(5)")
    checks.require(bool((mask.diagonal() != 0).all()), "The diagonal of the mask is blocked.",
                   "A token may attend to itself: use tril() with the default diagonal=0.")


def test_accepts_device_argument(student):
    # Only what the device argument changes is charged here; a wrong mask costs its own tests.
    plain = causal_mask(student, 4)
    for args, kwargs in [((), {"device": "cpu"}), (("cpu",), {})]:
        mask = causal_mask(student, 4, *args, **kwargs)
        checks.require(mask.shape == plain.shape and torch.equal(mask, plain),
                       "causal_mask(4, device='cpu') returns a different mask than causal_mask(4).",
                       "Pass device= to the tensor factory (torch.ones(..., device=device)).")


def test_makes_attention_causal(student, reference):
    attention = reference["scaled_dot_product_attention"]
    mask = causal_mask(student, SK) != 0
    x = randn(B, SK, D_K, seed=3)
    changed = x.clone()
    changed[:, -1] = randn(B, D_K, seed=4)
    try:
        before, weights = attention(x, x, x, mask=mask)
        after, _ = attention(changed, changed, changed, mask=mask)
    except RuntimeError:   # the grader's attention with the student's mask: a mask of another shape is no verdict
        raise checks.Feedback(f"causal_mask({SK}) of shape {list(mask.shape)} does not broadcast against scores "
                              f"[{B}, {SK}, {SK}].") from None
    checks.require(torch.equal(before[:, :-1], after[:, :-1]),
                   "With your mask, changing the last token changes the outputs at earlier positions.",
                   "Earlier queries must not see later keys.",
                   Picture.of("attention weights with your mask", weights[0], tril(SK)))
