"""Hidden tests for decode_step_costs(batch, context, num_heads, head_dim, num_kv_heads=None,
latent_dim=None, weights=0, element_bytes=2) -> (flops, bytes) and compute_bound_batch(context,
num_heads, head_dim, peak_flops, bandwidth, **layer) -> the smallest compute-bound batch or None."""

import math
from fractions import Fraction

from autograder.harness import checks

CAUSES = {
    "k_only": "the cache's bytes of the keys only: each key/value head keeps a key and a value per token",
    "half_flops": "FLOPs of the scores only (or one FLOP per multiply-add): each query head does 2 * head_dim FLOPs "
                  "per cached token for q.k and as many for the weighted sum of the values",
    "elements": "the cache counted in numbers, not bytes: multiply by element_bytes",
    "repeated_heads": "a cache of num_heads heads: GQA keeps num_kv_heads heads per token",
    "latent_per_head": "a latent per head: MLA's latent (latent_dim numbers per token) is shared by every head",
    "latent_twice": "the latent counted as a key and a value: MLA keeps one latent per token, read once",
    "weights_once": "the weights' FLOPs counted once per step: each parameter does 2 FLOPs for every sequence",
    "weights_per_sequence": "the weights' bytes counted per sequence: they are read once per step and serve the "
                            "whole batch",
    "off_by_one": "a batch one off the smallest whose FLOPs take at least as long as its bytes (round up, and "
                  "compare with >=)",
}
FORMULA = ("bytes = (cache + weights) * element_bytes; flops = num_heads * batch * context * 4 * width "
           "+ 2 * weights * batch (width: head_dim, or latent_dim for MLA).")


def costs(student, *args, **kwargs):
    value = student.call("decode_step_costs", *args, **kwargs)["output"]
    flops, moved = checks.pair(value, "decode_step_costs(...)", ("flops", "bytes"))
    for number, name in ((flops, "flops"), (moved, "bytes")):
        checks.require(isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number),
                       f"decode_step_costs returned {type(number).__name__} as its {name}.",
                       "Return two Python numbers: (flops, bytes).")
    return flops, moved


def grader_costs(batch, context, num_heads, head_dim, num_kv_heads=None, latent_dim=None, weights=0,
                 element_bytes=2, mistake=None):
    width = latent_dim if latent_dim is not None else head_dim
    if latent_dim is not None:
        cached = batch * context * latent_dim * {"latent_per_head": num_heads, "latent_twice": 2}.get(mistake, 1)
    else:
        kv = num_heads if num_kv_heads is None or mistake == "repeated_heads" else num_kv_heads
        cached = batch * context * (1 if mistake == "k_only" else 2) * kv * head_dim
    flops = num_heads * batch * context * (2 if mistake == "half_flops" else 4) * width
    flops += 2 * weights * (1 if mistake == "weights_once" else batch)
    moved = cached * (1 if mistake == "elements" else element_bytes)
    moved += weights * element_bytes * (batch if mistake == "weights_per_sequence" else 1)
    return flops, moved


def compare(student, what, keys, *args, **kwargs):
    got = costs(student, *args, **kwargs)
    want = grader_costs(*args, **kwargs)
    for index, name in ((1, "bytes"), (0, "flops")):
        if not math.isclose(got[index], want[index], rel_tol=1e-9):
            named = [key for key in keys if math.isclose(got[index], grader_costs(*args, **kwargs, mistake=key)[index],
                                                         rel_tol=1e-9)]
            raise checks.Feedback(f"The {name} of {what} are {got[index]:,}, which is not right.",
                                  f"Likely cause: {CAUSES[named[0]]}." if named else FORMULA)


def test_costs_grow_with_the_context(student):
    """The gate: a step over twice the cache reads more bytes and does more FLOPs, both positive."""
    short, long = costs(student, 2, 100, 8, 64), costs(student, 2, 200, 8, 64)
    checks.require(0 < short[0] < long[0] and 0 < short[1] < long[1],
                   f"decode_step_costs gives {short} for 100 cached tokens and {long} for 200: a step over a longer "
                   "cache must read more bytes and do more FLOPs.")


