"""Hidden tests for apply_rope(x, positions, base=10000.0): rotary position embedding in
interleaved pairs (x[2i], x[2i + 1]), pair i turned by positions * base ** (-2i / d)."""

import torch

from autograder.harness import checks
from autograder.harness.substance import differs, finite
from autograder.suites.helpers import common, latent
from autograder.suites.helpers.common import (B, H, check_inputs_unchanged, crash_hint, expect_value_error,
                                              randn)

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "half_split": "pairs taken as (x[i], x[i + d/2]) (the half-split layout) instead of the interleaved "
                  "(x[2i], x[2i + 1]) the statement asks for",
    "clockwise": "each pair turned by minus the angle (the signs of the sine terms swapped)",
    "frequency": "frequencies base ** (-i / d) instead of base ** (-2i / d) (i counts pairs)",
    "cos_only": "x * cos(angle) without the sine term: that scales each pair, it does not turn it",
    "base": "the base argument ignored (10000 used whatever base is given)",
    "own_positions": "the positions argument ignored (torch.arange(S) used instead): a token's angle "
                     "comes from its place in the whole sequence, which a cache does not start at 0",
    "odd": "an odd last dimension d has no pairs to turn: raise ValueError, as the statement says",
    "in_place": "x was turned in place (x[..., 0::2] = ..., or an in-place operation on a view of x): build a "
                "new tensor (torch.stack, torch.empty_like) and leave x as it was",
    "shape": "x is [..., S, d] and positions [S]: the angles are [S, d/2] and broadcast over the "
             "leading axes.",
}
S, D = 9, 8


def rope(student, x, positions, **kwargs):
    with crash_hint(CAUSES["shape"]):
        reply = student.call("apply_rope", x, positions, **kwargs)
    return checks.tensor(reply["output"], "apply_rope(x, positions)")


def named(x, positions):
    """cause text -> what each named mistake gives for these inputs."""
    return common.named(CAUSES, half_split=latent.rope(x, positions, half_split=True),
                   clockwise=latent.rope(x, positions, clockwise=True),
                   frequency=latent.rope(x, positions, frequency_per_dim=True),
                   cos_only=latent.rope(x, positions, cos_only=True),
                   own_positions=latent.rope(x, torch.arange(x.shape[-2])))


def compare(student, x, positions, what):
    checks.close(rope(student, x, positions), latent.rope(x, positions), what,
                 "Pair i = (x[2i], x[2i+1]) turns by positions * base ** (-2i / d).", named(x, positions))


def test_turns_with_the_position(student):
    """The gate: one vector repeated at positions 0..S-1 comes back different at each position,
    finite, and as long as it was (a rotation keeps lengths, give or take a scaling mistake)."""
    row = randn(D, seed=300)
    x = row.expand(S, D).clone()
    out = rope(student, x, torch.arange(S))
    checks.shape(out, (S, D), "apply_rope(x, positions)")
    finite(out, "The output")
    checks.require(all(differs(out[i], out[i + 1]) for i in range(S - 1)),
                   "The same vector at different positions gives the same output: the positions do not turn it, "
                   "so this is not a position embedding yet.")
    checks.require(bool((out.norm(dim=-1) > 0.1 * row.norm()).all()),
                   "The output is (almost) zero: nothing of x is left to turn.")
    checks.require(not differs(rope(student, 3 * x, torch.arange(S)), 3 * out),
                   "apply_rope(3x) is not 3 * apply_rope(x): RoPE turns x, it adds nothing to it.")


def test_returns_x_shape_and_dtype(student):
    x = randn(B, H, S, D, seed=301, dtype=torch.float32)
    out = rope(student, x, torch.arange(S))
    checks.shape(out, tuple(x.shape), "apply_rope(x, positions) for x [B, H, S, d]")
    checks.dtype(out, torch.float32, "apply_rope on float32 input", "Compute the angles, then cast cos and sin to x.dtype.")
    float64 = rope(student, x.double(), torch.arange(S))
    checks.dtype(float64, torch.float64, "apply_rope on float64 input", "Compute the angles, then cast cos and sin "
                 "to x.dtype (float64 stays float64).")
    expect_value_error(lambda: student.call("apply_rope", randn(S, 7, seed=310), torch.arange(S)),
                         "apply_rope on x with d = 7", CAUSES["odd"])


