"""Hidden tests for MultiHeadLatentAttention(d_model, num_heads, d_head, d_latent, d_rope) with
forward(x, use_cache=False) and reset_cache(): DeepSeek-V2's multi-head latent attention.

The full forward is compared with the grader's reference once; every cached path is compared
with the student's own full forward, so a slip in the attention is charged once.  The forward
may use the student's own apply_rope: it is compared with the reference built on that apply_rope
as well, so a RoPE slip is charged to apply_rope alone."""

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers.common import B, crash_hint, named, randn, run_module
from autograder.suites.helpers.decoding import cache_calls, joined_new_outputs, piece_bounds
from autograder.suites.helpers.latent import (MLA_SIZES, mla, mla_attend, mla_cache_entries, mla_parameters,
                                              mla_shapes, reference_or_own_rope, rope, follows_own_rope)

# The earlier exercises' functions its answers may call (checks.built_on).
BUILT_ON = {"rope": ("apply_rope",)}

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "scale_head": "scores scaled by 1/sqrt(d_head) instead of 1/sqrt(d_head + d_rope) (each head's query "
                  "and key are d_head + d_rope wide)",
    "unrotated_key": "the shared RoPE key used without apply_rope (only the queries are turned)",
    "rope_values": "apply_rope on the values as well (RoPE turns queries and keys only; values carry content)",
    "no_mask": "no causal mask (each token sees the tokens after it)",
    "positions_from_zero": "new tokens turned at positions 0, 1, ... on every call instead of at the number of "
                           "tokens already cached onwards",
    "no_offset": "a mask without the offset P (tril() over [S, P + S] hides cached keys from the new tokens; "
                 "tril(diagonal=P) is right)",
    "never_appended": "a cache that is never appended to (each new piece sees only its own tokens)",
    "cached_keys": "the cache holding the up-projected keys and values (2 * num_heads * d_head numbers per token) "
                   "instead of the latent",
    "layout": "W_q gives [B, S, H * d_head] (view as [B, S, H, d_head], heads to dim 1); W_qr gives H RoPE queries "
              "of d_rope; W_kr one RoPE key of d_rope shared by the heads; the latent is [B, S, d_latent].",
    "reset": "reset_cache() must forget everything the cache keeps.",
    "cached_unturned": "the RoPE key cached before apply_rope (and turned when read): the cache holds each token's "
                       "turned key, as the statement says and as absorbed_attention reads it; turn it once, at the "
                       "token's position, before appending it",
}
SIZES = MLA_SIZES
D_MODEL, H, D_HEAD, D_LATENT, D_ROPE = SIZES
T = 9


def run(student, params, calls, dtype=torch.float64, held=False):
    """One MultiHeadLatentAttention with params, the calls run on it; returns (outputs, reply)."""
    with crash_hint(CAUSES["layout"]):
        reply = run_module(student, "MultiHeadLatentAttention", SIZES, {}, params=params, dtype=dtype, calls=calls,
                             held=held)
    return [checks.tensor(output, "MultiHeadLatentAttention(x)") if call[0] == "forward" else output
            for call, output in zip(calls, reply["outputs"])], reply


def own_full(student, params, x):
    return run(student, params, [("forward", (x,), {})], x.dtype)[0][0]


def pieces(student, params, x, first=1, chunk=1):
    outputs, reply = run(student, params, cache_calls(x, first, chunk), x.dtype)
    return joined_new_outputs(outputs, D_MODEL, "d_model"), reply


def mistaken_pieces(params, x, first, chunk, mistake):
    """What a mistaken cache gives, fed the same way."""
    latent, k_rope, outputs = x[:, :0, :D_LATENT], x[:, :0, :D_ROPE], []
    for start, end in piece_bounds(x.shape[1], first, chunk):
        positions = torch.arange(end - start) if mistake == "positions_from_zero" else torch.arange(start, end)
        new_latent, new_rope = mla_cache_entries(params, x[:, start:end], positions)
        if mistake == "never_appended":
            latent, k_rope = new_latent, new_rope
        else:
            latent, k_rope = torch.cat([latent, new_latent], 1), torch.cat([k_rope, new_rope], 1)
        outputs.append(mla_attend(params, x[:, start:end], latent, k_rope, positions,
                                    mask_offset=mistake != "no_offset"))
    return torch.cat(outputs, dim=1)


