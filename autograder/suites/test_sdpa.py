"""Hidden tests for scaled_dot_product_attention(q, k, v, mask=None) -> (output, weights).

One property per test.  Where a property can be checked against the student's own function, it
is: masking equals dropping the masked keys, a broadcast mask equals the expanded one, batching
equals looping, and the gradients equal finite differences of the student's own forward.  So a
wrong scaling fails the value tests (against torch and the reference) and nothing else.
"""

import math

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers import common
from autograder.suites.helpers.common import (B, BACKWARD_HINT, CUT_HINT, D_V, H, INPLACE_ERRORS, SK, SQ,
                                              attention, crash_hint, named, pick, randn, random_mask,
                                              torch_attention, torch_weights, tril)


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "no_scale": "attention without the 1/sqrt(d_k) scaling",
    "divide_by_d_k": "dividing the scores by d_k instead of sqrt(d_k)",
    "scale_d_v": "scaling by the value width d_v instead of the key width d_k",
    "softmax_over_queries": "a softmax over the queries (dim=-2) instead of the keys (dim=-1)",
    "inverted_mask": "an inverted mask (True treated as blocked, the nn.MultiheadAttention convention)",
    "mask_after_softmax": "masking after the softmax (the remaining weights no longer sum to 1)",
    "mask_ignored": "ignoring the mask (is the result of masked_fill assigned back?)",
    "mask_added": "adding the boolean mask to the scores (True becomes +1) instead of filling the blocked scores "
                  "with -inf before the softmax",
    "transpose": "Transpose only the last two dimensions of k: k.transpose(-2, -1) works for any number of "
                 "leading dimensions.",
    "same_length": "the code assumes that queries and keys have the same length; here Sq != Sk.",
    "fully_masked_nan": "A query with no allowed key should get weights 0 and output 0 (as PyTorch 2.13 does); "
                        "softmax over a row of -inf gives NaN, so replace it (torch.nan_to_num, torch.where).",
    "overflow": "exp() overflowed: a hand-written softmax must subtract each row's maximum before exp() "
                "(torch.softmax does this for you).",
    "leading_dims": "inputs of some ranks left unhandled: the statement allows any number of leading dimensions "
                    "(2-D, 3-D, 4-D inputs), and q @ k.transpose(-2, -1) handles them all",
    "dtype": "Avoid hard-coded dtypes (torch.tensor(..., dtype=torch.float32), .float()).",
    "float32": checks.FLOAT32_HINT,
    "cut": CUT_HINT,
    "backward_in_place": BACKWARD_HINT,
}


def sdpa(student, q, k, v, mask=None, grad_outputs=None):
    """Call the student's scaled_dot_product_attention; returns ((output, weights), input grads)."""
    kwargs = {} if mask is None else {"mask": mask}
    with crash_hint(CAUSES["backward_in_place"], INPLACE_ERRORS) if grad_outputs is not None else \
            crash_hint([(("is invalid for input of size",), CAUSES["same_length"]),
                          (("must match the size of tensor", "Dimension out of range"), CAUSES["transpose"])]):
        reply = student.call("scaled_dot_product_attention", q, k, v, grad=grad_outputs is not None,
                             grad_outputs=grad_outputs or (), **kwargs)
    output, weights = checks.pair(reply["output"], "scaled_dot_product_attention")
    checks.tensor(output, "The output")
    checks.tensor(weights, "The attention weights")
    return (output, weights), reply["input_grads"]


def named_mistakes(q, k, v, mask=None):
    """What each named mistake gives: cause text -> (output, weights)."""
    found = dict(no_scale=attention(q, k, v, mask, scale=1.0),
                 divide_by_d_k=attention(q, k, v, mask, scale=1 / q.shape[-1]),
                 scale_d_v=attention(q, k, v, mask, scale=1 / math.sqrt(v.shape[-1])),
                 softmax_over_queries=attention(q, k, v, mask, dim=-2))
    if mask is not None:
        found.update(inverted_mask=attention(q, k, v, mask, invert=True),
                     mask_after_softmax=attention(q, k, v, mask, mask_after=True),
                     mask_ignored=attention(q, k, v), mask_added=attention(q, k, v, mask, add=True))
    return named(CAUSES, **found)


