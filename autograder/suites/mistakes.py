"""What common mistakes would return, recomputed on the grader's side.

When a student's wrong output equals one of these, the feedback names the mistake.  Each entry is
the description that completes the sentence "It matches what ... gives."
"""

import math

import torch


def _attention(q, k, v, mask=None, *, scale=None, dim=-1, invert=False, mask_after=False, add=False):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None and invert:
        mask = ~mask
    if mask is not None and add:
        scores, mask = scores + mask.to(scores.dtype), None
    if mask is not None and not mask_after:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=dim).nan_to_num(0.0)
    if mask is not None and mask_after:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights


def sdpa_mistakes(q, k, v, mask=None):
    """description -> (output, weights) of a mistaken scaled_dot_product_attention."""
    d_k, d_v = q.shape[-1], v.shape[-1]
    found = {
        "attention without the 1/sqrt(d_k) scaling": _attention(q, k, v, mask, scale=1.0),
        "dividing the scores by d_k instead of sqrt(d_k)": _attention(q, k, v, mask, scale=1 / d_k),
        "scaling by the value width d_v instead of the key width d_k":
            _attention(q, k, v, mask, scale=1 / math.sqrt(d_v)),
        "a softmax over the queries (dim=-2) instead of the keys (dim=-1)": _attention(q, k, v, mask, dim=-2),
    }
    if mask is not None:
        found["an inverted mask (True treated as blocked, the nn.MultiheadAttention convention)"] = \
            _attention(q, k, v, mask, invert=True)
        found["masking after the softmax (the remaining weights no longer sum to 1)"] = \
            _attention(q, k, v, mask, mask_after=True)
        found["ignoring the mask (is the result of masked_fill assigned back?)"] = _attention(q, k, v)
        found["adding the boolean mask to the scores (True becomes +1) instead of filling the blocked "
              "scores with -inf before the softmax"] = _attention(q, k, v, mask, add=True)
    return found


def pick(mistakes, index):
    """The index-th item (0 = output, 1 = weights) of every mistaken pair."""
    return {name: values[index] for name, values in mistakes.items()}


def causal_mask_mistakes(seq_len):
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool)
    return {
        "the upper triangle (torch.triu), the opposite of key <= query": ones.triu(),
        "a mask that excludes the diagonal (tril(diagonal=-1)): a token may not see itself":
            ones.tril(diagonal=-1),
        "the blocked-positions convention (triu(diagonal=1), True = blocked)": ones.triu(diagonal=1),
    }