def named_cached(params, x, first, chunk):
    return named(CAUSES, **{key: mistaken_pieces(params, x, first, chunk, key)
                              for key in ("positions_from_zero", "never_appended", "no_offset")})


def x_of(seed, t=T, dtype=torch.float64):
    return randn(B, t, D_MODEL, seed=seed, dtype=dtype)


def test_computes_attention(student):
    """The gate, on the full forward."""
    x = x_of(401)
    substance.attention_module(lambda params: own_full(student, params, x), mla_parameters(seed=402),
                               keys="W_uk")


def test_projection_shapes(student):
    parameters = student.module("MultiHeadLatentAttention", SIZES)["parameters"]
    for name, shape in mla_shapes().items():
        checks.require(f"{name}.weight" in parameters, f"The module has no {name}.",
                       "Name the projections W_q, W_qr, W_dkv, W_uk, W_uv, W_kr, W_o.")
        checks.shape(parameters[f"{name}.weight"], shape, f"{name}.weight", CAUSES["layout"])
    checks.require(not any(name.endswith(".bias") for name in parameters),
                   "MultiHeadLatentAttention has bias parameters.", "Use nn.Linear(..., bias=False).")


def test_matches_the_reference(student):
    params, x = mla_parameters(seed=410), x_of(411)
    output = own_full(student, params, x)
    want = reference_or_own_rope(student, BUILT_ON, output, lambda rope_of: mla(params, x, rope_of))
    checks.close(output, want, "forward(x) without the cache",
                 "q_h = [W_q x]_h with [W_qr x]_h turned; k_h = [W_uk c]_h with the shared W_kr x turned; "
                 "v_h = [W_uv c]_h; causal softmax of q_h . k_h / sqrt(d_head + d_rope); W_o of the merged heads.",
                 named(CAUSES, scale_head=mla(params, x, scale=D_HEAD ** -0.5),
                         unrotated_key=mla(params, x, unrotated_key=True),
                         rope_values=mla(params, x, rope_values=True), no_mask=mla(params, x, mask=False)))


def test_token_by_token_equals_the_full_forward(student):
    params, x = mla_parameters(seed=420), x_of(421)
    checks.same(pieces(student, params, x)[0], own_full(student, params, x),
                "One token at a time with use_cache=True, concatenated, against your own forward(x)",
                mistakes=named_cached(params, x, 1, 1))


def test_prompt_then_chunks(student):
    params, x = mla_parameters(seed=430), x_of(431, t=20)
    checks.same(pieces(student, params, x, first=5, chunk=3)[0], own_full(student, params, x),
                "A 5-token prompt, then chunks of 3 tokens with use_cache=True, against your own forward(x)",
                mistakes=named_cached(params, x, 5, 3))


