"""Hidden tests for qkv_parameter_counts(d_model, num_heads, bias=False) -> dict of three counts."""

from autograder.harness import checks
from autograder.suites.helpers.common import expect_value_error

KEYS = ("full_heads", "split_heads", "fused")
CASES = [(48, 6), (20, 4), (512, 8)]


# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "float_division": "Use integer arithmetic (// rather than /).",
    "fused": "Three d_model x d_model matrices: one each for Q, K and V.",
    "split_heads": "Each of the H heads has three d_model x d_k matrices, with d_k = d_model // H.",
    "full_heads": "Each of the H heads has three full d_model x d_model matrices.",
    "bias": "bias=True must add the biases: one per output feature of each projection.",
    "divisible": "Raise ValueError when d_model % num_heads != 0.",
}


def expected(d_model, num_heads, bias=False):
    d_k = d_model // num_heads

    def projection(d_out):
        return d_model * d_out + (d_out if bias else 0)

    return {"full_heads": 3 * num_heads * projection(d_model),
            "split_heads": 3 * num_heads * projection(d_k),
            "fused": 3 * projection(d_model)}


def counts(student, d_model, num_heads, **kwargs):
    value = student.call("qkv_parameter_counts", d_model, num_heads, **kwargs)["output"]
    checks.require(isinstance(value, dict) and all(key in value for key in KEYS),
                   f"qkv_parameter_counts returned {type(value).__name__}; expected a dict with keys "
                   + ", ".join(repr(key) for key in KEYS) + ".")
    return value


def count(value, key):
    """One count, which must be an int."""
    checks.require(isinstance(value[key], int) and not isinstance(value[key], bool),
                   f"The count {key!r} is a {type(value[key]).__name__}, not an int.",
                   CAUSES["float_division"])
    return value[key]


def check_count(student, key, hint, bias=False):
    for d_model, num_heads in CASES:
        got = count(counts(student, d_model, num_heads, **({"bias": True} if bias else {})), key)
        checks.equal(got, expected(d_model, num_heads, bias)[key],
                     f"The {key!r} count for d_model={d_model}, {num_heads} heads"
                     + (", bias=True" if bias else ""), hint)


def test_counts_grow_with_the_model(student):
    """The gate: every count is a number that grows with d_model, and full-width heads cost more
    the more heads there are."""
    small, large, more_heads = counts(student, 48, 6), counts(student, 96, 6), counts(student, 48, 12)
    for key in KEYS:
        checks.require(all(isinstance(value[key], (int, float)) and not isinstance(value[key], bool)
                           for value in (small, large, more_heads)) and large[key] > small[key] > 0,
                       f"The {key!r} count does not grow with d_model (48 -> 96 with 6 heads), so it does not "
                       "count the parameters yet.")
    checks.require(more_heads["full_heads"] > small["full_heads"],
                   "The 'full_heads' count does not grow with the number of heads (6 -> 12), so it does not count "
                   "the parameters yet.")


def test_fused_projection(student):
    check_count(student, "fused", CAUSES["fused"])


def test_split_heads(student):
    check_count(student, "split_heads",
                CAUSES["split_heads"])


def test_full_width_heads(student):
    check_count(student, "full_heads", CAUSES["full_heads"])


def test_counts_biases(student):
    """bias=True adds exactly the biases: compared as the difference of the student's own counts,
    so a wrong weight count is charged to its own test only."""
    for d_model, num_heads in CASES:
        with_bias, without = counts(student, d_model, num_heads, bias=True), counts(student, d_model, num_heads)
        for key in KEYS:
            want = expected(d_model, num_heads, True)[key] - expected(d_model, num_heads)[key]
            added = count(with_bias, key) - count(without, key)
            checks.equal(added, want,
                         f"The biases bias=True adds to the {key!r} count for d_model={d_model}, {num_heads} heads",
                         CAUSES["bias"] if added == 0
                         else "")


def test_rejects_indivisible_d_model(student):
    expect_value_error(lambda: counts(student, 10, 3), "qkv_parameter_counts(10, 3)",
                         CAUSES["divisible"])
