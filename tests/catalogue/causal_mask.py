"""The catalogue of causal_mask: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_causal_mask.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative


MISTAKES = [
    Mistake("upper triangle", "upper_triangle",
            fails=("allows_keys_up_to_the_query", "makes_attention_causal"),
            code='''def causal_mask(seq_len, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).triu()
'''),
    Mistake("diagonal excluded", "no_diagonal",
            fails=("allows_keys_up_to_the_query", "diagonal_is_allowed"),
            code='''def causal_mask(seq_len, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril(diagonal=-1)
'''),
    Mistake("float mask", "float_mask",
            fails=("is_boolean_and_square",),
            code='''def causal_mask(seq_len, device=None):
    return torch.tril(torch.ones(seq_len, seq_len, device=device))
'''),
    Mistake("blocked-positions convention", "blocked_convention",
            fails=("allows_keys_up_to_the_query", "diagonal_is_allowed", "makes_attention_causal"),
            code='''def causal_mask(seq_len, device=None):
    return torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), diagonal=1)
'''),
    Mistake("a leading batch axis of 1", "leading_axis",
            fails=("is_boolean_and_square",),
            code='''def causal_mask(seq_len, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()[None]
'''),
    Mistake("cut from a fixed 16 x 16 buffer", "fixed_size",
            fails=("allows_keys_up_to_the_query",),
            code='''CAUSAL = torch.ones(16, 16, dtype=torch.bool).tril()


def causal_mask(seq_len, device=None):
    return CAUSAL[:seq_len, :seq_len].to(device)
'''),
]


ALTERNATIVES = [
    Alternative("arange comparison", '''def causal_mask(seq_len, device=None):
    positions = torch.arange(seq_len, device=device)
    return positions[:, None] >= positions[None, :]
'''),
    Alternative("negated upper triangle", '''def causal_mask(seq_len, device=None):
    return ~torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device), diagonal=1)
'''),
]


DEGENERATES = [
    Degenerate("allows everything", '''def causal_mask(seq_len, device=None):
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)
'''),
    Degenerate("allows nothing", '''def causal_mask(seq_len, device=None):
    return torch.zeros(seq_len, seq_len, dtype=torch.bool, device=device)
'''),
    Degenerate("only the diagonal", '''def causal_mask(seq_len, device=None):
    return torch.eye(seq_len, dtype=torch.bool, device=device)
'''),
]
