"""The catalogue of online_softmax: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_online_softmax.py, and the tests it may fail), correct alternatives
and degenerate answers."""

from functools import partial

from tests.catalogue.entries import Degenerate, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("flash_attention")["online_softmax"]
changed = partial(edited, SOLUTION)


MISTAKES = [
    Mistake("the running sum not rescaled when the maximum grows", "no_rescale",
            fails=("blocks_equal_the_whole_row", "rescales_when_the_maximum_grows", "fully_masked_blocks",
                   "survives_large_scores"),
            code=changed("l * np.exp(m - shift)", "l")),
    Mistake("the maximum of the new block only", "block_max",
            fails=("blocks_equal_the_whole_row", "fully_masked_blocks", "survives_large_scores"),
            code=changed("np.maximum(m, block.max(axis=-1))", "block.max(axis=-1)")),
    Mistake("NaN for a fully masked first block", "all_masked",
            fails=("fully_masked_blocks",),
            code=changed("np.where(np.isneginf(m_new), 0.0, m_new)", "m_new")),
    Mistake("exp(block) without subtracting the maximum", "no_shift",
            fails=("first_block_gives_its_max_and_sum", "blocks_equal_the_whole_row", "rescales_when_the_maximum_grows",
                   "fully_masked_blocks", "survives_large_scores"),
            code=changed("l * np.exp(m - shift) + np.exp(block - shift[..., None]).sum(axis=-1)",
                         "l + np.exp(block).sum(axis=-1)")),
    Mistake("updates l in place", "in_place",
            fails=("leaves_its_inputs_unchanged",),
            code=changed("    l_new = l * np.exp(m - shift) + np.exp(block - shift[..., None]).sum(axis=-1)\n",
                         "    l *= np.exp(m - shift)\n    l_new = l + np.exp(block - shift[..., None]).sum(axis=-1)\n")),
]


ALTERNATIVES = [
    Alternative("where the block's maximum wins, and a guarded old sum", '''def online_softmax_update(m, l, block):
    block_max = np.max(block, axis=-1)
    m_new = np.where(block_max > m, block_max, m)
    finite = np.isfinite(m_new)
    reference = np.where(finite, m_new, 0.0)
    old = np.where(l > 0, l * np.exp(np.where(finite, m - reference, 0.0)), 0.0)
    return m_new, old + np.sum(np.exp(block - reference[..., None]), axis=-1)
'''),
    Alternative("row by row in Python", '''def online_softmax_update(m, l, block):
    m_new, l_new = np.array(m, dtype=float), np.array(l, dtype=float)
    flat_m, flat_l = m_new.reshape(-1), l_new.reshape(-1)
    rows = block.reshape(-1, block.shape[-1])
    for i, row in enumerate(rows):
        top = max(flat_m[i], row.max())
        if top == -np.inf:
            continue
        flat_l[i] = flat_l[i] * np.exp(flat_m[i] - top) + np.exp(row - top).sum()
        flat_m[i] = top
    return m_new, l_new
'''),
]


DEGENERATES = [
    Degenerate("returns the state unchanged", '''def online_softmax_update(m, l, block):
    return m.copy(), l.copy()
'''),
    Degenerate("zeros", '''def online_softmax_update(m, l, block):
    return np.zeros_like(m), np.zeros_like(l)
'''),
    Degenerate("NaN", '''def online_softmax_update(m, l, block):
    return np.full_like(m, np.nan), np.full_like(l, np.nan)
'''),
    Degenerate("the block's maximum and a sum of one", '''def online_softmax_update(m, l, block):
    return block.max(axis=-1), np.ones_like(l)
'''),
]
