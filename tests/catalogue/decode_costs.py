"""The catalogue of decode_costs: its mistakes (with the cause each must be named by, a key of CAUSES in
autograder/suites/test_decode_costs.py, and the tests it may fail), correct alternatives and degenerate
answers."""

from functools import partial

from tests.catalogue.entries import Degenerate, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("decoding")["decode_costs"]
changed = partial(edited, SOLUTION)
BOUND = SOLUTION[SOLUTION.index("def compute_bound_batch"):]
BATCHES = ("compute_bound_batch", "never_compute_bound")


MISTAKES = [
    Mistake("the keys' bytes only", "k_only",
            fails=("mha", "gqa", "weights", "compute_bound_batch"),
            code=changed("cached = batch * context * 2 * kv_heads * head_dim", "cached = batch * context * kv_heads * head_dim")),
    Mistake("one FLOP per multiply-add", "half_flops",
            fails=("mha", "gqa", "mla", "weights", "compute_bound_batch"),
            code=changed("attention = batch * num_heads * context * 2 * (2 * head_dim)",
                         "attention = batch * num_heads * context * 2 * head_dim",
                         "attention = batch * num_heads * context * 2 * (2 * latent_dim)",
                         "attention = batch * num_heads * context * 2 * latent_dim")),
    Mistake("the cache in numbers, not bytes", "elements",
            fails=("mha", "gqa", "mla", "weights", "compute_bound_batch"),
            code=changed("return attention + 2 * weights * batch, (cached + weights) * element_bytes",
                         "return attention + 2 * weights * batch, cached + weights * element_bytes")),
    Mistake("GQA's cache of num_heads heads", "repeated_heads",
            fails=("gqa", "weights", "compute_bound_batch"),
            code=changed("kv_heads = num_heads if num_kv_heads is None else num_kv_heads", "kv_heads = num_heads")),
    Mistake("MLA's latent per head", "latent_per_head",
            fails=("mla", "compute_bound_batch"),
            code=changed("cached = batch * context * latent_dim ", "cached = batch * context * latent_dim * num_heads ")),
    Mistake("the weights' FLOPs once per step", "weights_once",
            fails=("weights", "compute_bound_batch"),
            code=changed("return attention + 2 * weights * batch,", "return attention + 2 * weights,")),
    Mistake("the batch rounded down", "off_by_one",
            fails=("compute_bound_batch",),
            code=changed("return max(1, math.ceil(lag / gain))", "return max(1, math.floor(lag / gain))")),
]


ALTERNATIVES = [
    Alternative("per-token sizes first, the batch found by stepping up", '''def decode_step_costs(batch, context, num_heads, head_dim, num_kv_heads=None, latent_dim=None, weights=0,
                      element_bytes=2):
    if latent_dim:
        per_token_numbers, width = latent_dim, latent_dim
    else:
        per_token_numbers, width = 2 * (num_kv_heads or num_heads) * head_dim, head_dim
    flops = 4 * width * num_heads * context * batch + 2 * weights * batch
    return flops, element_bytes * (per_token_numbers * context * batch + weights)


def compute_bound_batch(context, num_heads, head_dim, peak_flops, bandwidth, **layer):
    f1, b1 = decode_step_costs(1, context, num_heads, head_dim, **layer)
    f2, b2 = decode_step_costs(2, context, num_heads, head_dim, **layer)
    if (f2 - f1) * bandwidth <= (b2 - b1) * peak_flops:
        return None
    batch = 1
    while True:
        flops, moved = decode_step_costs(batch, context, num_heads, head_dim, **layer)
        if flops * bandwidth >= moved * peak_flops:      # flops / peak >= bytes / bandwidth, without dividing
            return batch
        batch += 1
'''),
]


DEGENERATES = [
    Degenerate("zeros", '''def decode_step_costs(batch, context, num_heads, head_dim, num_kv_heads=None, latent_dim=None, weights=0,
                      element_bytes=2):
    return 0, 0
''' + BOUND),
]
