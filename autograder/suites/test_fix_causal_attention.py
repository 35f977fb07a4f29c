"""Hidden tests for the fixed CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)."""

import math

import torch
import torch.nn.functional as F

from autograder.harness import checks, substance
from autograder.suites.helpers.common import (B, SHAPE_ERRORS, attention, changed_tokens, check_causal,
                                              check_gradients, crash_hint, has_bias, influence,
                                              linear_parameters, named, randn, run_module)


D_IN, D_OUT, CONTEXT = 5, 6, 9
CAUSAL_ATTENTION = ("W_query", "W_key", "W_value")

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "no_mask": "no mask at all (every token sees the future)",
    "only_future_nan": "a mask that blocks the past and keeps only the future, so the last position sees nothing "
                       "and gets NaN (masked_fill fills where its mask is True: that mask must be True above the "
                       "diagonal)",
    "only_future": "a mask that blocks the past and keeps only the future (masked_fill fills where its mask is "
                   "True, so that mask must be True above the diagonal: triu(diagonal=1))",
    "no_diagonal": "a mask that also hides the diagonal (a token may not see itself)",
    "scale_d_in": "scaling by sqrt(d_in), the input width, instead of sqrt(d_out), the key width",
    "buffer": "masked_fill needs a boolean mask of the scores' shape: make the buffer boolean and slice it to "
              "the current length, mask[:T, :T].",
    "not_sliced": "Slice the mask to the current length: mask[:T, :T].",
    "dropout": "Use nn.Dropout (off after model.eval()), not F.dropout with its default training=True.",
}


def causal_attention_parameters(bias=False, dtype=torch.float64, seed=100):
    return linear_parameters({name: (D_OUT, D_IN) for name in CAUSAL_ATTENTION}, bias, dtype, seed)


def causal_attention(student, inputs, *, params, context=CONTEXT, dropout=0.0, train=False,
                     grad_outputs=None):
    """Run the student's CausalAttention on each input in turn; returns (outputs, reply)."""
    bias = has_bias(params)
    with crash_hint(CAUSES["buffer"], SHAPE_ERRORS + ("boolean",)):
        reply = run_module(student, "CausalAttention", (D_IN, D_OUT, context),
                             {"dropout": dropout, "qkv_bias": bias}, params=params, train=train,
                             dtype=inputs[0].dtype, calls=[((x,), {}) for x in inputs],
                             grad_outputs=grad_outputs)
    outputs = reply["outputs"]
    for output in outputs:
        checks.tensor(output, "CausalAttention(x)")
    return outputs, reply


def projections(params, x):
    return [F.linear(x, params[f"{name}.weight"], params.get(f"{name}.bias")) for name in CAUSAL_ATTENTION]


def causal_attention_reference(params, x):
    return F.scaled_dot_product_attention(*projections(params, x), is_causal=True)


def named_mistakes(params, x):
    """What each named mistake gives: cause text -> output."""
    q, k, v = projections(params, x)
    t = x.shape[1]
    future = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)
    only_future = attention(q, k, v, future)[0]
    return named(CAUSES, no_mask=attention(q, k, v)[0],
                   only_future_nan=only_future.masked_fill(~future.any(-1)[:, None], float("nan")),
                   only_future=only_future, no_diagonal=attention(q, k, v, future.T)[0],
                   scale_d_in=attention(q, k, v, ~future, scale=1 / math.sqrt(x.shape[-1]))[0])


def inputs(t=CONTEXT, seed=110, dtype=torch.float64):
    return randn(B, t, D_IN, seed=seed, dtype=dtype)


def test_computes_attention(student):
    """The gate, on a sequence as long as the context."""
    x = inputs(seed=140)
    substance.attention_module(lambda params: causal_attention(student, [x], params=params)[0][0],
                               causal_attention_parameters(), queries="W_query", keys="W_key")


def test_runs_and_returns_the_right_shape(student):
    x = inputs(7)
    (output,), _ = causal_attention(student, [x], params=causal_attention_parameters())
    checks.shape(output, (B, 7, D_OUT), "CausalAttention(x)")


def test_is_causal(student):
    x = inputs()
    outputs, _ = causal_attention(student, changed_tokens(x), params=causal_attention_parameters())
    checks.shape(outputs[0], (B, CONTEXT, D_OUT), "CausalAttention(x)")
    check_causal(influence(outputs), "Outputs that move when a later token changes")


def test_matches_causal_attention(student):
    params = causal_attention_parameters(bias=True)
    x = inputs(seed=112)
    (output,), _ = causal_attention(student, [x], params=params)
    checks.close(output, causal_attention_reference(params, x), "The output", "",
                 named_mistakes(params, x))


def test_sequences_shorter_than_the_context(student):
    """T tokens with a longer context give what the student's own module gives with context T."""
    params = causal_attention_parameters()
    xs = [inputs(t, seed=113 + t) for t in (1, 4)]
    outputs, _ = causal_attention(student, xs, params=params)
    for x, output in zip(xs, outputs):
        t = x.shape[1]
        (exact,), _ = causal_attention(student, [x], params=params, context=t)
        checks.same(output, exact, f"The output for {t} token(s) with context_length {CONTEXT}, against "
                     f"your own output with context_length {t}", CAUSES["not_sliced"])


def test_eval_mode_is_deterministic(student):
    params = causal_attention_parameters()
    x = inputs(seed=120)
    outputs, _ = causal_attention(student, [x, x], params=params, dropout=0.5)
    hint = CAUSES["dropout"]
    (plain,), _ = causal_attention(student, [x], params=params)
    checks.same(outputs[0], plain, "The output in eval mode with dropout=0.5, against your own output with "
                 "dropout=0", hint)
    checks.close(outputs[1], outputs[0], "Two calls in eval mode", hint)


def test_gradients_reach_input_and_weights(student):
    params = causal_attention_parameters(bias=True)
    x = inputs(seed=130)
    upstream = randn(B, CONTEXT, D_OUT, seed=131)
    _, reply = causal_attention(student, [x], params=params, grad_outputs=[[upstream]])
    check_gradients(reply, lambda weights, inputs: causal_attention(student, [inputs["x"]], params=weights)[0],
                      params, {"x": x}, [upstream])
