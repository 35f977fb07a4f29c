"""The catalogue of cache_budget (the tokens that fit in the student's own memory budget, for their own
model): its mistakes (with the cause each must be named by, a key of CAUSES in
autograder/suites/test_cache_budget.py, and the tests it may fail), correct alternatives and degenerate
answers.  Each entry is graded as a student of its own, on that student's variant."""

from functools import partial

from tests.catalogue.entries import Degenerate, Mistake, Alternative, edited
from tests.catalogue.cache_bytes import MISTAKES as CACHE_BYTES_MISTAKES
from tests.notebooks import solution_answers

SOLUTION = solution_answers("latent_attention")["cache_budget"]
changed = partial(edited, SOLUTION)


# The bytes per token worked out in the cell itself (not through kv_cache_bytes_per_token), as the
# alternative below does, with one slip each.
BY_HAND = '''n, h, d = VARIANT["n_layers"], VARIANT["n_heads"], VARIANT["d_head"]
size = {"bfloat16": 2, "float16": 2, "float32": 4}[VARIANT["dtype"]]
budget = VARIANT["budget_gib"] * 2**30
per_token = {"mha": n * 2 * h * d * size, "gqa": n * 2 * VARIANT["n_kv_heads"] * d * size,
             "mla": n * (VARIANT["d_latent"] + VARIANT["d_rope"]) * size}
cache_budget = {kind: budget // bytes_ for kind, bytes_ in per_token.items()}
'''
by_hand = partial(edited, BY_HAND)


MISTAKES = [
    Mistake("one layer's cache per token", "one_layer", fails=("tokens_that_fit",),
            code=by_hand('per_token = {"mha": n * 2', 'per_token = {"mha": 2', '"gqa": n * 2', '"gqa": 2',
                         '"mla": n * (', '"mla": (')),
    Mistake("the keys alone counted", "keys_only", fails=("tokens_that_fit",),
            code=by_hand('"mha": n * 2 * h', '"mha": n * h', '"gqa": n * 2 * VARIANT', '"gqa": n * VARIANT')),
    Mistake("GQA with the group size for its key/value heads", "group_size", fails=("tokens_that_fit",),
            code=by_hand('VARIANT["n_kv_heads"] * d', '(h // VARIANT["n_kv_heads"]) * d')),
    Mistake("MLA's RoPE key counted per head", "rope_per_head", fails=("tokens_that_fit",),
            code=by_hand('VARIANT["d_latent"] + VARIANT["d_rope"]', 'VARIANT["d_latent"] + h * VARIANT["d_rope"]')),
    Mistake("gigabytes, not GiB", "gigabytes", fails=("tokens_that_fit",),
            code=changed('VARIANT["budget_gib"] * 2**30', 'VARIANT["budget_gib"] * 10**9')),
    Mistake("a token that does not fit whole counted", "rounded", fails=("tokens_that_fit",),
            code=changed("budget // kv_cache_bytes_per_token(kind, **model, dtype=CACHE_DTYPE, **extra)",
                         "math.ceil(budget / kv_cache_bytes_per_token(kind, **model, dtype=CACHE_DTYPE, **extra))")),
    Mistake("the released notebook's model (no variant.json)", "other_variant", fails=("tokens_that_fit",),
            code=SOLUTION.replace("VARIANT[", "DEFAULT_VARIANT[").replace("CACHE_DTYPE", "torch.bfloat16")),
    Mistake("floats from true division", "format", fails=("answer_format", "tokens_that_fit"),
            code=changed("budget // kv_cache_bytes_per_token(kind, **model, dtype=CACHE_DTYPE, **extra)",
                         "budget / kv_cache_bytes_per_token(kind, **model, dtype=CACHE_DTYPE, **extra)")),
]


ALTERNATIVES = [
    Alternative("bytes per token worked out by hand, whole floats", '''n, h, d = VARIANT["n_layers"], VARIANT["n_heads"], VARIANT["d_head"]
size = {"bfloat16": 2, "float16": 2, "float32": 4}[VARIANT["dtype"]]
budget = VARIANT["budget_gib"] * 1024 ** 3
per_token = {"mha": n * 2 * h * d * size, "gqa": n * 2 * VARIANT["n_kv_heads"] * d * size,
             "mla": n * (VARIANT["d_latent"] + VARIANT["d_rope"]) * size}
cache_budget = {kind: float(math.floor(budget / bytes_)) for kind, bytes_ in per_token.items()}
'''),
    # The notebook's own idiom, as its locked cell writes it: a name computed at run time, which the
    # reading of the code leaves to the cells' getattr (it reaches a dtype, nothing of the grader's).
    Alternative("the dtype made from its name with getattr, as the locked cell does", '''DTYPE = getattr(torch, VARIANT["dtype"])
available = VARIANT["budget_gib"] * 2**30
per_kind = {}
for kind in ("mha", "gqa", "mla"):
    options = dict(n_layers=VARIANT["n_layers"], n_heads=VARIANT["n_heads"], d_head=VARIANT["d_head"], dtype=DTYPE)
    if kind == "gqa":
        options["n_kv_heads"] = VARIANT["n_kv_heads"]
    elif kind == "mla":
        options.update(d_latent=VARIANT["d_latent"], d_rope=VARIANT["d_rope"])
    per_kind[kind] = available // kv_cache_bytes_per_token(kind, **options)
cache_budget = per_kind
'''),
]

# A slip of kv_cache_bytes_per_token, an exercise of its own (cache_bytes), is charged there alone: the budget
# worked out through the student's own wrong function keeps its points (test_cache_budget.BUILT_ON).
ALTERNATIVES += [Alternative(f"the budget through kv_cache_bytes_per_token {slip.name!r} (cache_bytes's own slip)",
                             slip.code + "\n\n" + SOLUTION)
                 for slip in CACHE_BYTES_MISTAKES if slip.cause in ("keys_only", "one_layer")]


DEGENERATES = [
    Degenerate("the same count for every kind", 'cache_budget = {"mha": 1000, "gqa": 1000, "mla": 1000}\n'),
    Degenerate("zeros", 'cache_budget = {"mha": 0, "gqa": 0, "mla": 0}\n'),
    # The suite also accepts the counts of the student's own kv_cache_bytes_per_token: infinite bytes per
    # token must be no count it accepts (nor a value that stops the grader).
    Degenerate("kv_cache_bytes_per_token redefined to give infinity", '''def kv_cache_bytes_per_token(*args, **kwargs):
    return float("inf")


''' + SOLUTION),
]
