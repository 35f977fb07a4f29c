"""Hidden tests for MultiHeadAttention(d_model, num_heads, bias=True).

Its forward calls the notebook's split_heads and merge_heads, an exercise of their own (BUILT_ON): an output
is also accepted against the reference MultiHeadAttention built on the student's own split_heads and
merge_heads (checks.built_on), so a slip in them costs the heads exercise's points alone."""

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers.common import (B, D_MODEL, H, MHA_CAUSES, PROJECTIONS, SK, SQ, check_gradients,
                                              crash_hint, expect_value_error, has_bias, mha_mistakes,
                                              mha_parameters, pick, randn, random_mask, run_module, torch_mha,
                                              tril)


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    **MHA_CAUSES,
    "cross_attention": ("Keys and values may be longer than the queries (cross-attention): take each tensor's own "
                        "length when splitting heads."),
    "divisible": "Raise ValueError when d_model % num_heads != 0.",
    "projections": "Create W_q, W_k, W_v, W_o = nn.Linear(d_model, d_model, bias=bias).",
    "bias": "Pass bias=bias to every nn.Linear.",
    "per_head_weights": "Return the per-head weights [B, H, Sq, Sk].",
    "key_length": "Use the key/value length (Sk) for keys and values, not the query length.",
    "dtype": "Avoid hard-coded dtypes such as .float() or torch.tensor(..., dtype=torch.float32).",
}


# The earlier exercises' functions its answers may call (checks.built_on).
BUILT_ON = {"heads": ("split_heads", "merge_heads")}


def build_mha(student, d_model=D_MODEL, num_heads=H, bias=True, **options):
    """Construct the student's MultiHeadAttention (nothing else); returns the probe's reply."""
    kwargs = {} if bias is True else {"bias": bias}
    return student.module("MultiHeadAttention", (d_model, num_heads), kwargs, **options)


def mha(student, query, key, value, mask=None, *, params, num_heads=H, grad_outputs=None):
    """Run the student's module with the given weights; returns ((output, weights), reply)."""
    kwargs = {} if mask is None else {"mask": mask}
    bias = has_bias(params)
    with crash_hint(CAUSES["cross_attention"]):
        reply = run_module(student, "MultiHeadAttention", (query.shape[-1], num_heads),
                           {} if bias else {"bias": False}, params=params, dtype=query.dtype,
                           calls=[((query, key, value), kwargs)],
                           grad_outputs=None if grad_outputs is None else [grad_outputs])
    output, weights = checks.pair(reply["outputs"][0], "MultiHeadAttention.forward")
    checks.tensor(output, "The output")
    checks.tensor(weights, "The attention weights")
    return (output, weights), reply


def reference_mha(reference, params, num_heads, dtype=torch.float64):
    d_model = params["W_q.weight"].shape[0]
    module = reference["MultiHeadAttention"](d_model, num_heads, bias=has_bias(params)).to(dtype)
    with torch.no_grad():
        for name, value in params.items():
            module.get_parameter(name).copy_(value)
    return module


def expected(student, reference, answer, right, params, query, key, value, mask=None, num_heads=H):
    """What (output, weights) should be: `right`, or the answer where it is the reference's built on the
    student's own split_heads and merge_heads (a slip there is the heads exercise's)."""
    def on_functions(functions):
        with checks.calling(reference, functions):
            return tuple(reference_mha(reference, params, num_heads, query.dtype)(query, key, value, mask=mask))
    return checks.built_on(student, BUILT_ON, answer, right, on_functions)



def self_attention_inputs(dtype=torch.float64, seed=30):
    return randn(B, SQ, D_MODEL, dtype=dtype, seed=seed)


def cross_attention_inputs(dtype=torch.float64, seed=40):
    return (randn(B, SQ, D_MODEL, dtype=dtype, seed=seed),
            randn(B, SK, D_MODEL, dtype=dtype, seed=seed + 1),
            randn(B, SK, D_MODEL, dtype=dtype, seed=seed + 2))


def test_computes_attention(student):
    """The gate: keys of their own, as long as the queries."""
    query, key = self_attention_inputs(seed=45), self_attention_inputs(seed=46)

    def run(params, keys=key):
        return mha(student, query, keys, query, params=params)[0][0]
    params = mha_parameters(seed=47)
    substance.attention_module(run, params, keys_changed=lambda: run(params, self_attention_inputs(seed=48)))


def test_rejects_indivisible_d_model(student):
    expect_value_error(lambda: build_mha(student, d_model=10, num_heads=3), "MultiHeadAttention(10, 3)",
                         CAUSES["divisible"])


