"""The catalogue of kernel_roofline: its mistakes (with the cause each must be named by, a key of CAUSES
in autograder/suites/test_kernel_roofline.py, and the tests it may fail), correct alternatives and
degenerate answers."""

from functools import partial

from tests.catalogue.entries import Degenerate, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("triton_attention")["kernel_roofline"]
changed = partial(edited, SOLUTION)


MISTAKES = [
    Mistake("causal FLOPs as half of the full count", "causal_half",
            fails=("causal", "partial_tiles"),
            code=changed("    flops, moved = heads * flops, heads * moved\n",
                         "    if causal:\n        flops = 4 * n * n * d // 2\n    flops, moved = heads * flops, heads * moved\n")),
    Mistake("K and V read once in all", "kv_once",
            fails=("bytes", "causal", "partial_tiles", "time_is_the_slower_limit"),
            code=changed("        moved += 2 * keys * d * element_bytes                    # K and V read once per query tile\n",
                         "",
                         "    moved += 2 * n * d * element_bytes + 4 * n",
                         "    moved += 4 * n * d * element_bytes + 4 * n")),
    Mistake("the logsumexp left out", "no_lse",
            fails=("bytes", "causal", "partial_tiles", "time_is_the_slower_limit"),
            code=changed("    moved += 2 * n * d * element_bytes + 4 * n", "    moved += 2 * n * d * element_bytes")),
    Mistake("the logsumexp in element_bytes", "lse_bytes",   # the same where element_bytes is 4 (partial_tiles)
            fails=("bytes", "causal", "time_is_the_slower_limit"),
            code=changed("    moved += 2 * n * d * element_bytes + 4 * n",
                         "    moved += 2 * n * d * element_bytes + n * element_bytes")),
    Mistake("the last key tile counted whole", "full_last_tile",
            fails=("partial_tiles",),
            code=changed("        keys = min(math.ceil(end / block_n) * block_n, n)       # whole key tiles, the last one short\n",
                         "        keys = math.ceil(end / block_n) * block_n\n")),
    Mistake("causal keys counted up to the tile's last query, not in whole key tiles", "diagonal_keys",
            fails=("partial_tiles",),
            code=changed("        keys = min(math.ceil(end / block_n) * block_n, n)       # whole key tiles, the last one short\n",
                         "        keys = end\n")),
    Mistake("compute time plus memory time", "sum_not_max",
            fails=("time_is_the_slower_limit",),
            code=changed("max(flops / peak_flops, moved / bandwidth)", "flops / peak_flops + moved / bandwidth")),
]


ALTERNATIVES = [
    Alternative("closed forms per query tile with integer division", '''def kernel_roofline(heads, n, d, causal, block_m, block_n, peak_flops, bandwidth, element_bytes=2):
    key_tiles = -(-n // block_n)
    flops = 0
    kv = 0
    for i in range(-(-n // block_m)):
        rows = min(block_m, n - i * block_m)
        tiles = -(-min((i + 1) * block_m, n) // block_n) if causal else key_tiles
        keys = min(tiles * block_n, n)
        flops += 4 * rows * keys * d
        kv += 2 * keys * d
    total_bytes = heads * ((kv + 2 * n * d) * element_bytes + 4 * n)
    total_flops = heads * flops
    return int(total_flops), int(total_bytes), float(max(total_flops / peak_flops, total_bytes / bandwidth))
'''),
]


DEGENERATES = [
    Degenerate("zeros", '''def kernel_roofline(heads, n, d, causal, block_m, block_n, peak_flops, bandwidth, element_bytes=2):
    return 0, 0, 0.0
'''),
    Degenerate("constants", '''def kernel_roofline(heads, n, d, causal, block_m, block_n, peak_flops, bandwidth, element_bytes=2):
    return 1, 1, 1.0
'''),
]
