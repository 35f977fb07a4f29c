"""Hidden tests for CausalSelfAttention(d_model, num_heads, context_length, dropout, bias)."""

import torch

from autograder.harness import checks
from autograder.student import StudentError
from autograder.suites import adapters as A

CONTEXT = A.SK + 2
MASK_HINT = ("Keep a [context_length, context_length] causal mask as a buffer and slice it to "
             "[:T, :T] in forward; True = may attend (or invert it for masked_fill).")
DROPOUT_HINT = "Use an nn.Dropout module on the weights: it is active in train() mode and off in eval() mode."


def x_of(t=A.SK, seed=300, dtype=torch.float64):
    return A.randn(A.B, t, A.D_MODEL, seed=seed, dtype=dtype)


def test_rejects_indivisible_d_model(student):
    A.expect_value_error(student, "CausalSelfAttention", (10, 3, CONTEXT), "CausalSelfAttention(10, 3, ...)",
                         "Raise ValueError when d_model % num_heads != 0.")


def test_shapes(student):
    [(output, weights)], _ = A.causal_self_attention(student, [x_of()], params=A.mha_parameters())
    checks.shape(output, (A.B, A.SK, A.D_MODEL), "The output")
    checks.shape(weights, (A.B, A.H, A.SK, A.SK), "The weights", "Return the per-head weights [B, H, T, T].")


def test_matches_torch_causal_attention(student):
    params, x = A.mha_parameters(seed=310), x_of(seed=311)
    [(output, weights)], _ = A.causal_self_attention(student, [x], params=params)
    want_output, want_weights = A.causal_mha(params, A.H, x)
    checks.close(weights, want_weights, "The causal weights", MASK_HINT + " Scale by sqrt(d_k) of one head.")
    checks.close(output, want_output, "The output", "The weights are right: check the merge of heads and W_o.")


def test_is_causal(student):
    params, x = A.mha_parameters(seed=320), x_of(seed=321)
    changed = x.clone()
    changed[:, 4:] = A.randn(A.B, A.SK - 4, A.D_MODEL, seed=322)
    [(before, _), (after, _)], _ = A.causal_self_attention(student, [x, changed], params=params)
    checks.shape(before, x.shape, "The output")
    checks.close(after[:, :4], before[:, :4], "Outputs at positions 0-3 after changing positions 4 and later",
                 MASK_HINT)


def test_eval_mode_is_deterministic(student):
    params, x = A.mha_parameters(seed=330), x_of(seed=331)
    [(first, _), (second, _)], _ = A.causal_self_attention(student, [x, x], params=params, dropout=0.5)
    checks.close(first, A.causal_mha(params, A.H, x)[0], "The output in eval mode with dropout=0.5", DROPOUT_HINT)
    checks.close(second, first, "Two calls in eval mode", DROPOUT_HINT)


def test_dropout_in_training_mode(student):
    params, x = A.mha_parameters(seed=340), x_of(seed=341)
    [(output, weights)], _ = A.causal_self_attention(student, [x], params=params, dropout=0.5, train=True)
    want_output, want_weights = A.causal_mha(params, A.H, x)
    checks.require(not checks.is_close(output, want_output),
                   "With dropout=0.5 in training mode the output equals the output without dropout.",
                   DROPOUT_HINT + " Apply it to the attention weights.")
    checks.close(weights, want_weights, "The returned weights in training mode",
                 "Return the weights before dropout (their rows sum to 1).")


def test_rejects_sequences_longer_than_the_context(student):
    try:
        A.run_module(student, "CausalSelfAttention", (A.D_MODEL, A.H, CONTEXT), {}, params=A.mha_parameters(),
                     calls=[((x_of(CONTEXT + 1),), {})])
    except StudentError as error:
        checks.require(error.kind == "ValueError",
                       f"A sequence longer than context_length raised {error.kind}, not ValueError.",
                       "Check T against context_length at the start of forward and raise a ValueError "
                       "that names both numbers.")
        return
    raise checks.Feedback("A sequence longer than context_length was accepted.",
                          "Raise ValueError: there is no mask (and no position) for it.")


def test_other_context_lengths(student):
    params = A.mha_parameters(seed=350)
    for context, t in ((A.SQ, A.SQ), (24, 17)):
        x = x_of(t, seed=351 + t)
        [(output, _)], _ = A.causal_self_attention(student, [x], params=params, context=context)
        checks.close(output, A.causal_mha(params, A.H, x)[0],
                     f"The output for {t} tokens with context_length={context}",
                     "Size the mask buffer by context_length (not a fixed number) and slice it to T.")


def test_mask_is_a_buffer(student):
    _, reply = A.causal_self_attention(student, [x_of()], params=A.mha_parameters())
    extra = sorted(set(reply["parameters"]) - set(A.mha_parameters()))
    checks.require(not extra, f"The module has trainable parameters besides W_q...W_o: {', '.join(extra)}.",
                   "The mask is not learned: register it with self.register_buffer, not nn.Parameter.")
    sizes = [tuple(buffer.shape[-2:]) for buffer in reply["buffers"].values() if buffer.dim() >= 2]
    checks.require((CONTEXT, CONTEXT) in sizes,
                   "The module has no [context_length, context_length] buffer.",
                   "Create the causal mask once in __init__ with self.register_buffer(...).")


def test_gradients_reach_input_and_parameters(student, reference):
    params, x = A.mha_parameters(seed=360), x_of(seed=361)
    upstream = [A.randn(A.B, A.SK, A.D_MODEL, seed=362), A.randn(A.B, A.H, A.SK, A.SK, seed=363)]
    _, reply = A.causal_self_attention(student, [x], params=params, grad_outputs=[upstream])
    module = reference["CausalSelfAttention"](A.D_MODEL, A.H, CONTEXT).to(torch.float64)
    expected = A.reference_gradients(
        lambda weights, inputs: torch.func.functional_call(module, weights, (inputs,)), params, x, upstream)
    A.check_gradients(reply, expected, MASK_HINT)
