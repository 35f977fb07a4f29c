"""Hidden tests for the NumPy attention(Q, K, V) -> (output, weights).

attention calls the notebook's softmax, an exercise of its own (BUILT_ON): where the student's softmax is wrong,
an answer is also accepted against the reference attention built on that softmax (checks.built_on), so a
softmax slip costs softmax's points alone."""

import math

import numpy as np
import torch

from autograder.harness import checks, substance
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


# The earlier exercises' functions its answers may call (checks.built_on).
BUILT_ON = {"softmax": ("softmax",)}


def right(Q, K, V):
    q, k, v = map(torch.from_numpy, (Q, K, V))
    return torch_attention(q, k, v).numpy(), torch_weights(q, k).numpy()


def on_functions(reference, Q, K, V):
    """The reference attention(Q, K, V) with the given functions (the student's softmax) in place of its own."""
    def run(functions):
        with checks.calling(reference, functions):
            return reference["attention"](Q, K, V)
    return run


def expected(student, reference, answer, Q, K, V):
    """What (output, weights) should be: the right ones, or the answer where it is the reference attention
    built on the student's own softmax (a slip there is softmax's)."""
    return checks.built_on(student, BUILT_ON, answer, right(Q, K, V), on_functions(reference, Q, K, V))


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


def test_weights_rows_sum_to_one(student, reference):
    Q, K, V = inputs(seed=1)
    output, weights = numpy_attention(student, Q, K, V)
    checks.shape(weights, (SQ, SK), "The weights")
    sums = np.asarray(weights, dtype=np.float64).sum(-1)
    if not np.allclose(sums, 1, atol=1e-4) and \
            checks.follows_theirs(student, BUILT_ON, (output, weights), on_functions(reference, Q, K, V)):
        return
    checks.rows_sum_to_one(weights, "The weights", mistakes=pick(named_mistakes(Q, K, V), 1))


def test_matches_torch_attention(student, reference):
    Q, K, V = inputs(seed=2)
    output, weights = numpy_attention(student, Q, K, V)
    want_output, want_weights = expected(student, reference, (output, weights), Q, K, V)
    mistakes = named_mistakes(Q, K, V)
    checks.close(weights, want_weights, "The weights", "weights = softmax(Q K^T / sqrt(d_k)) over the keys.",
                 pick(mistakes, 1))
    checks.close(output, want_output, "The output", "output = weights @ V.", pick(mistakes, 0))


def test_matches_torch_with_batch_dimensions(student, reference):
    Q, K, V = inputs((B, H), seed=3)
    output, weights = numpy_attention(student, Q, K, V)
    want_output, want_weights = expected(student, reference, (output, weights), Q, K, V)
    mistakes = named_mistakes(Q, K, V)
    checks.close(weights, want_weights, "The weights for [B, H, S, d] inputs", "", pick(mistakes, 1))
    checks.close(output, want_output, "The output for [B, H, S, d] inputs", "", pick(mistakes, 0))


def test_survives_large_scores(student, reference):
    Q, K, V = inputs(scale=1000.0, seed=4)
    output, weights = numpy_attention(student, Q, K, V)
    want_output, _ = expected(student, reference, (output, weights), Q, K, V)
    if want_output is not output:   # the grader's attention is the rule: it must not overflow
        checks.finite(weights, "The weights for large scores", CAUSES["unstable"])
    checks.close(output, want_output, "The output for large scores", "", pick(named_mistakes(Q, K, V), 0))
