"""Hidden tests for CausalSelfAttention(d_model, num_heads, context_length, dropout, bias)."""

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers.common import (B, D_K, D_MODEL, H, MHA_CAUSES, SK, SQ, causal_mha,
                                              changed_tokens, check_causal, check_gradients, crash_hint,
                                              expect_value_error, has_bias, influence, mha_mistakes,
                                              mha_parameters, pick, randn, run_module, tril)


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    **MHA_CAUSES,
    "not_sliced": "the [context_length, context_length] mask buffer is not sliced to [:T, :T].",
    "fixed_buffer": "whatever the context_length: size it by context_length.",
    "dropout_module": "Use an nn.Dropout module on the weights: it is active in train() mode and off in eval() mode.",
    "divisible": "Raise ValueError when d_model % num_heads != 0.",
    "per_head_weights": "Return the per-head weights [B, H, T, T].",
    "weights_before_dropout": "Return the weights before dropout (their rows sum to 1).",
    "dropout_on_output": "The statement puts dropout on the attention weights, before they multiply v.",
    "too_long": ("Raise ValueError at the start of forward when T > context_length: there is no mask (and no "
                 "position) for it."),
    "buffer_size": "Size the mask buffer by context_length (not a fixed number) and slice it to T.",
    "mask_parameter": "The mask is not learned: register it with self.register_buffer, not nn.Parameter.",
    "register_buffer": "Create the causal mask once in __init__ with self.register_buffer(...).",
}


def causal_self_attention(student, inputs, *, params, num_heads=H, context=SK + 2, dropout=0.0,
                          train=False, grad_outputs=None):
    """Run the student's CausalSelfAttention on each input; returns ([(output, weights)], reply)."""
    d_model = inputs[0].shape[-1]
    bias = has_bias(params)
    with crash_hint(lambda: mask_buffer_cause(student, d_model, num_heads, context)):
        reply = run_module(student, "CausalSelfAttention", (d_model, num_heads, context),
                           {"dropout": dropout, "bias": bias}, params=params, train=train,
                           dtype=inputs[0].dtype, calls=[((x,), {}) for x in inputs],
                           grad_outputs=grad_outputs)
    pairs = []
    for output in reply["outputs"]:
        result, weights = checks.pair(output, "CausalSelfAttention.forward")
        pairs.append((checks.tensor(result, "The output"), checks.tensor(weights, "The weights")))
    return pairs, reply


def mask_buffer_cause(student, d_model, num_heads, context):
    """Why a CausalSelfAttention's mask did not fit, read from the sizes of its square buffers."""
    built = student.module("CausalSelfAttention", (d_model, num_heads, context), {})
    sizes = {buffer.shape[-1] for buffer in built["buffers"].values()
             if buffer.dim() >= 2 and buffer.shape[-1] == buffer.shape[-2]}
    if context in sizes:
        return CAUSES["not_sliced"]
    if sizes:
        return f"the mask buffer is {sorted(sizes)[0]} x {sorted(sizes)[0]} " + CAUSES["fixed_buffer"]
    return ""


CONTEXT = SK + 2


def x_of(t=SK, seed=300, dtype=torch.float64):
    return randn(B, t, D_MODEL, seed=seed, dtype=dtype)


def test_computes_attention(student):
    """The gate, on a sequence as long as the context."""
    x = x_of(CONTEXT, seed=301)
    substance.attention_module(lambda params: causal_self_attention(student, [x], params=params)[0][0][0],
                               mha_parameters(seed=302))


def test_rejects_indivisible_d_model(student):
    expect_value_error(lambda: student.module("CausalSelfAttention", (10, 3, CONTEXT)),
                         "CausalSelfAttention(10, 3, ...)", CAUSES["divisible"])


def test_shapes(student):
    [(output, weights)], _ = causal_self_attention(student, [x_of()], params=mha_parameters())
    checks.shape(output, (B, SK, D_MODEL), "The output")
    checks.shape(weights, (B, H, SK, SK), "The weights", CAUSES["per_head_weights"])


def test_matches_torch_causal_attention(student):
    params, x = mha_parameters(seed=310), x_of(seed=311)
    [(output, weights)], _ = causal_self_attention(student, [x], params=params)
    want_output, want_weights = causal_mha(params, H, x)
    mistakes = mha_mistakes(params, H, x, x, x, tril(x.shape[1]))
    checks.close(weights, want_weights, "The causal weights", "", pick(mistakes, 1))
    checks.close(output, want_output, "The output", "", pick(mistakes, 0))


def test_is_causal(student):
    params, x = mha_parameters(seed=320), x_of(seed=321)
    pairs, _ = causal_self_attention(student, changed_tokens(x), params=params)
    checks.shape(pairs[0][0], x.shape, "The output")
    check_causal(influence([output for output, _ in pairs]), "Outputs that move when a later token changes")


