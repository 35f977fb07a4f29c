"""Hidden tests for the NumPy attention(Q, K, V) -> (output, weights).

attention calls the notebook's softmax, an exercise of its own: where the student's softmax is wrong,
an answer is also accepted against attention built on that softmax (the grader's scores, the student's
softmax of them over the keys, the grader's product), so a softmax slip costs softmax's points alone."""

import math

import numpy as np
import torch

from autograder.harness import checks, substance
from autograder.harness.context import StudentError
from autograder.suites.helpers.common import (B, D_V, H, SK, SQ, attention, crash_hint, named, pick, qkv,
                                              torch_attention, torch_weights)


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "no_scale": "attention without the 1/sqrt(d_k) scaling",
    "softmax_over_queries": "a softmax over the queries (axis=-2) instead of the keys",
    "scale_d_v": "scaling by the value width d_v instead of the key width d_k",
    "divide_by_d_k": "dividing by d_k instead of sqrt(d_k)",
    "swap_axes": "Swap only the last two axes of K: np.swapaxes(K, -1, -2) (K.T reverses all axes).",
    "unstable": "Use your stable softmax: large scores overflow np.exp.",
}


def numpy_attention(student, Q, K, V):
    with crash_hint(CAUSES["swap_axes"]):
        reply = student.call("attention", Q, K, V)
    output, weights = checks.pair(reply["output"], "attention")
    checks.tensor(output, "The output of attention", "ndarray")
    checks.tensor(weights, "The weights of attention", "ndarray")
    return output, weights


def named_mistakes(Q, K, V):
    """What each named mistake gives for attention(Q, K, V): cause text -> (output, weights)."""
    q, k, v = (torch.from_numpy(a) for a in (Q, K, V))
    found = dict(no_scale=attention(q, k, v, scale=1.0), softmax_over_queries=attention(q, k, v, dim=-2),
                 scale_d_v=attention(q, k, v, scale=1 / math.sqrt(V.shape[-1])))
    if K.ndim == 4:
        # K.T on [B, H, S, d] gives [d, S, H, B]; only the harmless square cases would broadcast
        found["divide_by_d_k"] = attention(q, k, v, scale=1 / Q.shape[-1])
    return named(CAUSES, **{key: tuple(t.numpy() for t in pair) for key, pair in found.items()})


def inputs(leading=(), scale=1.0, seed=0):
    q, k, v = qkv(leading, seed=seed)
    return q.numpy() * scale, k.numpy(), v.numpy()


def expected(Q, K, V):
    q, k, v = map(torch.from_numpy, (Q, K, V))
    return torch_attention(q, k, v).numpy(), torch_weights(q, k).numpy()


def on_your_softmax(student, Q, K, V):
    """(output, weights) of attention built on the student's own softmax, or None where it raises or gives
    no array of the scores' shape."""
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    try:
        weights = student.call("softmax", scores, axis=-1)["output"]
    except StudentError:
        return None
    if not isinstance(weights, np.ndarray) or weights.shape != scores.shape:
        return None
    return weights @ V, weights


def follows_your_softmax(student, answer, Q, K, V):
    """Whether a wrong (output, weights) is attention built on the student's softmax (then the slip is
    softmax's, charged by its own tests)."""
    yours = on_your_softmax(student, Q, K, V)
    return yours is not None and all(checks.is_close(checks.as_tensor(mine), checks.as_tensor(theirs))
                                     for mine, theirs in zip(answer, yours))


def test_computes_attention(student):
    """The gate, on one sequence."""
    def call(q, k, v):
        return tuple(map(checks.as_tensor, numpy_attention(student, q.numpy(), k.numpy(), v.numpy())))
    substance.attention_function(call, *qkv((), seed=5))


def test_returns_numpy_arrays(student):
    numpy_attention(student, *inputs())


def test_shapes_for_one_sequence(student):
    output, weights = numpy_attention(student, *inputs())
    checks.shape(output, (SQ, D_V), "The output", "The output has one row per query and d_v columns.")
    checks.shape(weights, (SQ, SK), "The weights", "The weights have one row per query, one column per key.")


def test_shapes_with_batch_dimensions(student):
    output, weights = numpy_attention(student, *inputs((B,)))
    checks.shape(output, (B, SQ, D_V), "The output for [B, S, d] inputs", CAUSES["swap_axes"])
    checks.shape(weights, (B, SQ, SK), "The weights for [B, S, d] inputs", CAUSES["swap_axes"])


def test_weights_rows_sum_to_one(student):
    output, weights = numpy_attention(student, *inputs(seed=1))
    checks.shape(weights, (SQ, SK), "The weights")
    sums = np.asarray(weights, dtype=np.float64).sum(-1)
    if not np.allclose(sums, 1, atol=1e-4) and follows_your_softmax(student, (output, weights), *inputs(seed=1)):
        return
    checks.rows_sum_to_one(weights, "The weights", mistakes=pick(named_mistakes(*inputs(seed=1)), 1))


def test_matches_torch_attention(student):
    Q, K, V = inputs(seed=2)
    output, weights = numpy_attention(student, Q, K, V)
    want_output, want_weights = expected(Q, K, V)
    if not (checks.is_close(checks.as_tensor(weights), torch.from_numpy(want_weights))
            and checks.is_close(checks.as_tensor(output), torch.from_numpy(want_output))) and \
            follows_your_softmax(student, (output, weights), Q, K, V):
        return
    mistakes = named_mistakes(Q, K, V)
    checks.close(weights, want_weights, "The weights", "weights = softmax(Q K^T / sqrt(d_k)) over the keys.",
                 pick(mistakes, 1))
    checks.close(output, want_output, "The output", "output = weights @ V.", pick(mistakes, 0))


def test_matches_torch_with_batch_dimensions(student):
    Q, K, V = inputs((B, H), seed=3)
    output, weights = numpy_attention(student, Q, K, V)
    want_output, want_weights = expected(Q, K, V)
    if not (checks.is_close(checks.as_tensor(weights), torch.from_numpy(want_weights))
            and checks.is_close(checks.as_tensor(output), torch.from_numpy(want_output))) and \
            follows_your_softmax(student, (output, weights), Q, K, V):
        return
    mistakes = named_mistakes(Q, K, V)
    checks.close(weights, want_weights, "The weights for [B, H, S, d] inputs", "", pick(mistakes, 1))
    checks.close(output, want_output, "The output for [B, H, S, d] inputs", "", pick(mistakes, 0))


def test_survives_large_scores(student):
    Q, K, V = inputs(scale=1000.0, seed=4)
    output, weights = numpy_attention(student, Q, K, V)
    if not checks.is_close(checks.as_tensor(output), torch.from_numpy(expected(Q, K, V)[0])) and \
            follows_your_softmax(student, (output, weights), Q, K, V):
        return
    checks.finite(weights, "The weights for large scores", CAUSES["unstable"])
    checks.close(output, expected(Q, K, V)[0], "The output for large scores", "",
                 pick(named_mistakes(Q, K, V), 0))
