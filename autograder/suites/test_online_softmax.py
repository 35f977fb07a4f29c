"""Hidden tests for the NumPy online_softmax_update(m, l, block) -> (m, l).

The grader streams a row through the student's update one block per call, so nothing but the
running state (m, l) links one block to the next: the student's code never sees the whole row."""

import numpy as np

from autograder.harness import checks
from autograder.suites.helpers.common import crash_hint, named, randn


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "no_rescale": "a running sum that is not rescaled by exp(m - m_new) when the maximum grows",
    "block_max": "m taken from the new block alone instead of the maximum of everything seen",
    "all_masked": "a row whose blocks so far are all -inf gives exp(-inf - (-inf)) = NaN: while the "
                  "maximum is still -inf, subtract 0 instead (the sum stays 0)",
    "no_shift": "exp(block) without subtracting the running maximum (it overflows for large scores)",
    "shape": "m and l have the shape of the block without its last axis: reduce over axis=-1.",
    "in_place": "In-place updates (l *= ..., m[...] = ...) change the caller's arrays; return new ones.",
}
EMPTY = "Start: m = -inf, l = 0. Step: m_new = max(m, max(block)); l_new = l * exp(m - m_new) + " \
        "sum(exp(block - m_new))."


def update(student, m, l, block):
    """One call of the student's update; returns (m, l, the inputs as they are after the call)."""
    with crash_hint(CAUSES["shape"]):
        reply = student.call("online_softmax_update", m, l, block, echo_args=True)
    new_m, new_l = checks.pair(reply["output"], "online_softmax_update(m, l, block)", ("m", "l"))
    return (checks.tensor(new_m, "The new m", "ndarray"), checks.tensor(new_l, "The new l", "ndarray"),
            reply["args_after"])


def stream(student, x, width):
    """The state after feeding the rows of x to the student's update, `width` columns at a time."""
    m, l = empty(x.shape[:-1])
    for start in range(0, x.shape[-1], width):
        m, l, _ = update(student, m, l, x[..., start:start + width])
    return m, l


def empty(shape):
    return np.full(shape, -np.inf), np.zeros(shape)


def row_statistics(x):
    """(max, sum of exp(x - max)) over the last axis: what the stream must end with."""
    with np.errstate(all="ignore"):
        top = x.max(axis=-1)
        return top, np.exp(x - np.where(np.isneginf(top), 0, top)[..., None]).sum(axis=-1)


def mistaken_stream(x, width, mistake):
    """The state a named mistake ends with, for the same stream."""
    m, l = empty(x.shape[:-1])
    with np.errstate(all="ignore"):
        for start in range(0, x.shape[-1], width):
            block = x[..., start:start + width]
            m_new = block.max(axis=-1) if mistake == "block_max" else np.maximum(m, block.max(axis=-1))
            shift = m_new if mistake == "all_masked" else np.where(np.isneginf(m_new), 0, m_new)
            if mistake == "no_shift":
                m, l = m_new, l + np.exp(block).sum(axis=-1)
                continue
            rescale = 1.0 if mistake == "no_rescale" else np.exp(m - shift)
            m, l = m_new, l * rescale + np.exp(block - shift[..., None]).sum(axis=-1)
    return m, l


def named_mistakes(x, width, index):
    """cause text -> the m (index 0) or l (index 1) each named mistake ends with."""
    return named(CAUSES, **{key: mistaken_stream(x, width, key)[index]
                              for key in ("no_rescale", "block_max", "all_masked", "no_shift")})


def compare(student, x, width, what):
    m, l = stream(student, x, width)
    want_m, want_l = row_statistics(x)
    checks.close(m, want_m, f"m after {what}", "m is the maximum of every score seen so far.",
                 named_mistakes(x, width, 0))
    checks.close(l, want_l, f"l after {what}", EMPTY, named_mistakes(x, width, 1))


def scores(*shape, seed=0, scale=2.0):
    return randn(*shape, seed=seed).numpy() * scale


def test_updates_the_state(student):
    """The gate: from a finite state, one block gives a finite, positive sum that depends on the block."""
    m, l = np.array([0.5, -1.0]), np.array([1.5, 2.0])
    sums = []
    for block in (np.zeros((2, 4)), np.array([[0.0, -5.0, -5.0, -5.0], [0.0, -5.0, -5.0, -5.0]])):
        new_m, new_l, _ = update(student, m, l, block)
        checks.shape(new_l, (2,), "The new l", CAUSES["shape"])
        checks.require(bool(np.all(np.isfinite(new_m)) and np.all(np.isfinite(new_l)) and np.all(new_l > 0)),
                       "From a finite state, online_softmax_update does not return a finite m and a positive l, "
                       "so it does not keep a running sum yet.")
        sums.append(new_l)
    checks.require(not np.allclose(sums[0], sums[1]),
                   "The new l is the same for a block of equal scores and for a block with one large score, "
                   "so it does not add up the block's exponentials yet.")


def test_returns_arrays_of_the_row_shape(student):
    for shape in [(5, 8), (2, 3, 8)]:
        m, l = empty(shape[:-1])
        new_m, new_l, _ = update(student, m, l, scores(*shape, seed=1))
        checks.shape(new_m, shape[:-1], "The new m", CAUSES["shape"])
        checks.shape(new_l, shape[:-1], "The new l", CAUSES["shape"])


def test_first_block_gives_its_max_and_sum(student):
    x = scores(6, 9, seed=2)
    compare(student, x, 9, "one block")


def test_blocks_equal_the_whole_row(student):
    x = scores(6, 50, seed=3)
    for width in (7, 16):
        compare(student, x, width, f"blocks of {width} scores")


def test_rescales_when_the_maximum_grows(student):
    """Every block holds a larger maximum than the blocks before it."""
    x = np.sort(scores(4, 24, seed=4), axis=-1) + np.linspace(0, 6, 24)
    compare(student, x, 6, "blocks of growing scores")


def test_fully_masked_blocks(student):
    """A block of -inf (a masked tile) as the first block of some rows, and in the middle of others."""
    x = scores(4, 24, seed=5)
    x[:2, :8] = -np.inf
    x[2:, 8:16] = -np.inf
    compare(student, x, 8, "blocks of -inf (masked scores)")


def test_survives_large_scores(student):
    x = scores(3, 30, seed=6) + np.array([[1000.0], [-1000.0], [0.0]])
    x[2, :10] += 800
    compare(student, x, 10, "blocks of scores near +-1000")


def test_leaves_its_inputs_unchanged(student):
    m, l = np.array([0.5, 2.0]), np.array([1.5, 3.0])
    block = scores(2, 5, seed=7)
    _, _, after = update(student, m.copy(), l.copy(), block.copy())
    for name, before, now in zip(("m", "l", "block"), (m, l, block), after):
        checks.require(np.array_equal(np.asarray(now), before), f"online_softmax_update changed its argument {name}.",
                       CAUSES["in_place"])