def test_returns_two_numbers(student):
    costs(student, 1, 16, 4, 8)


def test_mha(student):
    compare(student, "MHA in float32 (element_bytes=4)", ("elements", "k_only", "half_flops"), 2, 300, 8, 32,
            element_bytes=4)
    compare(student, "MHA (3 sequences, 1,000 tokens, 16 heads of 64)", ("k_only", "half_flops"), 3, 1000, 16, 64)


def test_gqa(student):
    compare(student, "GQA (16 heads, 4 key/value heads, float32)", ("repeated_heads", "k_only", "half_flops", "elements"),
            3, 1000, 16, 64, num_kv_heads=4, element_bytes=4)


def test_mla(student):
    compare(student, "MLA (128 heads, a latent of 576, float32)",
            ("latent_per_head", "latent_twice", "half_flops", "elements"), 2, 4096, 128, 128, latent_dim=576,
            element_bytes=4)


def test_weights(student):
    compare(student, "a step with 1,000,000 weights", ("weights_once", "weights_per_sequence", "half_flops"),
            5, 64, 4, 32, num_kv_heads=2, weights=10**6, element_bytes=4)


def smallest_batch(costs_of, peak_flops, bandwidth):
    """The smallest compute-bound batch (or None) for costs_of(batch) -> (flops, bytes), linear in the batch."""
    (f0, b0), (f1, b1) = costs_of(0), costs_of(1)
    gain = Fraction(f1 - f0) / Fraction(peak_flops) - Fraction(b1 - b0) / Fraction(bandwidth)
    if gain <= 0:
        return None
    return max(1, math.ceil((Fraction(b0) / Fraction(bandwidth) - Fraction(f0) / Fraction(peak_flops)) / gain))


def grader_batch(context, num_heads, head_dim, peak_flops, bandwidth, **layer):
    return smallest_batch(lambda batch: grader_costs(batch, context, num_heads, head_dim, **layer), peak_flops,
                          bandwidth)


CASES = [  # (what, args, layer): H100 SXM (989e12 FLOP/s, 3.35e12 B/s), H200 (4.8e12 B/s), a round case
    ("MQA, 128 tokens, an H100", (128, 8, 128, 989e12, 3.35e12), dict(num_kv_heads=1, weights=4 * 4096 * 4096)),
    ("MLA, 8,192 tokens, an H200", (8192, 128, 128, 989e12, 4.8e12), dict(latent_dim=576, weights=187_000_000)),
    ("a case exactly on the boundary", (10, 2, 8, 10000, 1000), dict(num_kv_heads=1, weights=7680)),
]


def test_compute_bound_batch(student):
    for what, args, layer in CASES:
        got = student.call("compute_bound_batch", *args, **layer)["output"]
        want = grader_batch(*args, **layer)
        checks.require(got is None or isinstance(got, int) and not isinstance(got, bool),
                       f"compute_bound_batch ({what}) returned {got!r}.", "Return a whole number of sequences (or None).")
        if got == want:
            continue
        context, num_heads, head_dim, peak_flops, bandwidth = args
        own = smallest_batch(lambda batch: costs(student, batch, context, num_heads, head_dim, **layer), peak_flops,
                             bandwidth)
        if got == own:
            hint = "It is the batch your decode_step_costs gives, and those costs are not right here (see its tests)."
        elif got is not None and want is not None and abs(got - want) == 1:
            hint = f"Likely cause: {CAUSES['off_by_one']}."
        else:
            hint = "The smallest batch with flops / peak_flops >= bytes / bandwidth, by decode_step_costs."
        raise checks.Feedback(f"compute_bound_batch ({what}) is {got}, which is not right.", hint)


def test_never_compute_bound(student):
    got = student.call("compute_bound_batch", 4096, 32, 128, 989e12, 3.35e12, weights=4 * 4096 * 4096)["output"]
    checks.require(got is None, f"compute_bound_batch for MHA over 4,096 tokens on an H100 is {got!r}.",
                   "Each sequence's cache brings 1 FLOP per byte, below the ridge: no batch is compute-bound, so "
                   "return None.")
