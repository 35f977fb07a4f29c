"""Hidden tests for the fixed CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)."""

import torch

from autograder.harness import checks, substance
from autograder.suites import adapters as A
from autograder.suites.mistakes import causal_attention_mistakes


def inputs(t=A.CONTEXT, seed=110, dtype=torch.float64):
    return A.randn(A.B, t, A.D_IN, seed=seed, dtype=dtype)


def test_computes_attention(student):
    """The gate, on a sequence as long as the context."""
    x = inputs(seed=140)
    substance.attention_module(lambda params: A.causal_attention(student, [x], params=params)[0][0],
                               A.causal_attention_parameters(), queries="W_query", keys="W_key")


def test_runs_and_returns_the_right_shape(student):
    x = inputs(7)
    (output,), _ = A.causal_attention(student, [x], params=A.causal_attention_parameters())
    checks.shape(output, (A.B, 7, A.D_OUT), "CausalAttention(x)")


def test_is_causal(student):
    x = inputs()
    outputs, _ = A.causal_attention(student, A.changed_tokens(x), params=A.causal_attention_parameters())
    checks.shape(outputs[0], (A.B, A.CONTEXT, A.D_OUT), "CausalAttention(x)")
    A.check_causal(A.influence(outputs), "Outputs that move when a later token changes")


def test_matches_causal_attention(student):
    params = A.causal_attention_parameters(bias=True)
    x = inputs(seed=112)
    (output,), _ = A.causal_attention(student, [x], params=params)
    checks.close(output, A.causal_attention_reference(params, x), "The output", "",
                 causal_attention_mistakes(params, x))


def test_sequences_shorter_than_the_context(student):
    """T tokens with a longer context give what the student's own module gives with context T."""
    params = A.causal_attention_parameters()
    xs = [inputs(t, seed=113 + t) for t in (1, 4)]
    outputs, _ = A.causal_attention(student, xs, params=params)
    for x, output in zip(xs, outputs):
        t = x.shape[1]
        (exact,), _ = A.causal_attention(student, [x], params=params, context=t)
        checks.same(output, exact, f"The output for {t} token(s) with context_length {A.CONTEXT}, against "
                     f"your own output with context_length {t}", "Slice the mask to the current length: mask[:T, :T].")


def test_eval_mode_is_deterministic(student):
    params = A.causal_attention_parameters()
    x = inputs(seed=120)
    outputs, _ = A.causal_attention(student, [x, x], params=params, dropout=0.5)
    hint = "Use nn.Dropout (off after model.eval()), not F.dropout with its default training=True."
    (plain,), _ = A.causal_attention(student, [x], params=params)
    checks.same(outputs[0], plain, "The output in eval mode with dropout=0.5, against your own output with "
                 "dropout=0", hint)
    checks.close(outputs[1], outputs[0], "Two calls in eval mode", hint)


def test_gradients_reach_input_and_weights(student):
    params = A.causal_attention_parameters(bias=True)
    x = inputs(seed=130)
    upstream = A.randn(A.B, A.CONTEXT, A.D_OUT, seed=131)
    _, reply = A.causal_attention(student, [x], params=params, grad_outputs=[[upstream]])
    A.check_gradients(reply, lambda weights, inputs: A.causal_attention(student, [inputs["x"]], params=weights)[0],
                      params, {"x": x}, [upstream])
