"""Hidden tests for GroupedQueryAttention(d_model, num_heads, num_kv_heads, bias=False) with
forward(x, mask=None, use_cache=False) and reset_cache(): its cache holds the num_kv_heads heads."""

import torch
import torch.nn.functional as F

from autograder.harness import checks, substance
from autograder.suites.helpers.common import (B, SHAPE_ERRORS, SK, check_gradients, crash_hint,
                                              expect_value_error, heads_of, linear_parameters, named, randn,
                                              run_module, torch_mha, torch_weights, tril)
from autograder.suites.helpers.decoding import cache_calls, joined_new_outputs


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "repeat": "query head h paired with key/value head h % num_kv_heads (repeat instead of repeat_interleave)",
    "group": "Query head h uses key/value head h // (num_heads // num_kv_heads): repeat each key/value head for "
             "its group with repeat_interleave(group, dim=1), not repeat.",
    "expand": "W_k and W_v produce num_kv_heads heads; repeat each for its group of query heads before the product "
              "with the queries.",
    "head_counts": "Raise ValueError when num_heads is not a multiple of num_kv_heads.",
    "kv_width": "W_k and W_v map d_model to num_kv_heads * d_k, with d_k = d_model // num_heads.",
    "cached_repeated": "the cache holding the keys and values after repeat_interleave (num_heads heads, "
                       "2 * num_heads * d_k numbers per token) instead of the num_kv_heads heads W_k and W_v "
                       "produce: cache first, repeat for the groups after reading the cache",
    "cache": "With use_cache=True, append the new tokens' keys and values to the cache along the sequence axis "
             "(dim=2) and let new token i, at position P + i, attend to the cached positions up to its own "
             "(tril(diagonal=P) over [T_new, P + T_new]); reset_cache() empties it.",
}

GQA_HEADS, GQA_KV_HEADS, GQA_D_K = 6, 2, 4


GQA_D_MODEL = GQA_HEADS * GQA_D_K


def gqa_parameters(num_heads=GQA_HEADS, num_kv_heads=GQA_KV_HEADS, d_k=GQA_D_K, dtype=torch.float64,
                   seed=200):
    d_model, d_kv = num_heads * d_k, num_kv_heads * d_k
    shapes = {"W_q": (d_model, d_model), "W_k": (d_kv, d_model), "W_v": (d_kv, d_model),
              "W_o": (d_model, d_model)}
    return linear_parameters(shapes, bias=False, dtype=dtype, seed=seed)


def gqa(student, x, mask=None, *, params, num_heads=GQA_HEADS, num_kv_heads=GQA_KV_HEADS,
        grad_outputs=None):
    kwargs = {} if mask is None else {"mask": mask}
    with crash_hint(CAUSES["expand"]):
        reply = run_module(student, "GroupedQueryAttention", (x.shape[-1], num_heads, num_kv_heads), {},
                           params=params, dtype=x.dtype, calls=[((x,), kwargs)],
                           grad_outputs=None if grad_outputs is None else [grad_outputs])
    output, weights = checks.pair(reply["outputs"][0], "GroupedQueryAttention.forward")
    return (checks.tensor(output, "The output"), checks.tensor(weights, "The weights")), reply


def torch_gqa(params, num_heads, num_kv_heads, x, mask=None, kv_order="interleave"):
    """Grouped-query attention through F.scaled_dot_product_attention(enable_gqa=True);
    returns (output, per-head weights)."""
    q = heads_of(F.linear(x, params["W_q.weight"]), num_heads)
    k = heads_of(F.linear(x, params["W_k.weight"]), num_kv_heads)
    v = heads_of(F.linear(x, params["W_v.weight"]), num_kv_heads)
    group = num_heads // num_kv_heads
    if kv_order == "interleave":
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        k_full = k.repeat_interleave(group, dim=1)
    else:  # a mistake: query head h paired with key/value head h % num_kv_heads
        k_full, v_full = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        context = F.scaled_dot_product_attention(q, k_full, v_full, attn_mask=mask)
    b, h, s, d_k = context.shape
    output = F.linear(context.transpose(1, 2).reshape(b, s, h * d_k), params["W_o.weight"])
    return output, torch_weights(q, k_full, mask)




def x_of(seed=600, dtype=torch.float64):
    return randn(B, SK, GQA_D_MODEL, seed=seed, dtype=dtype)


def compare(student, x, mask, what, num_heads=GQA_HEADS, num_kv_heads=GQA_KV_HEADS, seed=610):
    params = gqa_parameters(num_heads, num_kv_heads, seed=seed)
    (output, weights), _ = gqa(student, x, mask, params=params, num_heads=num_heads, num_kv_heads=num_kv_heads)
    want_output, want_weights = torch_gqa(params, num_heads, num_kv_heads, x, mask)
    wrong = torch_gqa(params, num_heads, num_kv_heads, x, mask, kv_order="repeat")
    checks.close(weights, want_weights, f"The weights ({what})", CAUSES["group"], named(CAUSES, repeat=wrong[1]))
    checks.close(output, want_output, f"The output ({what})", "The weights are right: check the merge and W_o.",
                 named(CAUSES, repeat=wrong[0]))


def test_computes_attention(student):
    """The gate, with as many key/value heads as query heads: attention before any grouping."""
    x = x_of(607)
    substance.attention_module(lambda params: gqa(student, x, params=params, num_kv_heads=GQA_HEADS)[0][0],
                               gqa_parameters(GQA_HEADS, GQA_HEADS, seed=608))


