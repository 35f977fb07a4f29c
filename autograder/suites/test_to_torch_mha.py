"""Hidden tests for to_torch_mha(module) -> nn.MultiheadAttention with the module's weights."""

import torch

from autograder.harness import checks
from autograder.suites import adapters as A

# float32 throughout: nn.MultiheadAttention is created in float32 unless told otherwise, and
# copying weights into it is what is graded here, not the choice of dtype.
DTYPE = torch.float32
TORCH_MHA = "torch.nn.modules.activation.MultiheadAttention"
STACK_HINT = ("in_proj_weight is torch.cat([W_q.weight, W_k.weight, W_v.weight]) along dim 0 "
              "(queries first); copy it inside torch.no_grad().")


def converted(student, bias=True, seed=10):
    """Build the student's MultiHeadAttention with known weights and convert it; returns
    (the weights used, the description of the returned module)."""
    params = A.mha_parameters(bias=bias, seed=seed, dtype=DTYPE)
    reply = A.run_module(student, "MultiHeadAttention", (A.D_MODEL, A.H), {} if bias else {"bias": False},
                         params=params, dtype=DTYPE, functions=[("to_torch_mha", (), {})])
    result = reply["outputs"][0]
    checks.require(isinstance(result, dict) and result.get("class") == TORCH_MHA,
                   "to_torch_mha did not return an nn.MultiheadAttention.",
                   "Create nn.MultiheadAttention(d_model, num_heads, batch_first=True) and return it.")
    return params, result


def rebuilt(result):
    """An nn.MultiheadAttention built here from the returned state (nothing of the student's runs)."""
    attributes, state = result["attributes"], result["state"]
    module = torch.nn.MultiheadAttention(attributes["embed_dim"], attributes["num_heads"],
                                         bias="in_proj_bias" in state, batch_first=True, dtype=DTYPE)
    module.load_state_dict({name: value.to(DTYPE) for name, value in state.items()})
    return module


def test_returns_batch_first_multihead_attention(student):
    _, result = converted(student)
    attributes = result["attributes"]
    checks.require(attributes.get("batch_first") is True, "The returned module has batch_first=False.",
                   "Our tensors are [B, S, D]: pass batch_first=True.")
    checks.require(attributes.get("embed_dim") == A.D_MODEL and attributes.get("num_heads") == A.H,
                   "The returned module has the wrong embed_dim or num_heads.",
                   "Use the module's d_model and num_heads.")


def test_stacks_input_projections(student):
    params, result = converted(student)
    want = torch.cat([params[f"{name}.weight"] for name in A.PROJECTIONS[:3]])
    checks.require("in_proj_weight" in result["state"], "The returned module has no in_proj_weight.")
    checks.close(result["state"]["in_proj_weight"].to(DTYPE), want, "in_proj_weight", STACK_HINT)
    want_bias = torch.cat([params[f"{name}.bias"] for name in A.PROJECTIONS[:3]])
    checks.close(result["state"]["in_proj_bias"].to(DTYPE), want_bias, "in_proj_bias", STACK_HINT)


def test_copies_output_projection(student):
    params, result = converted(student)
    for part in ("weight", "bias"):
        checks.close(result["state"][f"out_proj.{part}"].to(DTYPE), params[f"W_o.{part}"],
                     f"out_proj.{part}", "out_proj is an nn.Linear: copy W_o into it.")


def test_matches_module_outputs(student):
    params, result = converted(student, seed=20)
    x = A.randn(A.B, A.SQ, A.D_MODEL, seed=21, dtype=DTYPE)
    want, _ = A.torch_mha(params, A.H, x, x, x, A.tril(A.SQ))
    got, _ = rebuilt(result)(x, x, x, attn_mask=~A.tril(A.SQ))
    checks.close(got.detach(), want.detach(), "The converted module's causal self-attention output", STACK_HINT)


def test_without_bias(student):
    params, result = converted(student, bias=False, seed=30)
    checks.require("in_proj_bias" not in result["state"],
                   "The module has no biases, but the returned nn.MultiheadAttention has some.",
                   "Pass bias=False to nn.MultiheadAttention when the module has none.")
    query = A.randn(A.B, A.SQ, A.D_MODEL, seed=31, dtype=DTYPE)
    key = A.randn(A.B, A.SK, A.D_MODEL, seed=32, dtype=DTYPE)
    want, _ = A.torch_mha(params, A.H, query, key, key)
    got, _ = rebuilt(result)(query, key, key)
    checks.close(got.detach(), want.detach(), "The converted module's cross-attention output", STACK_HINT)
