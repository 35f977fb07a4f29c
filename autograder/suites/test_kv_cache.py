"""Hidden tests for CachedSelfAttention(d_model, num_heads, bias=True) with its key/value cache.

The full forward is compared with torch once; every cached path is compared with the student's
own full forward, so a mistake in the attention itself is charged once, not once per cache test."""

import torch

from autograder.harness import checks, substance
from autograder.suites import adapters as A
from autograder.suites.mistakes import kv_cache_mistakes

T = A.SK + 2

def x_of(seed=500, dtype=torch.float64, t=T):
    return A.randn(A.B, t, A.D_MODEL, seed=seed, dtype=dtype)


def own_full(student, x, params):
    """The student's own forward(x) without the cache."""
    return A.cached_attention(student, [("forward", (x,), {})], params=params, dtype=x.dtype)[0]


def pieces(student, x, params, first=1, chunk=1):
    outputs = A.cached_attention(student, A.token_by_token(x, first, chunk), params=params, dtype=x.dtype)
    outputs = [output for output in outputs if isinstance(output, torch.Tensor)]
    for output in outputs:
        checks.require(output.dim() == 3 and output.shape[-1] == x.shape[-1],
                       f"forward(x_new, use_cache=True) returned shape {list(output.shape)}.",
                       "Return the output for the new tokens only: [B, T_new, D].")
    return torch.cat(outputs, dim=1)


def test_computes_attention(student):
    """The gate, on the full forward without the cache."""
    x = x_of(501)
    substance.attention_module(lambda params: own_full(student, x, params), A.mha_parameters(seed=502))


def test_full_forward_matches_causal_attention(student):
    params, x = A.mha_parameters(seed=510), x_of(511)
    [output] = A.cached_attention(student, [("forward", (x,), {})], params=params)
    checks.close(output, A.causal_mha(params, A.H, x)[0], "forward(x) without the cache",
                 "Without the cache this is ordinary causal multi-head self-attention.")


def test_token_by_token_matches_full_attention(student):
    params, x = A.mha_parameters(seed=520), x_of(521)
    checks.same(pieces(student, x, params), own_full(student, x, params),
                "The outputs of one token at a time, concatenated, against your own forward(x)",
                mistakes=kv_cache_mistakes(params, A.H, x, 1, 1))


def test_prompt_then_tokens(student):
    params, x = A.mha_parameters(seed=530), x_of(531)
    checks.same(pieces(student, x, params, first=4), own_full(student, x, params),
                "A 4-token prompt followed by single tokens, against your own forward(x)",
                mistakes=kv_cache_mistakes(params, A.H, x, 4, 1))


def test_chunks_of_several_tokens(student):
    params, x = A.mha_parameters(seed=540), x_of(541, t=40)  # longer than anything in the notebook
    checks.same(pieces(student, x, params, first=2, chunk=3), own_full(student, x, params),
                "A 2-token prompt followed by chunks of 3 tokens (40 tokens), against your own forward(x)",
                mistakes=kv_cache_mistakes(params, A.H, x, 2, 3))


def test_reset_starts_a_new_sequence(student):
    """After reset_cache() a sequence gives what it gives on a fresh module, fed the same way: so
    everything the cache keeps (keys, values, any position counter) must start again."""
    params, first, second = A.mha_parameters(seed=550), x_of(551), x_of(552)
    before = A.token_by_token(first, first=2, chunk=3)
    outputs = A.cached_attention(student, before + A.token_by_token(second, first=3, chunk=2), params=params)
    tail = [output for output in outputs[len(before):] if isinstance(output, torch.Tensor)]
    checks.same(torch.cat(tail, dim=1), pieces(student, second, params, first=3, chunk=2),
                "A second sequence after reset_cache(), against the same sequence on a fresh module",
                "reset_cache() must forget everything the cache keeps: keys, values, and any position counter.")


def test_keeps_float32(student):
    params = A.mha_parameters(seed=560, dtype=torch.float32)
    x = x_of(561, dtype=torch.float32)
    result = pieces(student, x, params, first=3)
    checks.dtype(result, torch.float32, "The cached output", "Avoid hard-coded dtypes.")
