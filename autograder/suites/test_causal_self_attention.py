"""Hidden tests for CausalSelfAttention(d_model, num_heads, context_length, dropout, bias)."""

import torch

from autograder.harness import checks, substance
from autograder.suites import adapters as A
from autograder.suites.mistakes import mha_mistakes, pick

CONTEXT = A.SK + 2
DROPOUT_HINT = "Use an nn.Dropout module on the weights: it is active in train() mode and off in eval() mode."


def x_of(t=A.SK, seed=300, dtype=torch.float64):
    return A.randn(A.B, t, A.D_MODEL, seed=seed, dtype=dtype)


def test_computes_attention(student):
    """The gate, on a sequence as long as the context."""
    x = x_of(CONTEXT, seed=301)
    substance.attention_module(lambda params: A.causal_self_attention(student, [x], params=params)[0][0][0],
                               A.mha_parameters(seed=302))


def test_rejects_indivisible_d_model(student):
    A.expect_value_error(lambda: student.module("CausalSelfAttention", (10, 3, CONTEXT)),
                         "CausalSelfAttention(10, 3, ...)", "Raise ValueError when d_model % num_heads != 0.")


def test_shapes(student):
    [(output, weights)], _ = A.causal_self_attention(student, [x_of()], params=A.mha_parameters())
    checks.shape(output, (A.B, A.SK, A.D_MODEL), "The output")
    checks.shape(weights, (A.B, A.H, A.SK, A.SK), "The weights", "Return the per-head weights [B, H, T, T].")


def test_matches_torch_causal_attention(student):
    params, x = A.mha_parameters(seed=310), x_of(seed=311)
    [(output, weights)], _ = A.causal_self_attention(student, [x], params=params)
    want_output, want_weights = A.causal_mha(params, A.H, x)
    mistakes = mha_mistakes(params, A.H, x, x, x, A.tril(x.shape[1]))
    checks.close(weights, want_weights, "The causal weights", "", pick(mistakes, 1))
    checks.close(output, want_output, "The output", "", pick(mistakes, 0))


def test_is_causal(student):
    params, x = A.mha_parameters(seed=320), x_of(seed=321)
    pairs, _ = A.causal_self_attention(student, A.changed_tokens(x), params=params)
    checks.shape(pairs[0][0], x.shape, "The output")
    A.check_causal(A.influence([output for output, _ in pairs]), "Outputs that move when a later token changes")


def without_dropout(student, x, params):
    """The student's own (output, weights) with dropout=0."""
    return A.causal_self_attention(student, [x], params=params)[0][0]


def test_eval_mode_is_deterministic(student):
    params, x = A.mha_parameters(seed=330), x_of(seed=331)
    [(first, _), (second, _)], _ = A.causal_self_attention(student, [x, x], params=params, dropout=0.5)
    checks.same(first, without_dropout(student, x, params)[0],
                 "The output in eval mode with dropout=0.5, against your own output with dropout=0", DROPOUT_HINT)
    checks.close(second, first, "Two calls in eval mode", DROPOUT_HINT)


def test_dropout_in_training_mode(student):
    params, x = A.mha_parameters(seed=340), x_of(seed=341)
    [(output, weights)], _ = A.causal_self_attention(student, [x], params=params, dropout=0.5, train=True)
    plain_output, plain_weights = without_dropout(student, x, params)
    checks.require(not checks.is_close(output, plain_output),
                   "With dropout=0.5 in training mode the output equals the output without dropout.",
                   DROPOUT_HINT)
    checks.same(weights, plain_weights, "The returned weights in training mode, against your own weights "
                 "with dropout=0", "Return the weights before dropout (their rows sum to 1).")


def test_dropout_acts_on_the_attention_weights(student):
    """Position 0 attends only to itself, so with dropout on the weights each head passes on either
    nothing or twice its value vector (p=0.5): the output there is one of 2^H combinations.
    Dropout on the output, or on the merged heads, zeroes single features instead."""
    params, x = A.mha_parameters(seed=345), x_of(seed=346)
    [(output, _)], _ = A.causal_self_attention(student, [x], params=params, dropout=0.5, train=True)
    checks.shape(output, x.shape, "The output")
    value = torch.nn.functional.linear(x[:, 0], params["W_v.weight"], params["W_v.bias"])   # [B, D]
    heads = value.view(A.B, A.H, A.D_K)
    for b in range(A.B):
        candidates = []
        for kept in range(2 ** A.H):
            keep = torch.tensor([(kept >> h) & 1 for h in range(A.H)], dtype=value.dtype)
            context = (heads[b] * 2 * keep[:, None]).reshape(-1)
            candidates.append(torch.nn.functional.linear(context, params["W_o.weight"], params["W_o.bias"]))
        checks.require(any(checks.is_close(output[b, 0], candidate) for candidate in candidates),
                       "In training mode, the output at position 0 is not what dropout on the attention "
                       "weights gives (each head's weight kept and doubled, or dropped).",
                       "The statement puts dropout on the attention weights, before they multiply v.")


def test_rejects_sequences_longer_than_the_context(student):
    A.expect_value_error(lambda: A.run_module(student, "CausalSelfAttention", (A.D_MODEL, A.H, CONTEXT), {},
                                              params=A.mha_parameters(), calls=[((x_of(CONTEXT + 1),), {})]),
                         "A sequence longer than context_length",
                         "Raise ValueError at the start of forward when T > context_length: there is no mask "
                         "(and no position) for it.")


def test_other_context_lengths(student):
    """Longer than anything in the notebook: the mask must come from context_length and T."""
    params = A.mha_parameters(seed=350)
    for context, t in ((A.SQ, A.SQ), (24, 17), (96, 80)):
        x = x_of(t, seed=351 + t)
        [(output, weights)], _ = A.causal_self_attention(student, [x], params=params, context=context)
        checks.shape(weights, (A.B, A.H, t, t), f"The weights for {t} tokens with context_length={context}")
        checks.exactly_zero_where(weights, ~A.tril(t), f"Weights on future positions for {t} tokens with "
                                  f"context_length={context}",
                                  "Size the mask buffer by context_length (not a fixed number) and slice it to T.")
        checks.rows_sum_to_one(weights, f"The weights for {t} tokens")


def test_mask_is_a_buffer(student):
    built = student.module("CausalSelfAttention", (A.D_MODEL, A.H, CONTEXT), {})
    extra = sorted(set(built["parameters"]) - set(A.mha_parameters()))
    checks.require(not extra, f"The module has trainable parameters besides W_q...W_o: {', '.join(extra)}.",
                   "The mask is not learned: register it with self.register_buffer, not nn.Parameter.")
    sizes = [tuple(buffer.shape[-2:]) for buffer in built["buffers"].values() if buffer.dim() >= 2]
    checks.require((CONTEXT, CONTEXT) in sizes,
                   f"The module has no [context_length, context_length] buffer (context_length={CONTEXT}); "
                   f"its buffers are {sizes or 'none'}.",
                   "Size it by context_length." if sizes else
                   "Create the causal mask once in __init__ with self.register_buffer(...).")


def test_gradients_reach_input_and_parameters(student):
    params, x = A.mha_parameters(seed=360), x_of(seed=361)
    upstream = [A.randn(A.B, A.SK, A.D_MODEL, seed=362), A.randn(A.B, A.H, A.SK, A.SK, seed=363)]
    _, reply = A.causal_self_attention(student, [x], params=params, grad_outputs=[upstream])
    A.check_gradients(reply, lambda weights, inputs: A.causal_self_attention(
        student, [inputs["x"]], params=weights)[0][0], params, {"x": x}, upstream)
