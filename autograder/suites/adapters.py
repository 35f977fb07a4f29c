"""The seam between the hidden tests and the student's code.

Tests never talk to the student process directly: they call these adapters, which send inputs,
check that what came back has the promised form (a pair of tensors, a module with W_q...), and
raise Feedback in words the student understands when it does not.  Inputs are made here too, so
every test uses sizes that are all distinct (B != H != Sq != Sk != d_k != d_v) and non-constant.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.harness import checks
from autograder.harness.checks import Feedback
from autograder.student import StudentError

# Distinct sizes, so that a transpose or a reshape over the wrong axis cannot go unnoticed.
B, H, SQ, SK, D_K, D_V = 2, 3, 5, 7, 4, 6
D_MODEL = H * D_K


def randn(*shape, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype)


def qkv(leading=(B, H), sq=SQ, sk=SK, d_k=D_K, d_v=D_V, dtype=torch.float64, seed=0):
    return (randn(*leading, sq, d_k, dtype=dtype, seed=seed),
            randn(*leading, sk, d_k, dtype=dtype, seed=seed + 1),
            randn(*leading, sk, d_v, dtype=dtype, seed=seed + 2))


def random_mask(*shape, seed=0):
    """A boolean mask (True = may attend) with at least one allowed and one blocked key per row."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(*shape, generator=generator) > 0.4
    rows = mask.shape[-1]
    first = torch.randint(rows, shape[:-1], generator=generator)
    mask.scatter_(-1, first.unsqueeze(-1), True)
    blocked = (first + 1 + torch.randint(rows - 1, shape[:-1], generator=generator)) % rows
    mask.scatter_(-1, blocked.unsqueeze(-1), False)
    return mask


def tril(sq, sk=None):
    return torch.ones(sq, sk or sq, dtype=torch.bool).tril()


# -- scaled_dot_product_attention --------------------------------------------------------------

def sdpa(student, q, k, v, mask=None, grad_outputs=None):
    """Call the student's scaled_dot_product_attention; returns ((output, weights), input grads)."""
    kwargs = {} if mask is None else {"mask": mask}
    reply = student.call("scaled_dot_product_attention", q, k, v, grad=grad_outputs is not None,
                         grad_outputs=grad_outputs or (), **kwargs)
    output, weights = checks.pair(reply["output"], "scaled_dot_product_attention")
    checks.tensor(output, "The output")
    checks.tensor(weights, "The attention weights")
    return (output, weights), reply["input_grads"]


def torch_attention(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def torch_weights(q, k, mask=None):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


# -- causal_mask -----------------------------------------------------------------------------

def causal_mask(student, seq_len, *args, **kwargs):
    mask = student.call("causal_mask", seq_len, *args, **kwargs)["output"]
    return checks.tensor(mask, f"causal_mask({seq_len})")


# -- split_heads / merge_heads ---------------------------------------------------------------

def split_heads(student, x, num_heads):
    return checks.tensor(student.call("split_heads", x, num_heads)["output"], "split_heads(x)")


def merge_heads(student, x):
    return checks.tensor(student.call("merge_heads", x)["output"], "merge_heads(x)")


# -- MultiHeadAttention -----------------------------------------------------------------------

PROJECTIONS = ("W_q", "W_k", "W_v", "W_o")


def mha_parameters(d_model=D_MODEL, bias=True, dtype=torch.float64, seed=10):
    """Random weights for W_q, W_k, W_v, W_o, named as in the student's module."""
    params = {}
    for offset, name in enumerate(PROJECTIONS):
        params[f"{name}.weight"] = randn(d_model, d_model, dtype=dtype, seed=seed + offset) / d_model ** 0.5
        if bias:
            params[f"{name}.bias"] = randn(d_model, dtype=dtype, seed=seed + 10 + offset) * 0.1
    return params


def build_mha(student, d_model=D_MODEL, num_heads=H, bias=True, **options):
    """Construct the student's MultiHeadAttention (nothing else); returns the probe's reply."""
    kwargs = {} if bias is True else {"bias": bias}
    return student.module("MultiHeadAttention", (d_model, num_heads), kwargs, **options)


def mha(student, query, key, value, mask=None, *, params, num_heads=H, grad_outputs=None):
    """Run the student's module with the given weights; returns ((output, weights), reply)."""
    kwargs = {} if mask is None else {"mask": mask}
    bias = any(name.endswith(".bias") for name in params)
    try:
        reply = build_mha(student, query.shape[-1], num_heads, bias, load=params, dtype=query.dtype,
                          steps=[{"method": "forward", "args": [query, key, value], "kwargs": kwargs}],
                          grad=grad_outputs is not None, grad_outputs=[grad_outputs or []])
    except StudentError as error:
        if error.kind == "AttributeError" and "no parameter named" in error.message:
            raise Feedback(f"MultiHeadAttention: {error.message}.",
                           "The module needs W_q, W_k, W_v, W_o = nn.Linear(d_model, d_model, bias=bias).")
        raise
    output, weights = checks.pair(reply["outputs"][0], "MultiHeadAttention.forward")
    checks.tensor(output, "The output")
    checks.tensor(weights, "The attention weights")
    return (output, weights), reply


def torch_mha(params, num_heads, query, key, value, mask=None):
    """nn.MultiheadAttention with the same weights: the independent reference."""
    d_model = query.shape[-1]
    bias = "W_q.bias" in params
    module = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True, dtype=query.dtype)
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.cat([params[f"{n}.weight"] for n in PROJECTIONS[:3]]))
        module.out_proj.weight.copy_(params["W_o.weight"])
        if bias:
            module.in_proj_bias.copy_(torch.cat([params[f"{n}.bias"] for n in PROJECTIONS[:3]]))
            module.out_proj.bias.copy_(params["W_o.bias"])
    attn_mask = None if mask is None else ~mask  # nn.MultiheadAttention: True = blocked
    return module(query, key, value, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)


def reference_mha(reference, params, num_heads, dtype=torch.float64):
    d_model = params["W_q.weight"].shape[0]
    module = reference["MultiHeadAttention"](d_model, num_heads, bias="W_q.bias" in params).to(dtype)
    with torch.no_grad():
        for name, value in params.items():
            module.get_parameter(name).copy_(value)
    return module
