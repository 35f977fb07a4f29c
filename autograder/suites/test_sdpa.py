"""Hidden tests for scaled_dot_product_attention(q, k, v, mask=None) -> (output, weights).

One property per test.  Where a property can be checked against the student's own function, it
is: masking equals dropping the masked keys, a broadcast mask equals the expanded one, batching
equals looping, and the gradients equal finite differences of the student's own forward.  So a
wrong scaling fails the value tests (against torch and the reference) and nothing else.
"""

import torch

from autograder.harness import checks, substance
from autograder.suites import adapters as A
from autograder.suites.mistakes import pick, sdpa_mistakes

TRANSPOSE_HINT = "Transpose only the last two dimensions of k: k.transpose(-2, -1)."


def test_computes_attention(student):
    """The gate: 3-D inputs with as many keys as queries, which every attempt handles."""
    q, k, v = A.qkv((A.B,), sk=A.SQ, seed=40)
    substance.attention_function(lambda *qkv: A.sdpa(student, *qkv)[0], q, k, v)


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
    checks.rows_sum_to_one(weights, "Attention weights", mistakes=pick(sdpa_mistakes(q, k, v), 1))


def test_matches_torch_attention(student):
    q, k, v = A.qkv()
    (output, weights), _ = A.sdpa(student, q, k, v)
    mistakes = sdpa_mistakes(q, k, v)
    checks.close(weights, A.torch_weights(q, k), "The attention weights", "", pick(mistakes, 1))
    checks.close(output, A.torch_attention(q, k, v), "The output",
                 "The weights are right, so the product with v is not.", pick(mistakes, 0))


def test_matches_torch_attention_with_mask(student):
    q, k, v = A.qkv()
    mask = A.random_mask(A.B, A.H, A.SQ, A.SK)
    (output, _), _ = A.sdpa(student, q, k, v, mask)
    checks.close(output, A.torch_attention(q, k, v, mask), "The output with a mask", "",
                 pick(sdpa_mistakes(q, k, v, mask), 0))


def test_masked_weights_are_exactly_zero(student):
    q, k, v = A.qkv()
    mask = A.random_mask(A.B, A.H, A.SQ, A.SK, seed=1)
    (_, weights), _ = A.sdpa(student, q, k, v, mask)
    checks.shape(weights, mask.shape, "The weights")
    checks.exactly_zero_where(weights, ~mask, "Weights on blocked keys (mask False)",
                              mistakes=pick(sdpa_mistakes(q, k, v, mask), 1))


def test_masking_equals_dropping_the_keys(student):
    """A key blocked for every query changes nothing but its own absence: the masked call must
    equal the student's own unmasked call on the remaining keys."""
    q, k, v = A.qkv()
    keep = torch.tensor([True, False, True, True, False, True, False])
    mask = keep.expand(A.SQ, A.SK)
    (masked, _), _ = A.sdpa(student, q, k, v, mask)
    (dropped, _), _ = A.sdpa(student, q, k[..., keep, :], v[..., keep, :])
    checks.same(masked, dropped, "The output with some keys masked, against your own output without "
                "those keys", mistakes=pick(sdpa_mistakes(q, k, v, mask), 0))


def test_mask_broadcasts_over_batch_and_heads(student):
    q, k, v = A.qkv()
    for mask, kind in [(A.random_mask(A.SQ, A.SK, seed=2), "[Sq, Sk]"),
                       (A.random_mask(A.B, 1, 1, A.SK, seed=3), "[B, 1, 1, Sk]")]:
        (output, _), _ = A.sdpa(student, q, k, v, mask)
        (expanded, _), _ = A.sdpa(student, q, k, v, mask.expand(A.B, A.H, A.SQ, A.SK).clone())
        checks.same(output, expanded, f"The output with a {kind} mask, against your own output with the "
                    "mask expanded to [B, H, Sq, Sk]",
                     "Let the mask broadcast against the scores (masked_fill and torch.where do).")


