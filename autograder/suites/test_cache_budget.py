"""Hidden tests for cache_budget: how many tokens' cache fit in the student's GPU memory budget, for the
student's own model (student.variant, drawn again here from the student's id) cached as MHA, GQA and MLA.

cache_budget = {"mha": int, "gqa": int, "mla": int}: budget_gib * 2**30 // the bytes of one token's
cache.  The bytes per token may be the right ones or those of the student's own kv_cache_bytes_per_token
(a slip there is cache_bytes's to charge, not this exercise's).
"""

import torch

from autograder.harness import checks
from autograder.sandbox.student import StudentError
from autograder.suites.helpers.common import whose_numbers

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "other_variant": "These are the numbers of another variant, not yours: work from VARIANT, your copy's "
                     "model and budget (the variant.json beside your notebook).",
    "gigabytes": "the budget counted in gigabytes (10**9 bytes) instead of GiB (2**30 bytes)",
    "rounded": "the token count rounded up: a token whose cache does not fit whole does not fit (use //)",
    "format": 'Give cache_budget = {"mha": int, "gqa": int, "mla": int}: whole numbers of tokens.',
}
KINDS = ("mha", "gqa", "mla")
SIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


def answer(student):
    value = student.value("cache_budget")["output"]
    checks.require(isinstance(value, dict) and set(KINDS) <= set(value),
                   f"cache_budget is {type(value).__name__}, not a dict with mha, gqa and mla.", CAUSES["format"])
    counts = {}
    for kind in KINDS:
        tokens = value[kind]
        if isinstance(tokens, torch.Tensor) and tokens.numel() == 1:
            tokens = tokens.item()
        checks.require(type(tokens) is int or (isinstance(tokens, float) and tokens.is_integer()),
                       f"cache_budget[{kind!r}] is {tokens!r}, not a whole number of tokens.", CAUSES["format"])
        counts[kind] = int(tokens)
    return counts


def sizes(numbers, kind):
    return {"mha": {}, "gqa": {"n_kv_heads": numbers["n_kv_heads"]},
            "mla": {"d_latent": numbers["d_latent"], "d_rope": numbers["d_rope"]}}[kind]


def per_token(numbers, kind):
    """The bytes one token adds to the cache of the whole model (the statement's rule)."""
    per_layer = {"mha": 2 * numbers["n_heads"] * numbers["d_head"], "gqa": 2 * numbers["n_kv_heads"] * numbers["d_head"],
                 "mla": numbers["d_latent"] + numbers["d_rope"]}[kind]
    return numbers["n_layers"] * per_layer * SIZE[numbers["dtype"]]


def students_per_token(student, numbers, kind):
    """What the student's kv_cache_bytes_per_token gives for these numbers (None when it cannot)."""
    try:
        value = student.call("kv_cache_bytes_per_token", kind, numbers["n_layers"], numbers["n_heads"],
                             numbers["d_head"], getattr(torch, numbers["dtype"]), **sizes(numbers, kind))["output"]
    except StudentError:
        return None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def fitting(numbers, per_token_bytes, gib=2**30, rounded=False):
    budget = numbers["budget_gib"] * gib
    return -(-budget // per_token_bytes) if rounded else budget // per_token_bytes


def counts_for(student, numbers, theirs=True, **how):
    """{kind: the set of token counts accepted}: with the right bytes per token and, with `theirs`, with
    what the student's own kv_cache_bytes_per_token gives."""
    accepted = {}
    for kind in KINDS:
        options = {per_token(numbers, kind), students_per_token(student, numbers, kind) if theirs else None} - {None}
        accepted[kind] = {fitting(numbers, option, **how) for option in options}
    return accepted


def agrees(counts, accepted):
    return all(counts[kind] in accepted[kind] for kind in KINDS)


def test_counts_tokens(student):
    """The gate: positive token counts, more of them where the keys and values are shared (GQA).  (MLA is
    left out: a slip in kv_cache_bytes_per_token's MLA is that exercise's to charge.)"""
    counts = answer(student)
    checks.require(all(tokens > 0 for tokens in counts.values()), f"cache_budget is {counts}: no tokens fit.")
    checks.require(counts["gqa"] > counts["mha"], f"cache_budget is {counts}: sharing keys and values (GQA) fits "
                   "more tokens than MHA, so the counts do not follow the cache's size yet.")


def test_answer_format(student):
    answer(student)


def test_tokens_that_fit(student):
    counts = answer(student)
    numbers = student.variant
    if agrees(counts, counts_for(student, numbers)):
        return
    want = {kind: fitting(numbers, per_token(numbers, kind)) for kind in KINDS}
    observed = f"cache_budget is {counts}, where your model and budget give {want}."
    if agrees(counts, counts_for(student, numbers, gib=10**9)):
        raise checks.Feedback(observed, f"Likely cause: {CAUSES['gigabytes']}.")
    if agrees(counts, counts_for(student, numbers, rounded=True)):
        raise checks.Feedback(observed, f"Likely cause: {CAUSES['rounded']}.")
    other = whose_numbers(student, lambda others: any(agrees(counts, counts_for(student, others, theirs=False, gib=gib))
                                                      for gib in (2**30, 10**9)))
    raise checks.Feedback(observed, CAUSES["other_variant"] if other else
                          "The budget in bytes (budget_gib * 2**30), divided by the bytes one token adds to the "
                          "cache, rounded down.")