def split_heads_mistakes(x, num_heads):
    b, s, d = x.shape
    return {
        "a view straight to [B, H, S, d_k] without the transpose (it mixes tokens and features)":
            x.reshape(b, num_heads, s, d // num_heads),
        "splitting the features as [d_k, H] instead of [H, d_k]":
            x.reshape(b, s, d // num_heads, num_heads).permute(0, 3, 1, 2),
    }


def merge_heads_mistakes(x):
    b, h, s, d_k = x.shape
    return {
        "a view of [B, H, S, d_k] straight to [B, S, D] without moving the head axis back":
            x.reshape(b, s, h * d_k),
        "putting the head axis last ([B, S, d_k, H]) before flattening":
            x.permute(0, 2, 3, 1).reshape(b, s, h * d_k),
    }


def _mha(params, num_heads, query, key, value, mask=None, *, scale=None, shared=False, output_projection=True,
         merge_transposed=True):
    """Multi-head attention with W_q...W_o from params, written out so that each mistake below is one
    switch: the attention maths stay those of _attention."""
    def project(name, x):
        return torch.nn.functional.linear(x, params[f"{name}.weight"], params.get(f"{name}.bias"))

    def split(x):
        b, s, d = x.shape
        return x.view(b, s, num_heads, d // num_heads).transpose(1, 2)

    q = split(project("W_q", query))
    k = split(project("W_q" if shared else "W_k", key))
    v = split(project("W_q" if shared else "W_v", value))
    context, weights = _attention(q, k, v, mask, scale=scale)
    b, h, s, d_k = context.shape
    merged = context.transpose(1, 2).reshape(b, s, h * d_k) if merge_transposed else context.reshape(b, s, h * d_k)
    return (project("W_o", merged) if output_projection else merged), weights


def mha_mistakes(params, num_heads, query, key, value, mask=None):
    """description -> (output, weights) of a mistaken multi-head attention."""
    d_model = query.shape[-1]
    return {
        "one projection (W_q) for queries, keys and values; W_k and W_v are never used":
            _mha(params, num_heads, query, key, value, mask, shared=True),
        "leaving out the output projection W_o": _mha(params, num_heads, query, key, value, mask,
                                                      output_projection=False),
        "scaling by sqrt(d_model) instead of sqrt(d_k) of one head":
            _mha(params, num_heads, query, key, value, mask, scale=1 / math.sqrt(d_model)),
        "merging the heads with a reshape of [B, H, S, d_k] without moving the head axis back first":
            _mha(params, num_heads, query, key, value, mask, merge_transposed=False),
    }


def kv_cache_mistakes(params, num_heads, x, first, chunk):
    """description -> the concatenated outputs of a mistaken cache, fed `first` tokens, then
    `chunk` at a time (as adapters.token_by_token does)."""
    bounds = [(0, first)] + [(start, min(start + chunk, x.shape[1])) for start in range(first, x.shape[1], chunk)]

    def run(window, mask_of):
        outputs = []
        for start, end in bounds:
            seen = window(start, end)
            keys = x[:, seen]
            mask = mask_of(end - start, len(seen), start - seen.start)
            outputs.append(_mha(params, num_heads, x[:, start:end], keys, keys, mask)[0])
        return torch.cat(outputs, dim=1)

    def tril(rows, columns, diagonal):
        return torch.ones(rows, columns, dtype=torch.bool).tril(diagonal=diagonal)

    return {
        "a cache that is never appended to (each new piece sees only its own tokens)":
            run(lambda start, end: range(start, end), tril),
        "a chunk mask without the offset P (tril() over [T_new, P + T_new] hides cached keys from the new "
        "tokens; tril(diagonal=P) is right)":
            run(lambda start, end: range(0, end), lambda rows, columns, past: tril(rows, columns, 0)),
        "no causal mask among the new tokens when the cache is used":
            run(lambda start, end: range(0, end), lambda rows, columns, past: None),
    }


def _numpy_softmax(x, axis=-1):
    return torch.softmax(torch.as_tensor(x), dim=axis).numpy()


def softmax_mistakes(x, axis=-1):
    import numpy as np

    with np.errstate(all="ignore"):
        found = {
            "exp(x) / sum(exp(x)) without subtracting the maximum (it overflows for large x)":
                np.exp(x) / np.exp(x).sum(axis=axis, keepdims=True),
            "subtracting the maximum of the whole array instead of each slice's":
                np.exp(x - x.max()) / np.exp(x - x.max()).sum(axis=axis, keepdims=True),
            "normalising by the sum of the whole array instead of each slice's":
                np.exp(x - x.max(axis=axis, keepdims=True)) / np.exp(x - x.max(axis=axis, keepdims=True)).sum(),
        }
        if x.ndim >= 2:
            found["a softmax over the last axis whatever `axis` says"] = _numpy_softmax(x, -1)
            found["a softmax over axis 0 instead of the given axis"] = _numpy_softmax(x, 0)
    return found


def numpy_attention_mistakes(Q, K, V):
    import numpy as np

    q, k, v = (torch.from_numpy(a) for a in (Q, K, V))
    found = {
        "attention without the 1/sqrt(d_k) scaling": _attention(q, k, v, scale=1.0),
        "a softmax over the queries (axis=-2) instead of the keys": _attention(q, k, v, dim=-2),
        "scaling by the value width d_v instead of the key width d_k":
            _attention(q, k, v, scale=1 / math.sqrt(V.shape[-1])),
    }
    if K.ndim == 4:
        # K.T on [B, H, S, d] gives [d, S, H, B]; only the harmless square cases would broadcast
        found["dividing by d_k instead of sqrt(d_k)"] = _attention(q, k, v, scale=1 / Q.shape[-1])
    return {name: tuple(t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t) for t in value)
            for name, value in found.items()}


def padding_mask_mistakes(lengths, max_len):
    positions = torch.arange(max_len)[None, :]
    return {
        "j <= length instead of j < length (one padded key still allowed)":
            (positions <= lengths[:, None])[:, None, None, :],
        "the blocked-positions convention (True = padding)": (positions >= lengths[:, None])[:, None, None, :],
    }


def causal_attention_mistakes(params, x):
    def project(name):
        return torch.nn.functional.linear(x, params[f"{name}.weight"], params.get(f"{name}.bias"))

    q, k, v = (project(name) for name in ("W_query", "W_key", "W_value"))
    t = x.shape[1]
    future = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)
    only_future = _attention(q, k, v, future)[0]
    return {
        "no mask at all (every token sees the future)": _attention(q, k, v)[0],
        "a mask that blocks the past and keeps only the future, so the last position sees nothing and gets "
        "NaN (masked_fill fills where its mask is True: that mask must be True above the diagonal)":
            only_future.masked_fill(~future.any(-1)[:, None], float("nan")),
        "a mask that blocks the past and keeps only the future (masked_fill fills where its mask is "
        "True, so that mask must be True above the diagonal: triu(diagonal=1))":
            _attention(q, k, v, future)[0],
        "a mask that also hides the diagonal (a token may not see itself)":
            _attention(q, k, v, ~torch.ones(t, t, dtype=torch.bool).triu())[0],
        "scaling by sqrt(d_in), the input width, instead of sqrt(d_out), the key width":
            _attention(q, k, v, ~future, scale=1 / math.sqrt(x.shape[-1]))[0],
    }


def head_similarity_mistakes(weights):
    flat = weights.reshape(weights.shape[0], -1)
    unit = flat / flat.norm(dim=-1, keepdim=True)
    return {
        "dot products without dividing by the norms": flat @ flat.T,
        "1 - cosine similarity (a distance, not a similarity)": 1 - unit @ unit.T,
        "normalising each query row instead of each head's whole map":
            torch.einsum("itk,jtk->ij", weights / weights.norm(dim=-1, keepdim=True),
                         weights / weights.norm(dim=-1, keepdim=True)) / weights.shape[1],
    }