def test_leaves_x_unchanged(student):
    x = randn(B, S, D, seed=311)
    with crash_hint(CAUSES["shape"]):
        reply = student.call("apply_rope", x, torch.arange(S), echo_args=True)
    check_inputs_unchanged(reply, (x,), ("x",), "apply_rope", CAUSES["in_place"])


def test_position_zero_is_unchanged(student):
    x = randn(B, 1, D, seed=302)
    checks.close(rope(student, x, torch.zeros(1, dtype=torch.long)), x, "apply_rope at position 0",
                 "At position 0 every angle is 0: the output is x.")


def test_keeps_the_length_of_each_vector(student):
    x = randn(B, S, D, seed=303)
    positions = torch.arange(S) * 7
    checks.close(rope(student, x, positions).norm(dim=-1), x.norm(dim=-1), "The length of each vector after apply_rope",
                 "A rotation keeps lengths: x_even * cos - x_odd * sin, x_even * sin + x_odd * cos.",
                 common.named(CAUSES, cos_only=latent.rope(x, positions, cos_only=True).norm(dim=-1)))


def test_matches_the_reference(student):
    compare(student, randn(B, H, S, D, seed=304), torch.arange(S), "apply_rope for positions 0..8, d = 8")
    compare(student, randn(B, S, 64, seed=305), torch.arange(S), "apply_rope for positions 0..8, d = 64")
    x = randn(B, S, D, seed=309)
    checks.close(rope(student, x, torch.arange(S), base=500.0), latent.rope(x, torch.arange(S), base=500.0),
                 "apply_rope(x, positions, base=500.0)", "Pair i turns by positions * base ** (-2i / d), with the "
                 "base given.", common.named(CAUSES, base=latent.rope(x, torch.arange(S))))


def test_positions_are_used_as_given(student):
    """A cache feeds later tokens alone: rows given positions 12..15 come out as they do at rows 12..15
    of a longer sequence (your own apply_rope both times, so only the positions are tested here)."""
    longer = randn(B, 16, D, seed=306)
    alone = rope(student, longer[:, 12:], torch.arange(12, 16))
    checks.close(alone, rope(student, longer, torch.arange(16))[:, 12:],
                 "apply_rope for 4 rows at positions 12..15, against rows 12..15 of apply_rope on 16 rows",
                 CAUSES["own_positions"])
    order = torch.tensor([5, 0, 9, 2])
    checks.close(rope(student, longer[:, order], order), rope(student, longer, torch.arange(16))[:, order],
                 "apply_rope for rows at positions [5, 0, 9, 2], against the same rows in order",
                 CAUSES["own_positions"])
def test_scores_depend_only_on_the_offset(student):
    """The defining property: rope(q, m) . rope(k, n) depends on m - n only."""
    q, k = randn(S, D, seed=307), randn(S, D, seed=308)
    positions = torch.arange(S)
    turned = [rope(student, x, at) for at in (positions, positions + 100) for x in (q, k)]
    for value in turned:   # read only what has the input's shape (another shape is no verdict of this test)
        checks.shape(value, (S, D), "apply_rope(x, positions) for x of shape [S, D]", CAUSES["shape"])
    near, far = turned[0] @ turned[1].T, turned[2] @ turned[3].T
    checks.close(far, near, "The scores of q and k both moved 100 positions on, against the scores before",
                 "Turning both by the same extra angle leaves their dot product unchanged, if it is a rotation.",
                 common.named(CAUSES, cos_only=latent.rope(q, positions + 100, cos_only=True)
                         @ latent.rope(k, positions + 100, cos_only=True).T))
