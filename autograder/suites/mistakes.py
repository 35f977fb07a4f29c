"""What common mistakes would return, recomputed on the grader's side.

When a student's wrong output equals one of these, the feedback names the mistake.  Each entry is
the description that completes the sentence "It matches what ... gives."
"""

import math

import torch


def _attention(q, k, v, mask=None, *, scale=None, dim=-1, invert=False, mask_after=False):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None and invert:
        mask = ~mask
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