def test_rejects_bad_head_counts(student):
    expect_value_error(lambda: student.module("GroupedQueryAttention", (24, 6, 4)), "GroupedQueryAttention(24, 6, 4)",
                         CAUSES["head_counts"])
    expect_value_error(lambda: student.module("GroupedQueryAttention", (20, 6, 2)), "GroupedQueryAttention(20, 6, 2)",
                         "Raise ValueError when d_model is not a multiple of num_heads.")


def test_projection_shapes(student):
    parameters = student.module("GroupedQueryAttention", (GQA_D_MODEL, GQA_HEADS, GQA_KV_HEADS))["parameters"]
    d_kv = GQA_KV_HEADS * GQA_D_K
    for name, shape in (("W_q", (GQA_D_MODEL,) * 2), ("W_k", (d_kv, GQA_D_MODEL)),
                        ("W_v", (d_kv, GQA_D_MODEL)), ("W_o", (GQA_D_MODEL,) * 2)):
        checks.require(f"{name}.weight" in parameters, f"The module has no {name}.",
                       "Name the projections W_q, W_k, W_v, W_o.")
        checks.shape(parameters[f"{name}.weight"], shape, f"{name}.weight",
                     CAUSES["kv_width"])
    checks.require(not any(name.endswith(".bias") for name in parameters),
                   "GroupedQueryAttention(..., bias=False) has bias parameters.", "Pass bias=bias to nn.Linear.")


def test_matches_torch_grouped_query_attention(student):
    compare(student, x_of(601), None, "6 query heads, 2 key/value heads")


def test_with_causal_mask(student):
    compare(student, x_of(602), tril(SK), "causal mask")


def test_one_key_value_head(student):
    compare(student, x_of(603), None, "1 key/value head: multi-query attention", num_kv_heads=1, seed=620)


def test_as_many_key_value_heads_as_query_heads(student):
    x = x_of(604)
    params = gqa_parameters(GQA_HEADS, GQA_HEADS, seed=630)
    (output, _), _ = gqa(student, x, params=params, num_kv_heads=GQA_HEADS)
    checks.close(output, torch_mha(params, GQA_HEADS, x, x, x)[0],
                 "The output with num_kv_heads == num_heads", "This case is ordinary multi-head attention.")


def test_weights_rows_sum_to_one(student):
    params = gqa_parameters(seed=640)
    (_, weights), _ = gqa(student, x_of(605), params=params)
    checks.shape(weights, (B, GQA_HEADS, SK, SK), "The weights", "Return one map per query head.")
    checks.rows_sum_to_one(weights, "The weights", "The softmax runs over the keys.")


def test_gradients_reach_input_and_parameters(student):
    params, x = gqa_parameters(seed=650), x_of(606)
    upstream = [randn(B, SK, GQA_D_MODEL, seed=651), randn(B, GQA_HEADS, SK, SK, seed=652)]
    _, reply = gqa(student, x, tril(SK), params=params, grad_outputs=upstream)
    check_gradients(reply, lambda weights, inputs: gqa(student, inputs["x"], tril(SK), params=weights)[0],
                      params, {"x": x}, upstream)


def test_cache_holds_the_unrepeated_heads(student):
    """A 2-token prompt, then chunks of 2 with use_cache=True: the outputs are the student's own causal
    forward(x, mask), and the tensors the module keeps outside its parameters grow by the keys and
    values of the num_kv_heads heads, 2 * num_kv_heads * d_k numbers per token, not by the repeated
    num_heads heads (what a cache kept after repeat_interleave holds): the memory GQA exists to save."""
    params, x = gqa_parameters(seed=660), x_of(661)
    calls = cache_calls(x, first=2, chunk=2)

    def cached(calls, held=False):
        with crash_hint(CAUSES["cache"], when=("use_cache", "reset_cache", *SHAPE_ERRORS)):
            reply = run_module(student, "GroupedQueryAttention", (GQA_D_MODEL, GQA_HEADS, GQA_KV_HEADS), {},
                               params=params, dtype=x.dtype, calls=calls, held=held)
        outputs = [checks.pair(output, "GroupedQueryAttention.forward(x_new, use_cache=True)")[0]
                   if call[0] == "forward" else output for call, output in zip(calls, reply["outputs"])]
        return outputs, reply

    outputs, reply = cached(calls)
    (full, _), _ = gqa(student, x, tril(SK), params=params)
    checks.same(joined_new_outputs(outputs, GQA_D_MODEL, "d_model"), full,
                "A 2-token prompt, then chunks of 2 tokens with use_cache=True, against your own "
                "forward(x, mask=causal)", CAUSES["cache"])
    prompt_only = cached(calls[:2])[1]
    per_token = (reply["held_elements"] - prompt_only["held_elements"]) / (B * (SK - 2))
    want, repeated = 2 * GQA_KV_HEADS * GQA_D_K, 2 * GQA_HEADS * GQA_D_K
    if per_token > want:
        raise checks.Feedback(
            f"The tensors the module keeps outside its parameters grow by {per_token:g} numbers per token, where the "
            f"keys and values of the {GQA_KV_HEADS} key/value heads are 2 * num_kv_heads * d_k = {want}.",
            f"Likely cause: {CAUSES['cached_repeated']}." if per_token == repeated else
            "Keep the keys and values of the num_kv_heads heads of each token, nothing else per token.")
    checks.require(per_token == want,
                   f"The tensors the module keeps outside its parameters grow by {per_token:g} numbers per token, "
                   f"fewer than the keys and values of the {GQA_KV_HEADS} key/value heads "
                   f"(2 * num_kv_heads * d_k = {want}).",
                   "Keep the cache in the module's own attributes (self.cached_k, self.cached_v), as the statement "
                   "says, and append every new token to it.")
