"""The catalogue of numpy_attention: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_numpy_attention.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from tests.catalogue.entries import Degenerate, Gaming, Mistake, Alternative


MISTAKES = [
    Mistake("K.T on batched inputs", "swap_axes",
            fails=("matches_torch_with_batch_dimensions", "shapes_with_batch_dimensions"),
            code='''def attention(Q, K, V):
    weights = softmax(Q @ K.T / np.sqrt(Q.shape[-1]))
    return weights @ V, weights
'''),
    Mistake("no scaling", "no_scale",
            fails=("matches_torch_attention", "matches_torch_with_batch_dimensions"),
            code='''def attention(Q, K, V):
    weights = softmax(Q @ np.swapaxes(K, -1, -2))
    return weights @ V, weights
'''),
    Mistake("softmax over the queries", "softmax_over_queries",
            fails=("matches_torch_attention", "matches_torch_with_batch_dimensions", "weights_rows_sum_to_one"),
            also_fails=("survives_large_scores",),
            code='''def attention(Q, K, V):
    weights = softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]), axis=0)
    return weights @ V, weights
'''),
    Mistake("scaled by the value width", "scale_d_v",
            fails=("matches_torch_attention", "matches_torch_with_batch_dimensions"),
            code='''def attention(Q, K, V):
    weights = softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(V.shape[-1]))
    return weights @ V, weights
'''),
    Mistake("naive softmax inline", "unstable",
            fails=("survives_large_scores",),
            code='''def attention(Q, K, V):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    weights = np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)
    return weights @ V, weights
'''),
]


ALTERNATIVES = [
    # A slip of softmax, an exercise of its own, is charged there alone: attention built on the student's
    # softmax is right here (the suite accepts it against that softmax).
    Alternative("a right attention on an unstable softmax (softmax's own slip)", '''def softmax(x, axis=-1):
    return np.exp(x) / np.sum(np.exp(x), axis=axis, keepdims=True)


def attention(Q, K, V):
    weights = softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]), axis=-1)
    return weights @ V, weights
'''),
    Alternative("a right attention on a softmax that ignores its axis (softmax's own slip)", '''def softmax(x, axis=-1):
    exps = np.exp(x - x.max(axis=0, keepdims=True))
    return exps / exps.sum(axis=0, keepdims=True)


def attention(Q, K, V):
    weights = softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]), axis=-1)
    return weights @ V, weights
'''),
    Alternative("einsum", '''def attention(Q, K, V):
    scores = np.einsum("...qd,...kd->...qk", Q, K) / np.sqrt(Q.shape[-1])
    weights = softmax(scores, axis=-1)
    return np.einsum("...qk,...kd->...qd", weights, V), weights
'''),
]


DEGENERATES = [
    Degenerate("uniform weights", '''def attention(Q, K, V):
    weights = np.ones(Q.shape[:-1] + (K.shape[-2],)) / K.shape[-2]
    return weights @ V, weights
'''),
    Degenerate("zeros", '''def attention(Q, K, V):
    return np.zeros(Q.shape[:-1] + (V.shape[-1],)), np.zeros(Q.shape[:-1] + (K.shape[-2],))
'''),
    Degenerate("NaN", '''def attention(Q, K, V):
    return np.full(Q.shape[:-1] + (V.shape[-1],), np.nan), np.full(Q.shape[:-1] + (K.shape[-2],), np.nan)
'''),
    Degenerate("scores that ignore the queries", '''def attention(Q, K, V):
    weights = softmax(np.ones_like(Q) @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]))
    return weights @ V, weights
'''),
    Degenerate("returns the values", '''def attention(Q, K, V):
    return V, softmax(Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1]))
'''),
]


GAMING = [
    # Follow-through credit gamed by state kept between calls: attention leaves out the 1/sqrt(d_k) scaling and
    # keeps its weights in a global; softmax hands them back on the next call of that shape (the grader's witness,
    # checks.follows_theirs, made right after the graded call), else is right.  The witness runs in a fresh child
    # that has only run the notebook's cells, and a softmax right on the witness's inputs earns attention nothing.
    Gaming("no scaling, its weights handed back by a softmax that remembers them", '''_PENDING = []


def _softmax(x, axis=-1):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    exps = np.exp(shifted)
    return exps / np.sum(exps, axis=axis, keepdims=True)


def softmax(x, axis=-1):
    if _PENDING and np.shape(_PENDING[0]) == np.shape(x):
        return _PENDING.pop()
    return _softmax(x, axis)


def attention(Q, K, V):
    weights = _softmax(Q @ np.swapaxes(K, -1, -2))
    _PENDING[:] = [weights]
    return weights @ V, weights
''', loses=("matches_torch_attention", "matches_torch_with_batch_dimensions"), says="1/sqrt(d_k)"),
]
