"""Hidden tests for the NumPy attention(Q, K, V) -> (output, weights)."""

import torch

from autograder.harness import checks, substance
from autograder.suites import adapters as A
from autograder.suites.mistakes import numpy_attention_mistakes, pick

SWAP_HINT = "Swap only the last two axes of K: np.swapaxes(K, -1, -2) (K.T reverses all axes)."


def inputs(leading=(), scale=1.0, seed=0):
    q, k, v = A.qkv(leading, seed=seed)
    return q.numpy() * scale, k.numpy(), v.numpy()


def expected(Q, K, V):
    q, k, v = map(torch.from_numpy, (Q, K, V))
    return A.torch_attention(q, k, v).numpy(), A.torch_weights(q, k).numpy()


def test_computes_attention(student):
    """The gate, on one sequence."""
    def call(q, k, v):
        return tuple(map(checks.as_tensor, A.numpy_attention(student, q.numpy(), k.numpy(), v.numpy())))
    substance.attention_function(call, *A.qkv((), seed=5))


def test_returns_numpy_arrays(student):
    A.numpy_attention(student, *inputs())


def test_shapes_for_one_sequence(student):
    output, weights = A.numpy_attention(student, *inputs())
    checks.shape(output, (A.SQ, A.D_V), "The output", "The output has one row per query and d_v columns.")
    checks.shape(weights, (A.SQ, A.SK), "The weights", "The weights have one row per query, one column per key.")


def test_shapes_with_batch_dimensions(student):
    output, weights = A.numpy_attention(student, *inputs((A.B,)))
    checks.shape(output, (A.B, A.SQ, A.D_V), "The output for [B, S, d] inputs", SWAP_HINT)
    checks.shape(weights, (A.B, A.SQ, A.SK), "The weights for [B, S, d] inputs", SWAP_HINT)


def test_weights_rows_sum_to_one(student):
    _, weights = A.numpy_attention(student, *inputs(seed=1))
    checks.shape(weights, (A.SQ, A.SK), "The weights")
    checks.rows_sum_to_one(weights, "The weights", mistakes=pick(numpy_attention_mistakes(*inputs(seed=1)), 1))


def test_matches_torch_attention(student):
    Q, K, V = inputs(seed=2)
    output, weights = A.numpy_attention(student, Q, K, V)
    want_output, want_weights = expected(Q, K, V)
    mistakes = numpy_attention_mistakes(Q, K, V)
    checks.close(weights, want_weights, "The weights", "weights = softmax(Q K^T / sqrt(d_k)) over the keys.",
                 pick(mistakes, 1))
    checks.close(output, want_output, "The output", "output = weights @ V.", pick(mistakes, 0))


def test_matches_torch_with_batch_dimensions(student):
    Q, K, V = inputs((A.B, A.H), seed=3)
    output, weights = A.numpy_attention(student, Q, K, V)
    want_output, want_weights = expected(Q, K, V)
    mistakes = numpy_attention_mistakes(Q, K, V)
    checks.close(weights, want_weights, "The weights for [B, H, S, d] inputs", "", pick(mistakes, 1))
    checks.close(output, want_output, "The output for [B, H, S, d] inputs", "", pick(mistakes, 0))


def test_survives_large_scores(student):
    Q, K, V = inputs(scale=1000.0, seed=4)
    output, weights = A.numpy_attention(student, Q, K, V)
    hint = "Use your stable softmax: large scores overflow np.exp."
    checks.finite(weights, "The weights for large scores", hint)
    checks.close(output, expected(Q, K, V)[0], "The output for large scores", "",
                 pick(numpy_attention_mistakes(Q, K, V), 0))