def without_dropout(student, x, params):
    """The student's own (output, weights) with dropout=0."""
    return causal_self_attention(student, [x], params=params)[0][0]


def test_eval_mode_is_deterministic(student):
    params, x = mha_parameters(seed=330), x_of(seed=331)
    [(first, _), (second, _)], _ = causal_self_attention(student, [x, x], params=params, dropout=0.5)
    checks.same(first, without_dropout(student, x, params)[0],
                 "The output in eval mode with dropout=0.5, against your own output with dropout=0", CAUSES["dropout_module"])
    checks.close(second, first, "Two calls in eval mode", CAUSES["dropout_module"])


def test_dropout_in_training_mode(student):
    params, x = mha_parameters(seed=340), x_of(seed=341)
    [(output, weights)], _ = causal_self_attention(student, [x], params=params, dropout=0.5, train=True)
    plain_output, plain_weights = without_dropout(student, x, params)
    checks.require(not checks.is_close(output, plain_output),
                   "With dropout=0.5 in training mode the output equals the output without dropout.",
                   CAUSES["dropout_module"])
    checks.same(weights, plain_weights, "The returned weights in training mode, against your own weights "
                 "with dropout=0", CAUSES["weights_before_dropout"])


def test_dropout_acts_on_the_attention_weights(student):
    """Position 0 attends only to itself, so with dropout on the weights each head passes on either
    nothing or twice its value vector (p=0.5): the output there is one of 2^H combinations.
    Dropout on the output, or on the merged heads, zeroes single features instead."""
    params, x = mha_parameters(seed=345), x_of(seed=346)
    [(output, _)], _ = causal_self_attention(student, [x], params=params, dropout=0.5, train=True)
    checks.shape(output, x.shape, "The output")
    value = torch.nn.functional.linear(x[:, 0], params["W_v.weight"], params["W_v.bias"])   # [B, D]
    heads = value.view(B, H, D_K)
    for b in range(B):
        candidates = []
        for kept in range(2 ** H):
            keep = torch.tensor([(kept >> h) & 1 for h in range(H)], dtype=value.dtype)
            context = (heads[b] * 2 * keep[:, None]).reshape(-1)
            candidates.append(torch.nn.functional.linear(context, params["W_o.weight"], params["W_o.bias"]))
        checks.require(any(checks.is_close(output[b, 0], candidate) for candidate in candidates),
                       "In training mode, the output at position 0 is not what dropout on the attention "
                       "weights gives (each head's weight kept and doubled, or dropped).",
                       CAUSES["dropout_on_output"])


def test_rejects_sequences_longer_than_the_context(student):
    expect_value_error(lambda: run_module(student, "CausalSelfAttention", (D_MODEL, H, CONTEXT), {},
                                              params=mha_parameters(), calls=[((x_of(CONTEXT + 1),), {})]),
                         "A sequence longer than context_length",
                         CAUSES["too_long"])


def test_other_context_lengths(student):
    """Longer than anything in the notebook: the mask must come from context_length and T."""
    params = mha_parameters(seed=350)
    for context, t in ((SQ, SQ), (24, 17), (96, 80)):
        x = x_of(t, seed=351 + t)
        [(output, weights)], _ = causal_self_attention(student, [x], params=params, context=context)
        checks.shape(weights, (B, H, t, t), f"The weights for {t} tokens with context_length={context}")
        checks.exactly_zero_where(weights, ~tril(t), f"Weights on future positions for {t} tokens with "
                                  f"context_length={context}",
                                  CAUSES["buffer_size"])
        checks.rows_sum_to_one(weights, f"The weights for {t} tokens")


def test_mask_is_a_buffer(student):
    built = student.module("CausalSelfAttention", (D_MODEL, H, CONTEXT), {})
    extra = sorted(set(built["parameters"]) - set(mha_parameters()))
    checks.require(not extra, f"The module has trainable parameters besides W_q...W_o: {', '.join(extra)}.",
                   CAUSES["mask_parameter"])
    sizes = [tuple(buffer.shape[-2:]) for buffer in built["buffers"].values() if buffer.dim() >= 2]
    checks.require((CONTEXT, CONTEXT) in sizes,
                   f"The module has no [context_length, context_length] buffer (context_length={CONTEXT}); "
                   f"its buffers are {sizes or 'none'}.",
                   CAUSES["buffer_size"] if sizes else CAUSES["register_buffer"])


def test_gradients_reach_input_and_parameters(student):
    params, x = mha_parameters(seed=360), x_of(seed=361)
    upstream = [randn(B, SK, D_MODEL, seed=362), randn(B, H, SK, SK, seed=363)]
    _, reply = causal_self_attention(student, [x], params=params, grad_outputs=[upstream])
    check_gradients(reply, lambda weights, inputs: causal_self_attention(
        student, [inputs["x"]], params=weights)[0][0], params, {"x": x}, upstream)
