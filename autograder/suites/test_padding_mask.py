"""Hidden tests for padding_mask(lengths, max_len) -> bool [B, 1, 1, max_len]."""

import torch

from autograder.harness import checks
from autograder.pictures import Picture
from autograder.suites.helpers.common import H, named, qkv, torch_attention


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "off_by_one": "j <= length instead of j < length (one padded key still allowed)",
    "blocked_convention": "the blocked-positions convention (True = padding)",
    "flat_shape": "Return [B, 1, 1, S] so that it broadcasts against scores [B, H, Sq, Sk].",
    "blocks_queries": "A [B, 1, S, 1] mask would block queries instead of keys.",
    "longest_length": "Its last axis should have max_len key positions: use the max_len argument, not "
                      "lengths.max().",
}


def padding_mask(student, lengths, max_len):
    mask = student.call("padding_mask", lengths, max_len)["output"]
    return checks.tensor(mask, f"padding_mask(lengths, {max_len})")


def named_mistakes(lengths, max_len):
    """What each named mistake gives: cause text -> mask."""
    positions = torch.arange(max_len)[None, :]
    return named(CAUSES, off_by_one=(positions <= lengths[:, None])[:, None, None, :],
                   blocked_convention=(positions >= lengths[:, None])[:, None, None, :])


LENGTHS = torch.tensor([3, 7, 1, 5])
MAX_LEN = 7


def expected(lengths, max_len):
    return (torch.arange(max_len)[None, :] < lengths[:, None])[:, None, None, :]


def shape_cause(mask, batch, max_len, longest):
    """The cause of a wrong shape, when the shape shows it."""
    shape = tuple(mask.shape)
    if shape in ((batch, max_len), (batch * max_len,)):
        return CAUSES["flat_shape"]
    if shape == (batch, 1, max_len, 1):
        return CAUSES["blocks_queries"]
    if shape[-1:] == (longest,) and longest != max_len:
        return CAUSES["longest_length"]
    return ""


def test_depends_on_the_lengths(student):
    """The gate: sequences of different lengths get different masks, each allowing some keys."""
    mask = padding_mask(student, LENGTHS, MAX_LEN)
    checks.require(mask.numel() == len(LENGTHS) * MAX_LEN,
                   f"padding_mask(lengths, {MAX_LEN}) has {mask.numel()} entries for {len(LENGTHS)} sequences of "
                   f"{MAX_LEN} positions.")
    rows = mask.reshape(len(LENGTHS), MAX_LEN) != 0
    checks.require(bool(rows.any()) and bool((~rows).any()) and len({tuple(row.tolist()) for row in rows}) > 1,
                   "padding_mask gives sequences of different lengths the same mask, so it ignores the lengths: "
                   "it is not a padding mask yet.")


def test_is_boolean_with_broadcast_shape(student):
    mask = padding_mask(student, LENGTHS, MAX_LEN)
    checks.require(mask.dtype == torch.bool, f"padding_mask returned dtype {mask.dtype}; expected torch.bool.",
                   "Build it from a comparison (positions < lengths), which gives booleans.")
    checks.shape(mask, (len(LENGTHS), 1, 1, MAX_LEN), "padding_mask(lengths, max_len)",
                 shape_cause(mask, len(LENGTHS), MAX_LEN, int(LENGTHS.max())))


def test_allows_real_keys_only(student):
    mask = padding_mask(student, LENGTHS, MAX_LEN)
    checks.shape(mask, (len(LENGTHS), 1, 1, MAX_LEN), "padding_mask(lengths, max_len)")
    rule = expected(LENGTHS, MAX_LEN)
    checks.close(mask.to(torch.float64), rule.double(), "The padding mask",
                 "Key position j of sequence b is real exactly when j < lengths[b]; True = may attend.",
                 {name: value.double() for name, value in named_mistakes(LENGTHS, MAX_LEN).items()},
                 Picture.of(f"padding_mask(lengths={LENGTHS.tolist()}, {MAX_LEN}): one row per sequence "
                            "(1 = may attend)", mask[:, 0, 0].double(), rule[:, 0, 0], rows="sequence",
                            yours="your mask"))


def test_full_length_allows_every_key(student):
    lengths = torch.tensor([4, 4])
    mask = padding_mask(student, lengths, 4)
    checks.shape(mask, (2, 1, 1, 4), "padding_mask for sequences without padding")
    checks.require(bool(mask.all()), "A sequence as long as max_len has blocked keys.",
                   "True means 'may attend'.")


def test_blocks_keys_not_queries(student):
    lengths = torch.tensor([2, 5, 3])
    mask = padding_mask(student, lengths, 6)
    checks.shape(mask, (3, 1, 1, 6), "padding_mask(lengths, 6)", shape_cause(mask, 3, 6, 5))


def test_padded_keys_do_not_change_outputs(student):
    lengths = torch.tensor([3, 6])
    q, k, v = qkv((2, H), sq=6, sk=6)
    mask = padding_mask(student, lengths, 6)
    checks.require(mask.dtype == torch.bool, "padding_mask does not return a boolean tensor.")
    checks.broadcasts(mask, (len(lengths), H, 6, 6), "The padding mask for scores [B, H, Sq, Sk]",
                      CAUSES["flat_shape"])
    output = torch_attention(q, k, v, mask)
    for b, length in enumerate(lengths.tolist()):
        alone = torch_attention(q[b], k[b, :, :length], v[b, :, :length])
        checks.close(output[b], alone, f"Attention over sequence {b} with your mask",
                     "With the mask, a padded sequence must give what its unpadded keys alone give.")