def test_computes_attention(student):
    """The gate: inputs with as many keys as queries, 3-D first, then 4-D and 2-D (the statement allows
    any leading dimensions), passed when any of them shows attention: an answer written for 4-D inputs
    only computes attention, and loses the tests of the other ranks."""
    substance.any_passes(
        lambda leading=leading: substance.attention_function(lambda *qkv: sdpa(student, *qkv)[0],
                                                             *common.qkv(leading, sk=SQ, seed=40))
        for leading in [(B,), (B, H), ()])


def test_shapes_with_any_leading_dims(student):
    handled = False   # whether inputs of a smaller rank gave the right shapes
    for leading in [(), (B,), (B, H), (B, 2, H)]:
        q, k, v = common.qkv(leading)
        (output, weights), _ = sdpa(student, q, k, v)
        where = f" for inputs with {len(leading)} leading dimension(s)"
        rank = handled and (output.dim(), weights.dim()) != (len(leading) + 2,) * 2
        hint = checks.likely(CAUSES["leading_dims"]) if rank else CAUSES["transpose"]
        checks.shape(output, (*leading, SQ, D_V), "The output" + where, hint)
        checks.shape(weights, (*leading, SQ, SK), "The weights" + where, hint)
        handled = True


def test_weights_rows_sum_to_one(student):
    q, k, v = common.qkv()
    (_, weights), _ = sdpa(student, q, k, v)
    checks.shape(weights, (B, H, SQ, SK), "The weights")
    checks.rows_sum_to_one(weights, "Attention weights", mistakes=pick(named_mistakes(q, k, v), 1))


def test_matches_torch_attention(student):
    q, k, v = common.qkv()
    (output, weights), _ = sdpa(student, q, k, v)
    mistakes = named_mistakes(q, k, v)
    checks.close(weights, torch_weights(q, k), "The attention weights", "", pick(mistakes, 1))
    checks.close(output, torch_attention(q, k, v), "The output",
                 "The weights are right, so the product with v is not.", pick(mistakes, 0))


def test_matches_torch_attention_with_mask(student):
    q, k, v = common.qkv()
    mask = random_mask(B, H, SQ, SK)
    (output, _), _ = sdpa(student, q, k, v, mask)
    checks.close(output, torch_attention(q, k, v, mask), "The output with a mask", "",
                 pick(named_mistakes(q, k, v, mask), 0))


def test_masked_weights_are_exactly_zero(student):
    q, k, v = common.qkv()
    mask = random_mask(B, H, SQ, SK, seed=1)
    (_, weights), _ = sdpa(student, q, k, v, mask)
    checks.shape(weights, mask.shape, "The weights")
    checks.exactly_zero_where(weights, ~mask, "Weights on blocked keys (mask False)",
                              mistakes=pick(named_mistakes(q, k, v, mask), 1))


def test_masking_equals_dropping_the_keys(student):
    """A key blocked for every query changes nothing but its own absence: the masked call must
    equal the student's own unmasked call on the remaining keys."""
    q, k, v = common.qkv()
    keep = torch.tensor([True, False, True, True, False, True, False])
    mask = keep.expand(SQ, SK)
    (masked, _), _ = sdpa(student, q, k, v, mask)
    (dropped, _), _ = sdpa(student, q, k[..., keep, :], v[..., keep, :])
    checks.same(masked, dropped, "The output with some keys masked, against your own output without "
                "those keys", mistakes=pick(named_mistakes(q, k, v, mask), 0))


def test_mask_broadcasts_over_batch_and_heads(student):
    q, k, v = common.qkv()
    for mask, kind in [(random_mask(SQ, SK, seed=2), "[Sq, Sk]"),
                       (random_mask(B, 1, 1, SK, seed=3), "[B, 1, 1, Sk]")]:
        (output, _), _ = sdpa(student, q, k, v, mask)
        (expanded, _), _ = sdpa(student, q, k, v, mask.expand(B, H, SQ, SK).clone())
        checks.same(output, expanded, f"The output with a {kind} mask, against your own output with the "
                    "mask expanded to [B, H, Sq, Sk]",
                     "Let the mask broadcast against the scores (masked_fill and torch.where do).")


def test_fully_masked_row_gives_zeros(student):
    q, k, v = common.qkv()
    mask = random_mask(B, H, SQ, SK, seed=4)
    mask[:, :, 0] = False  # the first query may attend to nothing
    (output, weights), _ = sdpa(student, q, k, v, mask)
    hint = CAUSES["fully_masked_nan"]
    checks.shape(weights, (B, H, SQ, SK), "The weights")   # before a row of them is read
    checks.shape(output, (B, H, SQ, D_V), "The output")
    checks.finite(weights, "The weights", hint)
    checks.finite(output, "The output", hint)
    checks.close(weights[:, :, 0], torch.zeros_like(weights[:, :, 0]), "The weights of the fully masked row")
    checks.close(output[:, :, 0], torch.zeros_like(output[:, :, 0]), "The output of the fully masked row")