def test_cache_holds_the_latent_and_the_rope_key_only(student):
    """What the cache serves, by behaviour: after a 6-token prompt the up-projections W_uk and W_uv
    change.  A cache of latents gives the next tokens what the changed weights give when they were
    there from the start; a cache of up-projected keys and values (wherever it is kept: an attribute,
    a global, a closure) still answers with the old ones.  What it keeps, counted: the tensors the
    module holds outside its parameters may grow by no more than d_latent + d_rope per token.  What it
    keeps, read: the RoPE key in the cache is the turned one."""
    params, x = mla_parameters(seed=440), x_of(441, t=9)
    changed = {name: randn(*value.shape, seed=442 + i) * value.std() if name in ("W_uk.weight", "W_uv.weight")
               else value for i, (name, value) in enumerate(params.items())}
    pieces_of = cache_calls(x, first=6, chunk=3)
    switch = ("set_parameters", {name: changed[name] for name in ("W_uk.weight", "W_uv.weight")})
    switched, reply = run(student, params, pieces_of[:2] + [switch] + pieces_of[2:])
    throughout, _ = run(student, changed, pieces_of)
    prompt_only = run(student, changed, pieces_of[:2], held=True)[1]
    new = [output for output in switched[3:] if isinstance(output, torch.Tensor)]
    want = [output for output in throughout[2:] if isinstance(output, torch.Tensor)]
    checks.require(len(new) == len(want) == 1, "forward(x_new, use_cache=True) returned no tensor.")
    checks.same(new[0], want[0], "3 new tokens after a 6-token prompt, W_uk and W_uv changed between the two, "
                "against the same run with the new weights from the start",
                f"Likely cause: {CAUSES['cached_keys']}: they hold what the old W_uk and W_uv made.")
    if not checks.is_close(want[0], mla(changed, x, unrotated_key=True)[:, 6:]):  # a key never turned is charged once
        check_rope_key_turned(student, changed, x[:, :6], prompt_only["held"])
    per_token = (reply["held_elements"] - prompt_only["held_elements"]) / (B * 3)
    most = D_LATENT + D_ROPE
    if per_token > most:
        found = {most + 2 * H * D_HEAD: CAUSES["cached_keys"], 2 * H * D_HEAD + D_ROPE: CAUSES["cached_keys"],
                 2 * H * D_HEAD + H * D_ROPE: CAUSES["cached_keys"]}.get(per_token)
        raise checks.Feedback(
            f"The tensors the module keeps outside its parameters grow by {per_token:g} numbers per token, where the "
            f"latent and the RoPE key are d_latent + d_rope = {most}.",
            f"It matches {found}." if found else
            "Keep the latent c (d_latent) and the turned RoPE key (d_rope) of each token, nothing else per token.")


def columns(held, batch, tokens, width):
    """Every [batch, tokens, width] window of the held tensors read as [batch, tokens, -1] (so a cache
    kept as [B, T, w], [B, 1, T, w] or the latent and the key side by side all show)."""
    for tensor in held:
        if tensor.is_floating_point() and tensor.numel() % (batch * tokens) == 0:
            flat = tensor.reshape(batch, tokens, -1)
            for start in range(flat.shape[-1] - width + 1):
                yield flat[..., start:start + width]


def check_rope_key_turned(student, params, prompt, held):
    """The content of the cache, not only its size: after the prompt, a cache that keeps the RoPE key
    unturned (turning it when read gives the same outputs, but not what absorbed_attention is handed)
    holds W_kr x where the turned key should be."""
    positions = torch.arange(prompt.shape[1])
    unturned = mla_cache_entries(params, prompt, positions, unrotated_key=True)[1]
    windows = list(columns(held, *unturned.shape))

    def holds_turned(rope_of):
        turned = mla_cache_entries(params, prompt, positions, rope_of)[1]
        return any(checks.is_close(window, turned) for window in windows)

    if holds_turned(rope):
        return
    if follows_own_rope(student, BUILT_ON, True, holds_turned, same=lambda _, held_theirs: held_theirs is True):
        return   # a RoPE slip is charged to apply_rope alone
    checks.require(not any(checks.is_close(window, unturned) for window in windows),
                   f"After a {prompt.shape[1]}-token prompt the cache holds the RoPE key W_kr x of each token unturned.",
                   f"Likely cause: {CAUSES['cached_unturned']}.")


def test_reset_starts_a_new_sequence(student):
    params, first, second = mla_parameters(seed=450), x_of(451), x_of(452)
    before = cache_calls(first, 2, 3)
    outputs, _ = run(student, params, before + cache_calls(second, 3, 2))
    checks.same(joined_new_outputs(outputs[len(before):], D_MODEL, "d_model"),
                pieces(student, params, second, first=3, chunk=2)[0],
                "A second sequence after reset_cache(), against the same sequence on a fresh module", CAUSES["reset"])


def test_keeps_float32(student):
    params = mla_parameters(dtype=torch.float32, seed=460)
    output, _ = pieces(student, params, x_of(461, dtype=torch.float32), first=3)
    checks.dtype(output, torch.float32, "The cached output", "Avoid hard-coded dtypes.")
