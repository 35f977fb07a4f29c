"""The catalogue of cache_bytes (kv_cache_bytes_per_token): its mistakes (with the cause each must be
named by, a key of CAUSES in autograder/suites/test_cache_bytes.py, and the tests it may fail), correct
alternatives and degenerate answers."""

from functools import partial

from tests.catalogue.entries import Degenerate, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("latent_attention")["cache_bytes"]
changed = partial(edited, SOLUTION)


MISTAKES = [
    Mistake("the keys only", "keys_only",
            fails=("multi_head", "grouped_and_multi_query"),
            code=changed("2 * n_heads * d_head", "n_heads * d_head", "2 * n_kv_heads * d_head", "n_kv_heads * d_head",
                         "2 * d_head", "d_head")),
    Mistake("GQA with the group size", "group_size",
            fails=("grouped_and_multi_query",),
            code=changed("2 * n_kv_heads * d_head", "2 * (n_heads // n_kv_heads) * d_head")),
    Mistake("MLA once per head", "mla_per_head",
            fails=("latent",),
            code=changed("per_layer = d_latent + d_rope", "per_layer = n_heads * (d_latent + d_rope)")),
    Mistake("MLA's latent for keys and for values", "mla_two",
            fails=("latent",),
            code=changed("per_layer = d_latent + d_rope", "per_layer = 2 * d_latent + d_rope")),
    Mistake("numbers, not bytes", "elements",
            fails=("bytes_of_the_dtype",),
            code=changed("size = torch.finfo(dtype).bits // 8", "size = 1")),
    Mistake("one layer", "one_layer",
            fails=("every_layer",),
            code=changed("return n_layers * per_layer * size", "return per_layer * size")),
    Mistake("the bytes of the dtype as a float (bits / 8)", "whole",
            fails=("returns_whole_numbers_and_rejects_unknown_kinds",),
            code=changed("size = torch.finfo(dtype).bits // 8", "size = torch.finfo(dtype).bits / 8")),
]


ALTERNATIVES = [
    Alternative("a table of numbers per layer, itemsize", '''def kv_cache_bytes_per_token(kind, n_layers, n_heads, d_head, dtype, n_kv_heads=None, d_latent=None, d_rope=None):
    numbers = {
        "mha": lambda: 2 * n_heads * d_head,
        "gqa": lambda: 2 * n_kv_heads * d_head,
        "mqa": lambda: 2 * d_head,
        "mla": lambda: d_latent + d_rope,
    }
    if kind not in numbers:
        raise ValueError(kind)
    return numbers[kind]() * n_layers * torch.empty((), dtype=dtype).element_size()
'''),
    Alternative("MHA and MQA as GQA", '''def kv_cache_bytes_per_token(kind, n_layers, n_heads, d_head, dtype, n_kv_heads=None, d_latent=None, d_rope=None):
    width = dtype.itemsize
    if kind == "mla":
        return int(n_layers * (d_latent + d_rope) * width)
    groups = {"mha": n_heads, "mqa": 1, "gqa": n_kv_heads}
    if kind not in groups:
        raise ValueError(f"kind {kind}")
    return int(2 * groups[kind] * d_head * n_layers * width)
'''),
]


DEGENERATES = [
    Degenerate("zeros", '''def kv_cache_bytes_per_token(kind, n_layers, n_heads, d_head, dtype, n_kv_heads=None, d_latent=None, d_rope=None):
    if kind not in ("mha", "gqa", "mqa", "mla"):
        raise ValueError(kind)
    return 0
'''),
    Degenerate("the same for every kind", '''def kv_cache_bytes_per_token(kind, n_layers, n_heads, d_head, dtype, n_kv_heads=None, d_latent=None, d_rope=None):
    if kind not in ("mha", "gqa", "mqa", "mla"):
        raise ValueError(kind)
    return n_layers * d_head * torch.finfo(dtype).bits // 8
'''),
]