def test_has_four_projections(student):
    parameters = build_mha(student)["parameters"]
    for name in PROJECTIONS:
        for part, shape in (("weight", (D_MODEL, D_MODEL)), ("bias", (D_MODEL,))):
            checks.require(f"{name}.{part}" in parameters,
                           f"MultiHeadAttention({D_MODEL}, {H}) has no parameter {name}.{part}.",
                           CAUSES["projections"])
            checks.shape(parameters[f"{name}.{part}"], shape, f"{name}.{part}")


def test_bias_flag(student):
    without = build_mha(student, bias=False)["parameters"]
    with_bias = build_mha(student, bias=True)["parameters"]
    checks.require(not any(name.endswith(".bias") for name in without),
                   "MultiHeadAttention(..., bias=False) still has bias parameters.",
                   CAUSES["bias"])
    checks.require(all(f"{name}.bias" in with_bias for name in PROJECTIONS),
                   "MultiHeadAttention(..., bias=True) is missing bias parameters.",
                   CAUSES["bias"])


def test_self_attention_shapes(student):
    x = self_attention_inputs()
    (output, weights), _ = mha(student, x, x, x, params=mha_parameters())
    checks.shape(output, (B, SQ, D_MODEL), "The output")
    checks.shape(weights, (B, H, SQ, SQ), "The weights", CAUSES["per_head_weights"])


def test_cross_attention_shapes(student):
    query, key, value = cross_attention_inputs()
    (output, weights), _ = mha(student, query, key, value, params=mha_parameters())
    hint = CAUSES["key_length"]
    checks.shape(output, (B, SQ, D_MODEL), "The cross-attention output", hint)
    checks.shape(weights, (B, H, SQ, SK), "The cross-attention weights", hint)


def _compare_with_torch(student, reference, query, key, value, mask, what):
    params = mha_parameters()
    (output, weights), _ = mha(student, query, key, value, mask, params=params)
    want_output, want_weights = expected(student, reference, (output, weights),
                                         torch_mha(params, H, query, key, value, mask), params, query, key, value, mask)
    mistakes = mha_mistakes(params, H, query, key, value, mask)
    checks.close(weights, want_weights, f"The {what} weights", "", pick(mistakes, 1))
    checks.close(output, want_output, f"The {what} output", "", pick(mistakes, 0))


def test_matches_torch_multihead_attention(student, reference):
    x = self_attention_inputs()
    _compare_with_torch(student, reference, x, x, x, None, "self-attention")


def test_matches_torch_with_causal_mask(student, reference):
    x = self_attention_inputs(seed=31)
    _compare_with_torch(student, reference, x, x, x, tril(SQ), "causal self-attention")


def test_matches_torch_cross_attention(student, reference):
    _compare_with_torch(student, reference, *cross_attention_inputs(), None, "cross-attention")


def test_matches_reference_without_bias(student, reference):
    query, key, value = cross_attention_inputs(seed=50)
    params = mha_parameters(bias=False, seed=60)
    mask = random_mask(B, 1, SQ, SK, seed=6)
    (output, weights), _ = mha(student, query, key, value, mask, params=params)
    with torch.no_grad():
        right = tuple(reference_mha(reference, params, H)(query, key, value, mask=mask))
    want, _ = expected(student, reference, (output, weights), right, params, query, key, value, mask)
    checks.close(output, want, "The output with bias=False and a [B, 1, Sq, Sk] mask", "",
                 pick(mha_mistakes(params, H, query, key, value, mask), 0))


def test_weights_rows_sum_to_one(student):
    x = self_attention_inputs(seed=32)
    (_, weights), _ = mha(student, x, x, x, params=mha_parameters())
    checks.shape(weights, (B, H, SQ, SQ), "The weights")
    checks.rows_sum_to_one(weights, "The attention weights", mistakes=pick(mha_mistakes(
        mha_parameters(), H, x, x, x), 1))


def test_gradients_reach_inputs_and_parameters(student):
    query, key, value = cross_attention_inputs(seed=70)
    params = mha_parameters(seed=80)
    upstream = [randn(B, SQ, D_MODEL, seed=90), randn(B, H, SQ, SK, seed=91)]
    _, reply = mha(student, query, key, value, params=params, grad_outputs=upstream)
    check_gradients(reply, lambda weights, inputs: mha(student, *inputs.values(), params=weights)[0],
                      params, {"query": query, "key": key, "value": value}, upstream)


def test_keeps_float32_and_float64(student):
    for dtype in (torch.float32, torch.float64):
        x = self_attention_inputs(dtype=dtype)
        (output, weights), _ = mha(student, x, x, x, params=mha_parameters(dtype=dtype))
        hint = CAUSES["dtype"]
        checks.dtype(output, dtype, "The output", hint)
        checks.dtype(weights, dtype, "The weights", hint)
