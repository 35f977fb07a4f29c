"""Hidden tests for scaled_dot_product_attention(q, k, v, mask=None) -> (output, weights)."""

import torch

from autograder.harness import checks
from autograder.suites import adapters as A
from autograder.suites.mistakes import pick, sdpa_mistakes

TRANSPOSE_HINT = "Transpose only the last two dimensions of k: k.transpose(-2, -1)."


def test_shapes_with_any_leading_dims(student):
    for leading in [(), (A.B,), (A.B, A.H), (A.B, 2, A.H)]:
        q, k, v = A.qkv(leading)
        (output, weights), _ = A.sdpa(student, q, k, v)
        where = f" for inputs with {len(leading)} leading dimension(s)"
        checks.shape(output, (*leading, A.SQ, A.D_V), "The output" + where, TRANSPOSE_HINT)
        checks.shape(weights, (*leading, A.SQ, A.SK), "The weights" + where, TRANSPOSE_HINT)


def test_weights_rows_sum_to_one(student):
    q, k, v = A.qkv()
    (_, weights), _ = A.sdpa(student, q, k, v)
    checks.shape(weights, (A.B, A.H, A.SQ, A.SK), "The weights")
    checks.rows_sum_to_one(weights, "Attention weights",
                           "Is the softmax taken over the last dimension (the keys)?")


def test_matches_torch_attention(student):
    q, k, v = A.qkv()
    (output, weights), _ = A.sdpa(student, q, k, v)
    mistakes = sdpa_mistakes(q, k, v)
    checks.close(weights, A.torch_weights(q, k), "The attention weights",
                 "Check the scaling (1/sqrt(d_k)) and the softmax dimension.", pick(mistakes, 1))
    checks.close(output, A.torch_attention(q, k, v), "The output",
                 "The weights are right, so check the product with v.", pick(mistakes, 0))


def test_matches_torch_attention_with_mask(student):
    q, k, v = A.qkv()
    mask = A.random_mask(A.B, A.H, A.SQ, A.SK)
    (output, _), _ = A.sdpa(student, q, k, v, mask)
    checks.close(output, A.torch_attention(q, k, v, mask), "The output with a mask",
                 "Block the positions where the mask is False before the softmax.",
                 pick(sdpa_mistakes(q, k, v, mask), 0))


def test_masked_weights_are_exactly_zero(student):
    q, k, v = A.qkv()
    mask = A.random_mask(A.B, A.H, A.SQ, A.SK, seed=1)
    (_, weights), _ = A.sdpa(student, q, k, v, mask)
    checks.shape(weights, mask.shape, "The weights")
    checks.exactly_zero_where(weights, ~mask, "Weights on blocked keys",
                              "True in the mask means 'may attend'; fill the blocked scores with -inf "
                              "(or a very negative number) before the softmax.")


def test_mask_broadcasts_over_batch_and_heads(student):
    q, k, v = A.qkv()
    for mask, kind in [(A.random_mask(A.SQ, A.SK, seed=2), "[Sq, Sk]"),
                       (A.random_mask(A.B, 1, 1, A.SK, seed=3), "[B, 1, 1, Sk]")]:
        (output, _), _ = A.sdpa(student, q, k, v, mask)
        checks.close(output, A.torch_attention(q, k, v, mask), f"The output with a {kind} mask",
                     "Let the mask broadcast against the scores (masked_fill or torch.where do).",
                     pick(sdpa_mistakes(q, k, v, mask), 0))


def test_fully_masked_row_gives_zeros(student):
    q, k, v = A.qkv()
    mask = A.random_mask(A.B, A.H, A.SQ, A.SK, seed=4)
    mask[:, :, 0] = False  # the first query may attend to nothing
    (output, weights), _ = A.sdpa(student, q, k, v, mask)
    hint = ("A query with no allowed key should get weights 0 and output 0 (as PyTorch 2.13 does); "
            "softmax over a row of -inf gives NaN, so replace it (torch.nan_to_num, torch.where).")
    checks.finite(output, "The output", hint)
    checks.finite(weights, "The weights", hint)
    checks.close(weights[:, :, 0], torch.zeros_like(weights[:, :, 0]), "The weights of the fully masked row", hint)
    checks.close(output, A.torch_attention(q, k, v, mask), "The output", hint,
                 pick(sdpa_mistakes(q, k, v, mask), 0))


def test_large_scores_stay_finite(student):
    q, k, v = A.qkv(dtype=torch.float32, seed=8)
    q = q * 300  # scores in the thousands: exp() overflows float32 unless the maximum is subtracted
    (output, weights), _ = A.sdpa(student, q, k, v)
    hint = ("A hand-written softmax must subtract each row's maximum before exp() "
            "(torch.softmax does this for you).")
    checks.finite(weights, "The weights for large scores", hint)
    # Finite but wrong: name a known mistake (a missing scaling, say) rather than the softmax.
    checks.close(output, A.torch_attention(q, k, v), "The output for large scores", "",
                 pick(sdpa_mistakes(q, k, v), 0))


def test_keeps_float32_and_float64(student):
    for dtype in (torch.float32, torch.float64):
        q, k, v = A.qkv(dtype=dtype)
        (output, weights), _ = A.sdpa(student, q, k, v)
        hint = "Avoid hard-coded dtypes (torch.tensor(..., dtype=torch.float32), .float())."
        checks.dtype(output, dtype, "The output", hint)
        checks.dtype(weights, dtype, "The weights", hint)


def test_gradients_reach_q_k_v(student):
    q, k, v = A.qkv()
    mask = A.random_mask(A.B, A.H, A.SQ, A.SK, seed=5)
    upstream = [A.randn(A.B, A.H, A.SQ, A.D_V, seed=20), A.randn(A.B, A.H, A.SQ, A.SK, seed=21)]
    _, grads = A.sdpa(student, q, k, v, mask, grad_outputs=upstream)
    sources = [t.clone().requires_grad_() for t in (q, k, v)]
    weights = A.torch_weights(sources[0], sources[1], mask)
    expected = torch.autograd.grad([weights @ sources[2], weights], sources, upstream)
    for name, got, want in zip("qkv", grads, expected):
        checks.require(got is not None, f"No gradient reaches {name}.",
                       "Is something detached, converted to NumPy, or rebuilt with torch.tensor(...)?")
        checks.close(got, want, f"The gradient with respect to {name}",
                     "An in-place operation or a detached step breaks the backward pass.")


def test_matches_reference_solution(student, reference):
    q, k, v = A.qkv(leading=(A.B,), dtype=torch.float32, seed=7)
    mask = A.tril(A.SQ, A.SK)
    (output, weights), _ = A.sdpa(student, q, k, v, mask)
    want_output, want_weights = reference["scaled_dot_product_attention"](q, k, v, mask=mask)
    mistakes = sdpa_mistakes(q, k, v, mask)
    checks.close(weights, want_weights, "The float32 weights (3-D inputs, causal mask)", "",
                 pick(mistakes, 1))
    checks.close(output, want_output, "The float32 output (3-D inputs, causal mask)", "",
                 pick(mistakes, 0))
