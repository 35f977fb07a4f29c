"""Hidden tests for cache_budget: how many tokens' cache fit in the student's GPU memory budget, for the
student's own model (student.variant, drawn again here from the student's id) cached as MHA, GQA and MLA.

cache_budget = {"mha": int, "gqa": int, "mla": int}: budget_gib * 2**30 // the bytes of one token's
cache.  The bytes per token may be the right ones or those of the student's own kv_cache_bytes_per_token
(a slip there is cache_bytes's to charge, not this exercise's).  A slip made in the cell itself (the
bytes worked out by hand, the budget) is named for each kind it puts wrong.
"""

import torch

from autograder.harness import checks
from autograder.harness.context import StudentError
from autograder.suites.helpers.common import whose_numbers

# The earlier exercises' functions its answers may call (checks.built_on): the bytes per token may be those
# of the student's own kv_cache_bytes_per_token (a slip there is cache_bytes's).
BUILT_ON = {"cache_bytes": ("kv_cache_bytes_per_token",)}

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "other_variant": "These are the numbers of another variant, not yours: work from VARIANT, your copy's "
                     "model and budget (the variant.json beside your notebook).",
    "gigabytes": "the budget counted in gigabytes (10**9 bytes) instead of GiB (2**30 bytes)",
    "rounded": "the token count rounded up: a token whose cache does not fit whole does not fit (use //)",
    "one_layer": "the bytes of one layer's cache per token, not of the n_layers layers'",
    "keys_only": "the keys alone counted per token: the cache holds the values too (2 * heads * d_head per layer)",
    "group_size": "GQA's cache counted with the group size n_heads // n_kv_heads instead of the n_kv_heads "
                  "key/value heads",
    "rope_per_head": "MLA's RoPE key counted once per head: the heads share one d_rope key per token (d_latent + "
                     "d_rope per layer)",
    "format": 'Give cache_budget = {"mha": int, "gqa": int, "mla": int}: whole numbers of tokens.',
}
KINDS = ("mha", "gqa", "mla")
SIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


def answer(student):
    value = student.value("cache_budget")["output"]
    checks.require(isinstance(value, dict) and set(KINDS) <= set(value),
                   f"cache_budget is {type(value).__name__}, not a dict with mha, gqa and mla.", CAUSES["format"])
    return {kind: checks.number(value[kind], f"cache_budget[{kind!r}]", CAUSES["format"], whole=True) for kind in KINDS}


def sizes(numbers, kind):
    return {"mha": {}, "gqa": {"n_kv_heads": numbers["n_kv_heads"]},
            "mla": {"d_latent": numbers["d_latent"], "d_rope": numbers["d_rope"]}}[kind]


# The slips of the bytes per token a student can make in the cell, by cause, and the kinds each changes.
SLIPS = {"one_layer": KINDS, "keys_only": ("mha", "gqa"), "group_size": ("gqa",), "rope_per_head": ("mla",)}


def per_token(numbers, kind, slip=None):
    """The bytes one token adds to the cache of the whole model (the statement's rule), or what a slip
    of SLIPS makes of them."""
    heads, d_head = numbers["n_heads"], numbers["d_head"]
    kv_heads = heads // numbers["n_kv_heads"] if slip == "group_size" else numbers["n_kv_heads"]
    rope = numbers["d_rope"] * (heads if slip == "rope_per_head" else 1)
    per_layer = {"mha": 2 * heads * d_head, "gqa": 2 * kv_heads * d_head, "mla": numbers["d_latent"] + rope}[kind]
    if slip == "keys_only" and kind != "mla":
        per_layer //= 2
    return (1 if slip == "one_layer" else numbers["n_layers"]) * per_layer * SIZE[numbers["dtype"]]


def students_per_token(student, numbers, kind):
    """What the student's kv_cache_bytes_per_token gives for these numbers, where it is wrong there (a slip
    cache_bytes is charged for, checks.students_functions); None where it is right or cannot say."""
    try:
        theirs = checks.students_functions(student, BUILT_ON)
        value = theirs["kv_cache_bytes_per_token"](kind, numbers["n_layers"], numbers["n_heads"], numbers["d_head"],
                                                   getattr(torch, numbers["dtype"]), **sizes(numbers, kind))
        per_token_bytes = checks.number(value, "kv_cache_bytes_per_token", whole=True)
    except (StudentError, checks.Feedback):   # no whole number of bytes: only the right bytes are accepted
        return None
    return per_token_bytes if per_token_bytes > 0 and theirs.strayed else None


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


def cause_of(numbers, kind, tokens, rights):
    """The cause of SLIPS, or of the budget (gigabytes, rounded up), that gives `tokens` for `kind`, where
    `rights` are the bytes per token accepted; None when none does."""
    for cause, how in (("gigabytes", dict(gib=10**9)), ("rounded", dict(rounded=True))):
        if any(tokens == fitting(numbers, right, **how) for right in rights):
            return cause
    for cause, kinds in SLIPS.items():
        slipped = per_token(numbers, kind, cause)
        if kind in kinds and slipped != per_token(numbers, kind) and tokens == fitting(numbers, slipped):
            return cause
    return None


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
    rights = {kind: {per_token(numbers, kind), students_per_token(student, numbers, kind)} - {None} for kind in KINDS}
    wrong = [kind for kind in KINDS if counts[kind] not in {fitting(numbers, right) for right in rights[kind]}]
    if not wrong:
        return
    want = {kind: fitting(numbers, per_token(numbers, kind)) for kind in KINDS}
    gives = checks.where(student.values_shown, "your model and budget give", want)
    observed = f"cache_budget is {counts} ({', '.join(wrong)} wrong){gives}."
    causes = dict.fromkeys(cause_of(numbers, kind, counts[kind], rights[kind]) for kind in wrong)
    if None not in causes:
        raise checks.Feedback(observed, " ".join(checks.likely(CAUSES[cause]) for cause in causes))
    other = whose_numbers(student, lambda others: any(agrees(counts, counts_for(student, others, theirs=False, gib=gib))
                                                      for gib in (2**30, 10**9)))
    raise checks.Feedback(observed, CAUSES["other_variant"] if other else
                          "The budget in bytes (budget_gib * 2**30), divided by the bytes one token adds to the "
                          "cache, rounded down.")
