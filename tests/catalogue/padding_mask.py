"""The catalogue of padding_mask: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_padding_mask.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative


MISTAKES = [
    Mistake("<= instead of <", "off_by_one",
            fails=("allows_real_keys_only", "padded_keys_do_not_change_outputs"),
            code='''def padding_mask(lengths, max_len):
    return (torch.arange(max_len)[None, :] <= lengths[:, None])[:, None, None, :]
'''),
    Mistake("True marks padding", "blocked_convention",
            fails=("allows_real_keys_only", "full_length_allows_every_key", "padded_keys_do_not_change_outputs"),
            code='''def padding_mask(lengths, max_len):
    return (torch.arange(max_len)[None, :] >= lengths[:, None])[:, None, None, :]
'''),
    Mistake("returns [B, S]", "flat_shape",
            fails=("allows_real_keys_only", "blocks_keys_not_queries", "full_length_allows_every_key",
                   "is_boolean_with_broadcast_shape", "padded_keys_do_not_change_outputs"),
            code='''def padding_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] < lengths[:, None]
'''),
    Mistake("returns the right mask flattened to [B * S]", "flat_shape",
            fails=("allows_real_keys_only", "blocks_keys_not_queries", "full_length_allows_every_key",
                   "is_boolean_with_broadcast_shape", "padded_keys_do_not_change_outputs"),
            code='''def padding_mask(lengths, max_len):
    return (torch.arange(max_len)[None, :] < lengths[:, None])[:, None, None, :].reshape(-1)
'''),
    Mistake("blocks queries instead of keys", "blocks_queries",
            fails=("allows_real_keys_only", "blocks_keys_not_queries", "full_length_allows_every_key",
                   "is_boolean_with_broadcast_shape", "padded_keys_do_not_change_outputs"),
            code='''def padding_mask(lengths, max_len):
    return (torch.arange(max_len)[None, :] < lengths[:, None])[:, None, :, None]
'''),
    Mistake("uses lengths.max() instead of max_len", "longest_length",
            fails=("blocks_keys_not_queries",),
            code='''def padding_mask(lengths, max_len):
    width = int(lengths.max())
    return (torch.arange(width)[None, :] < lengths[:, None])[:, None, None, :]
'''),
]


ALTERNATIVES = [
    Alternative("loop over the batch", '''def padding_mask(lengths, max_len):
    mask = torch.zeros(len(lengths), 1, 1, max_len, dtype=torch.bool)
    for b, length in enumerate(lengths.tolist()):
        mask[b, 0, 0, :length] = True
    return mask
'''),
]


DEGENERATES = [
    Degenerate("allows everything", '''def padding_mask(lengths, max_len):
    return torch.ones(len(lengths), 1, 1, max_len, dtype=torch.bool)
'''),
    Degenerate("allows nothing", '''def padding_mask(lengths, max_len):
    return torch.zeros(len(lengths), 1, 1, max_len, dtype=torch.bool)
'''),
]
