"""Hidden tests for to_torch_mha(module) -> nn.MultiheadAttention with the module's weights.

The module handed to to_torch_mha is built by the grader (kit.mha_stand_in: the attributes
and layers MultiHeadAttention's statement promises), so a slip in the student's own
MultiHeadAttention costs points in that exercise only."""

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers.common import (B, D_MODEL, H, PROJECTIONS, SQ, mha_parameters, mha_stand_in,
                                              named, randn, run_module, torch_mha, tril)

# float32 unless a test says otherwise: the dtype has its own test.
DTYPE = torch.float32
TORCH_MHA = "torch.nn.modules.activation.MultiheadAttention"

# The earlier exercises' classes its answers use (checks.built_on): the module handed in is the grader's
# stand-in (mha_stand_in), never the student's MultiHeadAttention.
BUILT_ON = {"mha": ("MultiHeadAttention",)}

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "keys_first": "stacking keys before queries (the order is queries, keys, values)",
    "nothing_copied": "leaving nn.MultiheadAttention's own initial values (nothing was copied)",
    "create": "Create nn.MultiheadAttention(d_model, num_heads, batch_first=True) and return it.",
    "batch_first": "Our tensors are [B, S, D]: pass batch_first=True.",
    "sizes": "Use the module's d_model and num_heads.",
    "bias_on": "Pass bias=True to nn.MultiheadAttention when the module has biases.",
    "bias_off": "Pass bias=False to nn.MultiheadAttention when the module has none.",
    "dtype": "Create nn.MultiheadAttention with dtype=module.W_q.weight.dtype.",
}


def converted(student, bias=True, seed=10, dtype=DTYPE):
    """Convert a MultiHeadAttention with known weights; returns (the weights used, the
    description of the returned module)."""
    params = mha_parameters(bias=bias, seed=seed, dtype=dtype)
    reply = run_module(student, "MultiHeadAttention", (), params=params, dtype=dtype,
                         functions=[("to_torch_mha", (), {})], stand_in=mha_stand_in(bias=bias))
    result = reply["outputs"][0]
    checks.require(isinstance(result, dict) and result.get("class") == TORCH_MHA,
                   "to_torch_mha did not return an nn.MultiheadAttention.",
                   CAUSES["create"])
    return params, result


def rebuilt(result):
    """An nn.MultiheadAttention built here from the returned state (nothing of the student's runs)."""
    attributes, state = result["attributes"], result["state"]
    module = torch.nn.MultiheadAttention(attributes["embed_dim"], attributes["num_heads"],
                                         bias="in_proj_bias" in state, batch_first=True, dtype=DTYPE)
    module.load_state_dict({name: value.to(DTYPE) for name, value in state.items()})
    return module


def stacking_mistakes(params, part):
    """description -> the stacked in_proj_<part> of a mistaken conversion."""
    q, k, v = (params[f"{name}.{part}"] for name in PROJECTIONS[:3])
    return named(CAUSES, keys_first=torch.cat([k, q, v]),
                   nothing_copied=torch.zeros_like(torch.cat([q, k, v])) if part == "bias" else None)


def test_copies_the_modules_weights(student):
    """The gate: the returned module depends on the weights of the module it was given."""
    (_, first), (_, second) = converted(student, seed=12), converted(student, seed=13)
    copied = [name for name in ("in_proj_weight", "out_proj.weight")
              if name in first["state"] and name in second["state"]
              and substance.differs(first["state"][name], second["state"][name])]
    checks.require(copied, "to_torch_mha returns the same weights whatever the module it is given, so nothing "
                   "of the module is copied yet.")


def test_returns_batch_first_multihead_attention(student):
    _, result = converted(student)
    attributes = result["attributes"]
    checks.require(attributes.get("batch_first") is True, "The returned module has batch_first=False.",
                   CAUSES["batch_first"])
    checks.require(attributes.get("embed_dim") == D_MODEL and attributes.get("num_heads") == H,
                   "The returned module has the wrong embed_dim or num_heads.",
                   CAUSES["sizes"])


def test_stacks_input_projections(student):
    params, result = converted(student)
    want = torch.cat([params[f"{name}.weight"] for name in PROJECTIONS[:3]])
    checks.require("in_proj_weight" in result["state"], "The returned module has no in_proj_weight.")
    checks.close(result["state"]["in_proj_weight"].to(DTYPE), want, "in_proj_weight", "",
                 stacking_mistakes(params, "weight"))
    want_bias = torch.cat([params[f"{name}.bias"] for name in PROJECTIONS[:3]])
    checks.require("in_proj_bias" in result["state"], "The returned module has no in_proj_bias, but the module "
                   "has biases.", CAUSES["bias_on"])
    checks.close(result["state"]["in_proj_bias"].to(DTYPE), want_bias, "in_proj_bias", "",
                 stacking_mistakes(params, "bias"))


def test_copies_output_projection(student):
    params, result = converted(student)
    for part in ("weight", "bias"):
        checks.close(result["state"][f"out_proj.{part}"].to(DTYPE), params[f"W_o.{part}"],
                     f"out_proj.{part}", "", {"leaving nn.MultiheadAttention's own initial values (nothing was "
                                              "copied)": torch.zeros_like(params["W_o.bias"]) if part == "bias" else None})


def test_matches_module_outputs(student):
    params, result = converted(student, seed=20)
    x = randn(B, SQ, D_MODEL, seed=21, dtype=DTYPE)
    want, _ = torch_mha(params, H, x, x, x, tril(SQ))
    got, _ = rebuilt(result)(x, x, x, attn_mask=~tril(SQ))
    checks.close(got.detach(), want.detach(), "The converted module's causal self-attention output")


def test_without_bias(student):
    params, result = converted(student, bias=False, seed=30)
    checks.require("in_proj_bias" not in result["state"],
                   "The module has no biases, but the returned nn.MultiheadAttention has some.",
                   CAUSES["bias_off"])
    checks.require("in_proj_weight" in result["state"] and "out_proj.weight" in result["state"],
                   "The returned module has no in_proj_weight or out_proj.weight.")


def test_keeps_the_modules_dtype(student):
    _, result = converted(student, dtype=torch.float64, seed=40)
    checks.require("in_proj_weight" in result["state"], "The returned module has no in_proj_weight.")
    checks.dtype(result["state"]["in_proj_weight"], torch.float64, "in_proj_weight of a float64 module",
                 CAUSES["dtype"])
