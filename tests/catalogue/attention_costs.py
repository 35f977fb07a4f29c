"""The catalogue of attention_costs: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_attention_costs.py, and the tests it may fail), correct alternatives
and degenerate answers."""

from functools import partial

from tests.catalogue.entries import Degenerate, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("flash_attention")["attention_costs"]
changed = partial(edited, SOLUTION)


MISTAKES = [
    Mistake("floats, not integers", "pair", fails=("returns_two_whole_numbers",),
            code=changed("return flops, batch * heads * elements * size", "return float(flops), batch * heads * elements * size / 1")),
    Mistake("a multiply-add as one FLOP", "multiply_add", fails=("flops",),
            code=changed("batch * heads * 4 * n * n * d", "batch * heads * 2 * n * n * d")),
    Mistake("elements, not bytes", "elements", fails=("naive_bytes", "tiled_bytes", "tiled_bytes_with_a_partial_tile"),
            code=changed("torch.finfo(dtype).bits // 8", "1")),
    Mistake("the score matrix counted once", "scores_once", fails=("naive_bytes",),
            code=changed("4 * n * d + 4 * n * n", "4 * n * d + n * n")),
    Mistake("K and V read once", "kv_once", fails=("tiled_bytes", "tiled_bytes_with_a_partial_tile"),
            code=changed("2 * n * d * math.ceil(n / block_q)", "2 * n * d")),
    Mistake("whole query tiles only", "floor_tiles", fails=("tiled_bytes_with_a_partial_tile",),
            code=changed("math.ceil(n / block_q)", "(n // block_q)")),
]


ALTERNATIVES = [
    Alternative("itemsize and a ceiling by negation", '''def attention_costs(batch, heads, n, d, dtype, block_q=None):
    heads_total = batch * heads
    matmul = 2 * n * n * d
    if block_q:
        tiles = -(-n // block_q)
        moved = (n * d) * 2 + tiles * (n * d) * 2
    else:
        moved = 2 * n * d + n * n + 2 * n * n + n * n + n * d + n * d
    return 2 * matmul * heads_total, moved * heads_total * dtype.itemsize
'''),
]


DEGENERATES = [
    Degenerate("zeros", '''def attention_costs(batch, heads, n, d, dtype, block_q=None):
    return 0, 0
'''),
    Degenerate("the sizes of the inputs", '''def attention_costs(batch, heads, n, d, dtype, block_q=None):
    return batch * heads * n * d, batch * heads * n * d * 4
'''),
]
