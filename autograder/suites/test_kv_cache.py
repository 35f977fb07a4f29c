"""Hidden tests for CachedSelfAttention(d_model, num_heads, bias=True) with its key/value cache."""

import torch

from autograder.harness import checks
from autograder.suites import adapters as A

T = A.SK + 2
OFFSET_HINT = ("New token i sits at absolute position P + i (P = tokens already cached) and may see "
               "keys 0 .. P + i: the mask for a chunk is tril(diagonal=P) over [T_new, P + T_new].")
APPEND_HINT = ("Concatenate the new keys and values to the cached ones along the sequence axis (dim=2 of "
               "[B, H, S, d_k]), store the result, and attend over all of it.")


def x_of(seed=500, dtype=torch.float64):
    return A.randn(A.B, T, A.D_MODEL, seed=seed, dtype=dtype)


def pieces(student, x, params, first=1, chunk=1):
    outputs = A.cached_attention(student, A.token_by_token(x, first, chunk), params=params, dtype=x.dtype)
    outputs = [output for output in outputs if isinstance(output, torch.Tensor)]
    for output in outputs:
        checks.require(output.dim() == 3 and output.shape[-1] == x.shape[-1],
                       f"forward(x_new, use_cache=True) returned shape {list(output.shape)}.",
                       "Return the output for the new tokens only: [B, T_new, D].")
    return torch.cat(outputs, dim=1)


def test_full_forward_matches_causal_attention(student):
    params, x = A.mha_parameters(seed=510), x_of(511)
    [output] = A.cached_attention(student, [("forward", (x,), {})], params=params)
    checks.close(output, A.causal_mha(params, A.H, x)[0], "forward(x) without the cache",
                 "Without the cache this is ordinary causal multi-head self-attention.")


def test_token_by_token_matches_full_attention(student):
    params, x = A.mha_parameters(seed=520), x_of(521)
    checks.close(pieces(student, x, params), A.causal_mha(params, A.H, x)[0],
                 "The outputs of one token at a time, concatenated",
                 APPEND_HINT + " A single new token may see every cached position and itself.")


def test_prompt_then_tokens(student):
    params, x = A.mha_parameters(seed=530), x_of(531)
    checks.close(pieces(student, x, params, first=4), A.causal_mha(params, A.H, x)[0],
                 "A 4-token prompt followed by single tokens",
                 "The prompt needs a causal mask among its own tokens. " + OFFSET_HINT)


def test_chunks_of_several_tokens(student):
    params, x = A.mha_parameters(seed=540), x_of(541)
    checks.close(pieces(student, x, params, first=2, chunk=3), A.causal_mha(params, A.H, x)[0],
                 "A 2-token prompt followed by chunks of 3 tokens", OFFSET_HINT)


def test_reset_starts_a_new_sequence(student):
    params, first, second = A.mha_parameters(seed=550), x_of(551), x_of(552)
    calls = A.token_by_token(first) + A.token_by_token(second)
    outputs = A.cached_attention(student, calls, params=params)
    tail = [output for output in outputs[len(A.token_by_token(first)):] if isinstance(output, torch.Tensor)]
    checks.close(torch.cat(tail, dim=1), A.causal_mha(params, A.H, second)[0],
                 "A second sequence after reset_cache()", "reset_cache() must forget every cached key and value.")


def test_keeps_float32(student):
    params = A.mha_parameters(seed=560, dtype=torch.float32)
    x = x_of(561, dtype=torch.float32)
    result = pieces(student, x, params, first=3)
    checks.dtype(result, torch.float32, "The cached output", "Avoid hard-coded dtypes.")
    checks.close(result, A.causal_mha(params, A.H, x)[0], "The float32 cached output", OFFSET_HINT)