def test_fully_masked_row_gives_zeros(student):
    q, k, v = A.qkv()
    mask = A.random_mask(A.B, A.H, A.SQ, A.SK, seed=4)
    mask[:, :, 0] = False  # the first query may attend to nothing
    (output, weights), _ = A.sdpa(student, q, k, v, mask)
    hint = ("A query with no allowed key should get weights 0 and output 0 (as PyTorch 2.13 does); "
            "softmax over a row of -inf gives NaN, so replace it (torch.nan_to_num, torch.where).")
    checks.finite(weights, "The weights", hint)
    checks.finite(output, "The output", hint)
    checks.close(weights[:, :, 0], torch.zeros_like(weights[:, :, 0]), "The weights of the fully masked row")
    checks.close(output[:, :, 0], torch.zeros_like(output[:, :, 0]), "The output of the fully masked row")


def test_large_scores_stay_finite(student):
    q, k, v = A.qkv(dtype=torch.float32, seed=8)
    q = q * 300  # scores in the thousands: exp() overflows float32 unless the maximum is subtracted
    (output, weights), _ = A.sdpa(student, q, k, v)
    hint = ("exp() overflowed: a hand-written softmax must subtract each row's maximum before exp() "
            "(torch.softmax does this for you).")
    checks.finite(weights, "The weights for large scores", hint)
    checks.finite(output, "The output for large scores", hint)


def test_keeps_float32_and_float64(student):
    for dtype in (torch.float32, torch.float64):
        q, k, v = A.qkv(dtype=dtype)
        (output, weights), _ = A.sdpa(student, q, k, v)
        hint = "Avoid hard-coded dtypes (torch.tensor(..., dtype=torch.float32), .float())."
        checks.dtype(output, dtype, "The output", hint)
        checks.dtype(weights, dtype, "The weights", hint)


def test_batching_equals_looping(student):
    """Each (batch, head) slice is attended on its own: the batched call must equal the student's
    own calls on the 2-D slices."""
    q, k, v = A.qkv(seed=9)
    (batched, _), _ = A.sdpa(student, q, k, v)
    for b, h in [(0, 0), (A.B - 1, A.H - 1)]:
        (alone, _), _ = A.sdpa(student, q[b, h], k[b, h], v[b, h])
        checks.same(batched[b, h], alone, f"The output of batch {b}, head {h}, against your own call on "
                    "that slice alone", "Only the last two dimensions may mix: the others are batch dimensions.")


def test_gradients_reach_q_k_v(student):
    """The gradients returned by autograd equal finite differences of the student's own forward."""
    q, k, v = A.qkv()
    mask = A.random_mask(A.B, A.H, A.SQ, A.SK, seed=5)
    upstream = [A.randn(A.B, A.H, A.SQ, A.D_V, seed=20), A.randn(A.B, A.H, A.SQ, A.SK, seed=21)]
    _, grads = A.sdpa(student, q, k, v, mask, grad_outputs=upstream)

    def loss(*inputs):
        (output, weights), _ = A.sdpa(student, *inputs, mask)
        return float((output * upstream[0]).sum() + (weights * upstream[1]).sum())

    inputs = [q, k, v]
    for index, (name, got) in enumerate(zip("qkv", grads)):
        checks.require(got is not None, f"No gradient reaches {name}.", A.CUT_HINT)
        direction = A.randn(*inputs[index].shape, seed=30 + index)
        step = 1e-3
        plus, minus = list(inputs), list(inputs)
        plus[index], minus[index] = inputs[index] + step * direction, inputs[index] - step * direction
        numeric = (loss(*plus) - loss(*minus)) / (2 * step)
        analytic = float((got.double() * direction).sum())
        checks.require(abs(numeric - analytic) <= 1e-3 * (1 + abs(numeric)),
                       f"The gradient with respect to {name} disagrees with your own forward pass: along a "
                       f"random direction it gives {analytic:.6g}, finite differences give {numeric:.6g}.")


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
