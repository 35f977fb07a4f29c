"""Latent attention (the latent_attention assignment): RoPE and DeepSeek-V2's multi-head latent
attention on the grader's side, and the student's own apply_rope where a suite builds on it."""

import math

import torch
import torch.nn.functional as F

from autograder.harness import checks
from autograder.suites.helpers.common import linear_parameters


def rope(x, positions, base=10000.0, *, half_split=False, clockwise=False, frequency_per_dim=False, cos_only=False):
    """Rotary position embedding in interleaved pairs (x[2i], x[2i + 1]) turned by positions * base^(-2i/d);
    each keyword is one named mistake's switch."""
    d = x.shape[-1]
    exponents = torch.arange(d // 2, dtype=torch.float64) * (1 if frequency_per_dim else 2) / d
    angles = positions.to(torch.float64)[:, None] * base ** -exponents * (-1 if clockwise else 1)   # [S, d/2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if cos_only:
        return x * cos.repeat_interleave(2, dim=-1)
    if half_split:
        first, second = x[..., : d // 2], x[..., d // 2:]
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


# Distinct sizes of the MLA tests: d_model, heads, per-head width, latent width, RoPE width.
MLA_D_MODEL, MLA_H, MLA_D_HEAD, MLA_D_LATENT, MLA_D_ROPE = 16, 3, 6, 10, 4
MLA_SIZES = (MLA_D_MODEL, MLA_H, MLA_D_HEAD, MLA_D_LATENT, MLA_D_ROPE)


def mla_shapes(d_model=MLA_D_MODEL, num_heads=MLA_H, d_head=MLA_D_HEAD, d_latent=MLA_D_LATENT, d_rope=MLA_D_ROPE):
    """{projection: (out, in)} of MultiHeadLatentAttention, as the statement names them."""
    return {"W_q": (num_heads * d_head, d_model), "W_qr": (num_heads * d_rope, d_model),
            "W_dkv": (d_latent, d_model), "W_uk": (num_heads * d_head, d_latent),
            "W_uv": (num_heads * d_head, d_latent), "W_kr": (d_rope, d_model), "W_o": (d_model, num_heads * d_head)}


def mla_parameters(dtype=torch.float64, seed=30):
    return linear_parameters(mla_shapes(), bias=False, dtype=dtype, seed=seed)


def mla_stand_in():
    """What the statement of MultiHeadLatentAttention promises absorbed_attention: its sizes and projections."""
    return {"attributes": {"num_heads": MLA_H, "d_head": MLA_D_HEAD, "d_latent": MLA_D_LATENT, "d_rope": MLA_D_ROPE},
            "linears": {name: [d_in, d_out, False] for name, (d_out, d_in) in mla_shapes().items()}}


def mla_cache_entries(params, x, positions, rope_of=rope, *, unrotated_key=False):
    """(latent [B, S, d_latent], rotated RoPE key [B, S, d_rope]) that x's tokens at `positions` add to the cache."""
    k_rope = F.linear(x, params["W_kr.weight"])
    return F.linear(x, params["W_dkv.weight"]), (k_rope if unrotated_key else rope_of(k_rope, positions))


def mla_queries(params, x, positions, rope_of=rope):
    """(content queries [B, H, S, d_head], rotated RoPE queries [B, H, S, d_rope])."""
    b, s, _ = x.shape
    q = F.linear(x, params["W_q.weight"]).view(b, s, MLA_H, MLA_D_HEAD).transpose(1, 2)
    q_rope = F.linear(x, params["W_qr.weight"]).view(b, s, MLA_H, MLA_D_ROPE).transpose(1, 2)
    return q, rope_of(q_rope, positions)


def mla_attend(params, x_new, latent, k_rope, positions, rope_of=rope, *, scale=None, mask=True,
               mask_offset=True, rope_values=False, absorbed_weights=None):
    """The output [B, S, d_model] of x_new's queries over a cache of T >= S tokens (the last S are
    x_new's), the naive way: the latent up-projected to per-head keys and values.  absorbed_weights:
    (W_uk, W_uv) per head, [H, d_head, d_latent], to fold into the query and output side instead."""
    b, s, _ = x_new.shape
    t = latent.shape[1]
    q, q_rope = mla_queries(params, x_new, positions, rope_of)
    scale = 1 / math.sqrt(MLA_D_HEAD + MLA_D_ROPE) if scale is None else scale
    rope_scores = q_rope @ k_rope.unsqueeze(1).transpose(-2, -1)                       # [B, H, S, T]
    if absorbed_weights is None:
        k = F.linear(latent, params["W_uk.weight"]).view(b, t, MLA_H, MLA_D_HEAD).transpose(1, 2)
        v = F.linear(latent, params["W_uv.weight"]).view(b, t, MLA_H, MLA_D_HEAD).transpose(1, 2)
        if rope_values:
            v = rope_of(v, torch.arange(t))
        scores = q @ k.transpose(-2, -1) + rope_scores
    else:
        w_uk, w_uv = absorbed_weights
        scores = (q @ w_uk) @ latent.unsqueeze(1).transpose(-2, -1) + rope_scores
    if mask:
        allowed = torch.ones(s, t, dtype=torch.bool).tril(diagonal=t - s if mask_offset else 0)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores * scale, dim=-1)
    context = weights @ v if absorbed_weights is None else (weights @ latent.unsqueeze(1)) @ w_uv.transpose(-2, -1)
    return F.linear(context.transpose(1, 2).reshape(b, s, MLA_H * MLA_D_HEAD), params["W_o.weight"])


def mla(params, x, rope_of=rope, *, unrotated_key=False, **switches):
    """MultiHeadLatentAttention(x) without a cache: causal self-attention over x [B, S, d_model]."""
    positions = torch.arange(x.shape[1])
    latent, k_rope = mla_cache_entries(params, x, positions, rope_of, unrotated_key=unrotated_key)
    return mla_attend(params, x, latent, k_rope, positions, rope_of, **switches)


def formed(own):
    """A RoPE function whose every result's form (x's shape and dtype) is checked before the grader reads it."""
    def turn(x, positions):
        turned = own(x, positions)
        checks.shape(turned, x.shape, "apply_rope(x, positions)")
        checks.dtype(turned, x.dtype, "apply_rope(x, positions)")
        return turned
    return turn


# What the student's apply_rope is compared with where an answer built on it earns follow-through credit.
ROPE_RULES = {"apply_rope": rope}


def follows_own_rope(student, built_on, answer, on_rope, same=None):
    """checks.follows_theirs with the student's apply_rope (from a suite's BUILT_ON), its every result's form
    checked: whether `answer` is what on_rope(their RoPE) gives, where their RoPE strays from the grader's."""
    return checks.follows_theirs(student, built_on, answer, lambda functions: on_rope(formed(functions["apply_rope"])),
                                 same, ROPE_RULES)


def reference_or_own_rope(student, built_on, output, reference_of):
    """What an exercise built on apply_rope (its suite's BUILT_ON) should give: reference_of(rope) (the grader's
    RoPE), unless `output` equals reference_of(the student's own apply_rope, its form checked) where that RoPE
    is wrong on these inputs; then the output is right, and a RoPE slip is charged to apply_rope alone
    (checks.built_on)."""
    return checks.built_on(student, built_on, output, reference_of(rope),
                           lambda functions: reference_of(formed(functions["apply_rope"])), ROPE_RULES)


def up_projections_read_as_in_out(params):
    """W_uk and W_uv per head, [H, d_head, d_latent], as a named mistake reads them: nn.Linear's weight
    [out, in] taken as if it were [in, out] (the right reading is weight.view(H, d_head, d_latent))."""
    return tuple(params[f"{name}.weight"].reshape(MLA_D_LATENT, MLA_H, MLA_D_HEAD).permute(1, 2, 0)
                 for name in ("W_uk", "W_uv"))
