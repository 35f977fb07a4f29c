"""The student API is fixed: the released stubs have these signatures, and the reference
solutions behave as the API says."""

import ast

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.reference import reference_namespace
from autograder.submission import cell_kind
from tests.notebooks import COURSE

SIGNATURES = {
    "scaled_dot_product_attention": "q, k, v, mask=None",
    "causal_mask": "seq_len, device=None",
    "split_heads": "x, num_heads",
    "merge_heads": "x",
    "MultiHeadAttention.__init__": "self, d_model, num_heads, bias=True",
    "MultiHeadAttention.forward": "self, query, key, value, mask=None",
}


def released_signatures():
    found = {}
    for assignment in COURSE.assignments:
        for notebook in assignment.notebooks:
            nb = nbformat.read(COURSE.release_notebook(assignment, notebook), as_version=4)
            for cell in nb.cells:
                if cell_kind(cell) != "answer":
                    continue
                for node in ast.parse(cell.source).body:
                    if isinstance(node, ast.FunctionDef):
                        found[node.name] = ast.unparse(node.args)
                    if isinstance(node, ast.ClassDef):
                        for item in node.body:
                            if isinstance(item, ast.FunctionDef):
                                found[f"{node.name}.{item.name}"] = ast.unparse(item.args)
    return found


def test_released_stubs_have_the_api_signatures():
    found = released_signatures()
    assert {name: found.get(name) for name in SIGNATURES} == SIGNATURES


def reference(assignment_id):
    assignment = COURSE.assignment(assignment_id)
    return reference_namespace(COURSE.source_notebook(assignment, assignment.notebooks[0]))


def test_reference_attention_follows_the_api():
    sdpa = reference("scaled_attention")["scaled_dot_product_attention"]
    q, k, v = torch.randn(2, 3, 5, 4, dtype=torch.float64), torch.randn(2, 3, 7, 4, dtype=torch.float64), \
        torch.randn(2, 3, 7, 6, dtype=torch.float64)
    mask = torch.rand(5, 7) > 0.5
    mask[0] = False
    out, w = sdpa(q, k, v, mask=mask)
    assert out.shape == (2, 3, 5, 6) and w.shape == (2, 3, 5, 7) and out.dtype == torch.float64
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert (w[..., ~mask] == 0).all() and (out[:, :, 0] == 0).all()


def test_reference_causal_mask_follows_the_api():
    mask = reference("masks")["causal_mask"](5, device="cpu")
    assert mask.dtype == torch.bool and torch.equal(mask, torch.ones(5, 5, dtype=torch.bool).tril())


def test_reference_multi_head_attention_matches_torch():
    namespace = reference("multi_head")
    with pytest.raises(ValueError):
        namespace["MultiHeadAttention"](10, 3)
    mha = namespace["MultiHeadAttention"](12, 3)
    torch_mha = nn.MultiheadAttention(12, 3, batch_first=True)
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
        torch_mha.in_proj_bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
        torch_mha.out_proj.weight.copy_(mha.W_o.weight)
        torch_mha.out_proj.bias.copy_(mha.W_o.bias)
    query, memory = torch.randn(2, 5, 12), torch.randn(2, 7, 12)
    out, w = mha(query, memory, memory)
    want, want_w = torch_mha(query, memory, memory, average_attn_weights=False)
    assert w.shape == (2, 3, 5, 7)
    assert torch.allclose(out, want, atol=1e-5) and torch.allclose(w, want_w, atol=1e-6)
