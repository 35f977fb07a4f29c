"""The catalogue of rope (apply_rope): its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_rope.py, and the tests it may fail), correct alternatives and degenerate
answers."""

from functools import partial

from tests.catalogue.entries import Degenerate, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("latent_attention")["rope"]
changed = partial(edited, SOLUTION)


MISTAKES = [
    Mistake("each pair turned in place in x", "in_place",
            fails=("leaves_x_unchanged",),
            code=changed("    turned = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # [..., S, d/2, 2]\n"
                         "    return turned.flatten(-2)                                                   # [..., S, d]\n",
                         "    x[..., 0::2], x[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos\n    return x\n")),
    Mistake("the base argument ignored", "base",
            fails=("matches_the_reference",),
            code=changed("freqs = base ** (", "freqs = 10000.0 ** (")),
    Mistake("no ValueError for an odd d", "odd",
            fails=("returns_x_shape_and_dtype",),
            code=changed("    if d % 2:\n        raise ValueError(f\"apply_rope needs an even last dimension, got {d}\")\n", "")),
    Mistake("the half-split layout (rotate_half)", "half_split",
            fails=("matches_the_reference",),
            code=changed("    even, odd = x[..., 0::2], x[..., 1::2]                                      # [..., S, d/2]\n",
                         "    even, odd = x[..., : d // 2], x[..., d // 2:]\n",
                         "    turned = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # [..., S, d/2, 2]\n"
                         "    return turned.flatten(-2)                                                   # [..., S, d]\n",
                         "    return torch.cat((even * cos - odd * sin, even * sin + odd * cos), dim=-1)\n")),
    Mistake("turned the other way", "clockwise",
            fails=("matches_the_reference",),
            code=changed("(even * cos - odd * sin, even * sin + odd * cos)", "(even * cos + odd * sin, odd * cos - even * sin)")),
    Mistake("frequencies base ** (-i / d)", "frequency",
            fails=("matches_the_reference",),
            code=changed("torch.arange(0, d, 2, dtype=torch.float64) / d", "torch.arange(d // 2, dtype=torch.float64) / d")),
    Mistake("x * cos without the sine term", "cos_only",
            fails=("matches_the_reference", "keeps_the_length_of_each_vector", "scores_depend_only_on_the_offset"),
            code=changed("(even * cos - odd * sin, even * sin + odd * cos)", "(even * cos, odd * cos)")),
    Mistake("the positions argument ignored", "own_positions",
            fails=("positions_are_used_as_given",),
            code=changed("positions.to(torch.float64)[:, None]", "torch.arange(x.shape[-2], dtype=torch.float64)[:, None]")),
]


ALTERNATIVES = [
    Alternative("complex numbers, as DeepSeek's reference code", '''def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2:
        raise ValueError("odd width")
    inv = 1.0 / (base ** (torch.arange(0, d, 2).double() / d))
    phases = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64), torch.outer(positions.double(), inv))
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * phases).reshape(x.shape).to(x.dtype)
'''),
    Alternative("a rotation matrix per pair", '''def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    if d % 2 == 1:
        raise ValueError("d must be even")
    theta = torch.exp(-math.log(base) * torch.arange(d // 2, dtype=torch.float64) * 2 / d)
    angle = positions[:, None].double() * theta
    c, s = torch.cos(angle), torch.sin(angle)
    rotation = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2).to(x.dtype)  # [S, d/2, 2, 2]
    pairs = x.unflatten(-1, (d // 2, 2)).unsqueeze(-1)                                           # [..., S, d/2, 2, 1]
    return (rotation @ pairs).squeeze(-1).flatten(-2)
'''),
]


DEGENERATES = [
    Degenerate("x handed back", '''def apply_rope(x, positions, base=10000.0):
    if x.shape[-1] % 2:
        raise ValueError("odd")
    return x.clone()
'''),
    Degenerate("zeros", '''def apply_rope(x, positions, base=10000.0):
    return torch.zeros_like(x)
'''),
    Degenerate("NaN", '''def apply_rope(x, positions, base=10000.0):
    return torch.full_like(x, float("nan"))
'''),
    Degenerate("the sinusoidal encoding added", '''def apply_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    angles = positions.double()[:, None] * base ** (-torch.arange(0, d, 2).double() / d)
    encoding = torch.stack((angles.sin(), angles.cos()), -1).flatten(-2).to(x.dtype)
    return x + encoding
'''),
]
