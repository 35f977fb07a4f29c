"""Hidden tests for absorbed_attention(mla, x_new, cache_latent, cache_rope): multi-head latent
attention for the last tokens of a cache, with W_uk folded into the queries and W_uv into the
output side, so the cached latent is never up-projected.

`mla` is a plain module with the attributes and projections MultiHeadLatentAttention's statement
promises (a stand-in built from torch), so a slip in the student's own class costs nothing here;
the cache is the grader's.  The queries may be turned by the student's own apply_rope (see
test_mla.py: a RoPE slip is charged to apply_rope alone)."""

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers.common import B, crash_hint, named, randn, run_module
from autograder.suites.helpers.latent import (MLA_D_LATENT, MLA_D_MODEL, MLA_D_ROPE, MLA_H, mla_attend,
                                              mla_cache_entries, mla_parameters, mla_stand_in,
                                              reference_or_own_rope, rope, up_projections_read_as_in_out)
from autograder.suites.helpers.tiled import check_work

# The earlier exercises' functions and classes its answers may use (checks.built_on): apply_rope's results are
# accepted where they follow the student's own; the module handed in is the grader's stand-in (mla_stand_in).
BUILT_ON = {"rope": ("apply_rope",), "mla": ("MultiHeadLatentAttention",)}

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "in_out": "nn.Linear's weight read as [in, out]: W_uk.weight is [H * d_head, d_latent], so head h's "
              "up-projection is weight.view(H, d_head, d_latent)[h] and q_h . (W_uk[h] c) = (q_h W_uk[h]) . c",
    "positions_from_zero": "the new queries turned at positions 0, 1, ... instead of at their places at the end of "
                           "the cache (T - S, ..., T - 1)",
    "no_offset": "a mask without the offset T - S (tril() over [S, T] hides the cached keys from the new tokens; "
                 "tril(diagonal=T - S) is right)",
    "up_projects": "the cached latent up-projected to per-head keys or values (W_uk(c), W_uv(c)): that is the "
                   "naive path, whose cost grows with num_heads * d_head per cached token",
    "layout": "cache_latent is [B, T, d_latent] and cache_rope [B, T, d_rope] (shared by the heads); the queries "
              "are [B, H, S, d_head] and [B, H, S, d_rope]; fold W_uk into each head's query: [B, H, S, d_latent].",
}


def cache_of(params, x):
    """The grader's cache for the tokens x: (latent, turned RoPE key)."""
    return mla_cache_entries(params, x, torch.arange(x.shape[1]))


def absorbed(student, params, x, new, count=False):
    """absorbed_attention on the stand-in module for the last `new` tokens of x, all of x cached."""
    latent, k_rope = cache_of(params, x)
    with crash_hint(CAUSES["layout"]):
        reply = run_module(student, "MultiHeadLatentAttention", (), {}, params=params, dtype=x.dtype,
                             stand_in=mla_stand_in(), count=count,
                             functions=[("absorbed_attention", (x[:, -new:], latent, k_rope), {})])
    output = checks.tensor(reply["outputs"][0], "absorbed_attention(mla, x_new, cache_latent, cache_rope)")
    checks.shape(output, (x.shape[0], new, MLA_D_MODEL), "absorbed_attention(...)",
                 "Return the output of the new tokens only: [B, S, d_model].")
    return output, reply


def naive(params, x, new, rope_of=rope, *, positions_from_zero=False, in_out=False):
    """The naive path for the last `new` tokens of x, or what a named mistake gives."""
    latent, k_rope = cache_of(params, x)
    t = x.shape[1]
    positions = torch.arange(new) if positions_from_zero else torch.arange(t - new, t)
    switches = {"absorbed_weights": up_projections_read_as_in_out(params)} if in_out else {}
    return mla_attend(params, x[:, -new:], latent, k_rope, positions, rope_of, **switches)


def no_offset(params, x, new):
    """What tril() over [S, T] without the offset gives: new token i sees cached keys 0 .. i."""
    latent, k_rope = cache_of(params, x)
    t = x.shape[1]
    rows = [mla_attend(params, x[:, t - new + i: t - new + i + 1], latent[:, :i + 1], k_rope[:, :i + 1],
                         torch.tensor([t - new + i])) for i in range(new)]
    return torch.cat(rows, dim=1)