def test_large_scores_stay_finite(student):
    q, k, v = common.qkv(dtype=torch.float32, seed=8)
    q = q * 300  # scores in the thousands: exp() overflows float32 unless the maximum is subtracted
    (output, weights), _ = sdpa(student, q, k, v)
    hint = CAUSES["overflow"]
    checks.finite(weights, "The weights for large scores", hint)
    checks.finite(output, "The output for large scores", hint)


def test_keeps_float32_and_float64(student):
    for dtype in (torch.float32, torch.float64):
        q, k, v = common.qkv(dtype=dtype)
        (output, weights), _ = sdpa(student, q, k, v)
        hint = CAUSES["dtype"]
        checks.dtype(output, dtype, "The output", hint)
        checks.dtype(weights, dtype, "The weights", hint)


def test_batching_equals_looping(student):
    """Each (batch, head) slice is attended on its own: the batched call must equal the student's
    own calls on the 2-D slices."""
    q, k, v = common.qkv(seed=9)
    (batched, _), _ = sdpa(student, q, k, v)
    checks.shape(batched, (B, H, SQ, D_V), "The output for 4-D inputs", checks.likely(CAUSES["leading_dims"]))
    for b, h in [(0, 0), (B - 1, H - 1)]:
        (alone, _), _ = sdpa(student, q[b, h], k[b, h], v[b, h])
        checks.same(batched[b, h], alone, f"The output of batch {b}, head {h}, against your own call on "
                    "that slice alone", "Only the last two dimensions may mix: the others are batch dimensions.")


def test_gradients_reach_q_k_v(student):
    """The gradients returned by autograd equal finite differences of the student's own forward."""
    q, k, v = common.qkv()
    mask = random_mask(B, H, SQ, SK, seed=5)
    upstream = [randn(B, H, SQ, D_V, seed=20), randn(B, H, SQ, SK, seed=21)]
    (output, weights), grads = sdpa(student, q, k, v, mask, grad_outputs=upstream)
    checks.shape(output, upstream[0].shape, "The output for 4-D inputs", checks.likely(CAUSES["leading_dims"]))
    checks.shape(weights, upstream[1].shape, "The weights for 4-D inputs", checks.likely(CAUSES["leading_dims"]))

    def loss(*inputs):
        (output, weights), _ = sdpa(student, *inputs, mask)
        checks.shape(output, upstream[0].shape, "The output for 4-D inputs", checks.likely(CAUSES["leading_dims"]))
        checks.shape(weights, upstream[1].shape, "The weights for 4-D inputs", checks.likely(CAUSES["leading_dims"]))
        return float((output * upstream[0]).sum() + (weights * upstream[1]).sum())

    inputs = [q, k, v]
    for index, (name, got) in enumerate(zip("qkv", grads)):
        checks.require(got is not None, f"No gradient reaches {name}.", CAUSES["cut"])
        direction = randn(*inputs[index].shape, seed=30 + index)
        step = 1e-3
        plus, minus = list(inputs), list(inputs)
        plus[index], minus[index] = inputs[index] + step * direction, inputs[index] - step * direction
        numeric = (loss(*plus) - loss(*minus)) / (2 * step)
        analytic = float((got.double() * direction).sum())
        checks.require(abs(numeric - analytic) <= 1e-3 * (1 + abs(numeric)),
                       f"The gradient with respect to {name} disagrees with your own forward pass: along a "
                       f"random direction it gives {analytic:.6g}, finite differences give {numeric:.6g}.")


def test_matches_reference_solution(student, reference):
    q, k, v = common.qkv(leading=(B,), dtype=torch.float32, seed=7)
    mask = tril(SQ, SK)
    (output, weights), _ = sdpa(student, q, k, v, mask)
    want_output, want_weights = reference["scaled_dot_product_attention"](q, k, v, mask=mask)
    mistakes = named_mistakes(q, k, v, mask)
    checks.close(weights, want_weights, "The float32 weights (3-D inputs, causal mask)", "",
                 pick(mistakes, 1))
    checks.close(output, want_output, "The float32 output (3-D inputs, causal mask)", "",
                 pick(mistakes, 0))
