"""Hidden tests for GroupedQueryAttention(d_model, num_heads, num_kv_heads, bias=False)."""

import torch

from autograder.harness import checks, substance
from autograder.suites import adapters as A

GROUP_HINT = ("Query head h uses key/value head h // (num_heads // num_kv_heads): repeat each key/value "
              "head for its group with repeat_interleave(group, dim=1), not repeat.")
MISTAKES = "query head h paired with key/value head h % num_kv_heads (repeat instead of repeat_interleave)"


def x_of(seed=600, dtype=torch.float64):
    return A.randn(A.B, A.SK, A.GQA_D_MODEL, seed=seed, dtype=dtype)


def compare(student, x, mask, what, num_heads=A.GQA_HEADS, num_kv_heads=A.GQA_KV_HEADS, seed=610):
    params = A.gqa_parameters(num_heads, num_kv_heads, seed=seed)
    (output, weights), _ = A.gqa(student, x, mask, params=params, num_heads=num_heads, num_kv_heads=num_kv_heads)
    want_output, want_weights = A.torch_gqa(params, num_heads, num_kv_heads, x, mask)
    wrong = A.torch_gqa(params, num_heads, num_kv_heads, x, mask, kv_order="repeat")
    checks.close(weights, want_weights, f"The weights ({what})", GROUP_HINT, {MISTAKES: wrong[1]})
    checks.close(output, want_output, f"The output ({what})", "The weights are right: check the merge and W_o.",
                 {MISTAKES: wrong[0]})


def test_computes_attention(student):
    """The gate, with as many key/value heads as query heads: attention before any grouping."""
    x = x_of(607)
    substance.attention_module(lambda params: A.gqa(student, x, params=params, num_kv_heads=A.GQA_HEADS)[0][0],
                               A.gqa_parameters(A.GQA_HEADS, A.GQA_HEADS, seed=608))


def test_rejects_bad_head_counts(student):
    A.expect_value_error(lambda: student.module("GroupedQueryAttention", (24, 6, 4)), "GroupedQueryAttention(24, 6, 4)",
                         "Raise ValueError when num_heads is not a multiple of num_kv_heads.")
    A.expect_value_error(lambda: student.module("GroupedQueryAttention", (20, 6, 2)), "GroupedQueryAttention(20, 6, 2)",
                         "Raise ValueError when d_model is not a multiple of num_heads.")


def test_projection_shapes(student):
    parameters = student.module("GroupedQueryAttention", (A.GQA_D_MODEL, A.GQA_HEADS, A.GQA_KV_HEADS))["parameters"]
    d_kv = A.GQA_KV_HEADS * A.GQA_D_K
    for name, shape in (("W_q", (A.GQA_D_MODEL,) * 2), ("W_k", (d_kv, A.GQA_D_MODEL)),
                        ("W_v", (d_kv, A.GQA_D_MODEL)), ("W_o", (A.GQA_D_MODEL,) * 2)):
        checks.require(f"{name}.weight" in parameters, f"The module has no {name}.",
                       "Name the projections W_q, W_k, W_v, W_o.")
        checks.shape(parameters[f"{name}.weight"], shape, f"{name}.weight",
                     "W_k and W_v map d_model to num_kv_heads * d_k, with d_k = d_model // num_heads.")
    checks.require(not any(name.endswith(".bias") for name in parameters),
                   "GroupedQueryAttention(..., bias=False) has bias parameters.", "Pass bias=bias to nn.Linear.")


def test_matches_torch_grouped_query_attention(student):
    compare(student, x_of(601), None, "6 query heads, 2 key/value heads")


def test_with_causal_mask(student):
    compare(student, x_of(602), A.tril(A.SK), "causal mask")


def test_one_key_value_head(student):
    compare(student, x_of(603), None, "1 key/value head: multi-query attention", num_kv_heads=1, seed=620)


def test_as_many_key_value_heads_as_query_heads(student):
    x = x_of(604)
    params = A.gqa_parameters(A.GQA_HEADS, A.GQA_HEADS, seed=630)
    (output, _), _ = A.gqa(student, x, params=params, num_kv_heads=A.GQA_HEADS)
    checks.close(output, A.torch_mha(params, A.GQA_HEADS, x, x, x)[0],
                 "The output with num_kv_heads == num_heads", "This case is ordinary multi-head attention.")


def test_weights_rows_sum_to_one(student):
    params = A.gqa_parameters(seed=640)
    (_, weights), _ = A.gqa(student, x_of(605), params=params)
    checks.shape(weights, (A.B, A.GQA_HEADS, A.SK, A.SK), "The weights", "Return one map per query head.")
    checks.rows_sum_to_one(weights, "The weights", "The softmax runs over the keys.")


def test_gradients_reach_input_and_parameters(student):
    params, x = A.gqa_parameters(seed=650), x_of(606)
    upstream = [A.randn(A.B, A.SK, A.GQA_D_MODEL, seed=651), A.randn(A.B, A.GQA_HEADS, A.SK, A.SK, seed=652)]
    _, reply = A.gqa(student, x, A.tril(A.SK), params=params, grad_outputs=upstream)
    A.check_gradients(reply, lambda weights, inputs: A.gqa(student, inputs["x"], A.tril(A.SK), params=weights)[0],
                      params, {"x": x}, upstream)
