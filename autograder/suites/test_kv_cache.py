"""Hidden tests for CachedSelfAttention(d_model, num_heads, bias=True) with its key/value cache.

The full forward is compared with torch once; every cached path is compared with the student's
own full forward, so a mistake in the attention itself is charged once, not once per cache test."""

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers.common import (B, D_MODEL, H, SK, causal_mha, crash_hint, mha_parameters,
                                              multi_head, named, randn, run_module)
from autograder.suites.helpers.decoding import cache_calls, joined_new_outputs, piece_bounds


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "never_appended": "a cache that is never appended to (each new piece sees only its own tokens)",
    "no_offset": "a chunk mask without the offset P (tril() over [T_new, P + T_new] hides cached keys from the "
                 "new tokens; tril(diagonal=P) is right)",
    "no_mask": "no causal mask among the new tokens when the cache is used",
    "layout": "The cache holds keys and values as [B, H, S, d_k]: concatenate along the sequence axis (dim=2), "
              "and build the mask over [T_new, P + T_new].",
    "reset": "reset_cache() must forget everything the cache keeps: keys, values, and any position counter.",
}


def cached_attention(student, calls, *, params, num_heads=H, dtype=torch.float64):
    """Run steps on one CachedSelfAttention; calls are (method, args, kwargs). Returns outputs."""
    d_model = params["W_q.weight"].shape[0]
    with crash_hint(CAUSES["layout"]):
        reply = run_module(student, "CachedSelfAttention", (d_model, num_heads), {}, params=params,
                           dtype=dtype, calls=calls)
    return [checks.tensor(output, "CachedSelfAttention(x)") if method == "forward" else output
            for (method, _, _), output in zip(calls, reply["outputs"])]


def named_mistakes(params, num_heads, x, first, chunk):
    """cause text -> the concatenated outputs of a mistaken cache, fed `first` tokens, then
    `chunk` at a time (as kit.cache_calls does)."""
    bounds = piece_bounds(x.shape[1], first, chunk)

    def run(window, mask_of):
        outputs = []
        for start, end in bounds:
            seen = window(start, end)
            keys = x[:, seen]
            mask = mask_of(end - start, len(seen), start - seen.start)
            outputs.append(multi_head(params, num_heads, x[:, start:end], keys, keys, mask)[0])
        return torch.cat(outputs, dim=1)

    def tril(rows, columns, diagonal):
        return torch.ones(rows, columns, dtype=torch.bool).tril(diagonal=diagonal)

    return named(CAUSES, never_appended=run(lambda start, end: range(start, end), tril),
                   no_offset=run(lambda start, end: range(0, end), lambda rows, columns, past: tril(rows, columns, 0)),
                   no_mask=run(lambda start, end: range(0, end), lambda rows, columns, past: None))


T = SK + 2

def x_of(seed=500, dtype=torch.float64, t=T):
    return randn(B, t, D_MODEL, seed=seed, dtype=dtype)


def own_full(student, x, params):
    """The student's own forward(x) without the cache."""
    return cached_attention(student, [("forward", (x,), {})], params=params, dtype=x.dtype)[0]


def pieces(student, x, params, first=1, chunk=1):
    outputs = cached_attention(student, cache_calls(x, first, chunk), params=params, dtype=x.dtype)
    return joined_new_outputs(outputs, x.shape[-1])


def test_computes_attention(student):
    """The gate, on the full forward without the cache."""
    x = x_of(501)
    substance.attention_module(lambda params: own_full(student, x, params), mha_parameters(seed=502))


def test_full_forward_matches_causal_attention(student):
    params, x = mha_parameters(seed=510), x_of(511)
    [output] = cached_attention(student, [("forward", (x,), {})], params=params)
    checks.close(output, causal_mha(params, H, x)[0], "forward(x) without the cache",
                 "Without the cache this is ordinary causal multi-head self-attention.")


def test_token_by_token_matches_full_attention(student):
    params, x = mha_parameters(seed=520), x_of(521)
    checks.same(pieces(student, x, params), own_full(student, x, params),
                "The outputs of one token at a time, concatenated, against your own forward(x)",
                mistakes=named_mistakes(params, H, x, 1, 1))


def test_prompt_then_tokens(student):
    params, x = mha_parameters(seed=530), x_of(531)
    checks.same(pieces(student, x, params, first=4), own_full(student, x, params),
                "A 4-token prompt followed by single tokens, against your own forward(x)",
                mistakes=named_mistakes(params, H, x, 4, 1))


def test_chunks_of_several_tokens(student):
    params, x = mha_parameters(seed=540), x_of(541, t=40)  # longer than anything in the notebook
    checks.same(pieces(student, x, params, first=2, chunk=3), own_full(student, x, params),
                "A 2-token prompt followed by chunks of 3 tokens (40 tokens), against your own forward(x)",
                mistakes=named_mistakes(params, H, x, 2, 3))


def test_reset_starts_a_new_sequence(student):
    """After reset_cache() a sequence gives what it gives on a fresh module, fed the same way: so
    everything the cache keeps (keys, values, any position counter) must start again."""
    params, first, second = mha_parameters(seed=550), x_of(551), x_of(552)
    before = cache_calls(first, first=2, chunk=3)
    outputs = cached_attention(student, before + cache_calls(second, first=3, chunk=2), params=params)
    checks.same(joined_new_outputs(outputs[len(before):], second.shape[-1]), pieces(student, second, params, first=3, chunk=2),
                "A second sequence after reset_cache(), against the same sequence on a fresh module",
                CAUSES["reset"])


def test_keeps_float32(student):
    params = mha_parameters(seed=560, dtype=torch.float32)
    x = x_of(561, dtype=torch.float32)
    result = pieces(student, x, params, first=3)
    checks.dtype(result, torch.float32, "The cached output", "Avoid hard-coded dtypes.")