def compare(student, x, new, what, seed):
    params = mla_parameters(seed=seed)
    output, _ = absorbed(student, params, x, new)
    want = reference_or_own_rope(student, BUILT_ON, output, lambda rope_of: naive(params, x, new, rope_of))
    checks.close(output, want, what, "Scores: (q_h W_uk[h]) . c + q_rope_h . k_rope, over sqrt(d_head + d_rope); "
                 "output: W_o of the heads (weights @ c) W_uv[h]^T.",
                 named(CAUSES, in_out=naive(params, x, new, in_out=True),
                         positions_from_zero=naive(params, x, new, positions_from_zero=True)))


def x_of(seed, t=11, dtype=torch.float64):
    return randn(B, t, MLA_D_MODEL, seed=seed, dtype=dtype)


def test_computes_attention(student):
    """The gate: the output follows the queries and the keys (the latent's up-projection W_uk)."""
    x = x_of(471)
    substance.attention_module(lambda params: absorbed(student, params, x, 3)[0], mla_parameters(seed=472),
                               keys="W_uk")


def test_returns_the_new_tokens_output(student):
    absorbed(student, mla_parameters(seed=473), x_of(474), 2)


def test_whole_sequence_equals_the_naive_path(student):
    """Every token new (S = T): the folded up-projections against the naive path."""
    compare(student, x_of(475), 11, "absorbed_attention for all 11 tokens of the cache, against the naive path", 476)


def without_rope_queries(params):
    """The weights with W_qr zeroed: the queries' positions then change nothing."""
    return {**params, "W_qr.weight": params["W_qr.weight"] * 0}


def test_new_tokens_see_the_whole_cache(student):
    """4 new tokens after 8 cached, against the last 4 rows of your own output for all 12 (RoPE queries
    zeroed, so only the mask is tested here)."""
    x, params = x_of(477, t=12), without_rope_queries(mla_parameters(seed=478))
    checks.close(absorbed(student, params, x, 4)[0], absorbed(student, params, x, 12)[0][:, -4:],
                 "absorbed_attention for the last 4 of 12 tokens, against the last 4 rows for all 12",
                 "New token i (of S) sees cached keys 0 .. T - S + i.",
                 named(CAUSES, no_offset=no_offset(params, x, 4)))


def test_new_tokens_are_turned_at_their_positions(student):
    """The last token alone, against the last row of your own output for the whole sequence."""
    x, params = x_of(479), mla_parameters(seed=476)
    checks.close(absorbed(student, params, x, 1)[0], absorbed(student, params, x, 11)[0][:, -1:],
                 "absorbed_attention for the last of 11 tokens, against the last row for all 11",
                 "The new tokens sit at positions T - S .. T - 1.",
                 named(CAUSES, positions_from_zero=naive(params, x, 1, positions_from_zero=True),
                         no_offset=no_offset(params, x, 1)))


def test_never_up_projects_the_cache(student):
    """One new token after 512 cached, one counted call: its values first, then its products' FLOPs.
    The absorbed path costs about 2 * H * (d_latent + d_rope) FLOPs per cached token for the scores
    and 2 * H * d_latent for the weights times the latents; up-projecting the cache costs
    2 * d_latent * H * d_head per cached token for the keys alone."""
    x = randn(1, 512, MLA_D_MODEL, seed=483)
    params = mla_parameters(seed=480)
    output, reply = absorbed(student, params, x, 1, count=True)
    want = reference_or_own_rope(student, BUILT_ON, output, lambda rope_of: naive(params, x, 1, rope_of))
    checks.close(output, want, "absorbed_attention for the counted call (1 new token after 512 cached)",
                 "The counted call must first give the right answer: the work of a wrong answer earns nothing.",
                 named(CAUSES, in_out=naive(params, x, 1, in_out=True),
                         positions_from_zero=naive(params, x, 1, positions_from_zero=True)))
    t = x.shape[1]
    per_token = 2 * MLA_H * (MLA_D_LATENT + MLA_D_ROPE) + 2 * MLA_H * MLA_D_LATENT  # scores, then weights @ c
    check_work(reply, f"absorbed_attention for 1 new token after {t} cached", low=per_token * t // 2,
                 high=2 * per_token * t,
                 observed=f"the absorbed path needs about {per_token * t:,} (allowed: {2 * per_token * t:,}).",
                 too_much=f"Likely cause: {CAUSES['up_projects']}.")


def test_keeps_float32(student):
    params = mla_parameters(dtype=torch.float32, seed=481)
    output, _ = absorbed(student, params, x_of(482, dtype=torch.float32), 2)
    checks.dtype(output, torch.float32, "absorbed_attention on float32", "Avoid hard-coded dtypes.")
