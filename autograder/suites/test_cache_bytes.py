"""Hidden tests for kv_cache_bytes_per_token(kind, n_layers, n_heads, d_head, dtype, n_kv_heads=None,
d_latent=None, d_rope=None) -> int: the bytes one token adds to the cache of a whole model.

Each kind is tested on one layer in a one-byte dtype (float8), so that a slip in the layers or the
bytes costs its own test only."""

import torch

from autograder.harness import checks
from autograder.suites.helpers.common import expect_value_error

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "keys_only": "the keys counted but not the values (MHA, GQA and MQA cache both: a factor 2)",
    "group_size": "GQA counted with the group size num_heads // n_kv_heads instead of the n_kv_heads key/value heads",
    "mla_per_head": "the MLA latent and RoPE key counted once per head: both are shared by all the heads",
    "mla_two": "the MLA latent counted twice, as if keys and values each had one: one latent gives both",
    "elements": "numbers counted instead of bytes (multiply by the dtype's size: torch.finfo(dtype).bits // 8)",
    "one_layer": "one layer counted: every layer keeps its own cache",
    "kind": "Raise ValueError for a kind other than 'mha', 'gqa', 'mqa' and 'mla'.",
    "whole": "Return a whole number of bytes as an int (a product with a float in it, or /, gives a float: use //).",
}
FP8 = torch.float8_e4m3fn
# DeepSeek-V2's attention: 128 heads of 128, a 512-wide latent and a 64-wide RoPE key; GQA with 8 groups.
HEADS, D_HEAD, KV_HEADS, LATENT, ROPE = 128, 128, 8, 512, 64


def per_token(student, kind, n_layers=1, dtype=FP8, n_heads=HEADS, d_head=D_HEAD, strict=False, **sizes):
    """The student's bytes as an int; a whole float is taken as its value except where `strict` (the one
    test of the return type), so that returning a float costs that test only."""
    reply = student.call("kv_cache_bytes_per_token", kind, n_layers, n_heads, d_head, dtype, **sizes)
    value = reply["output"]
    whole = type(value) is int or (not strict and isinstance(value, float) and value.is_integer())
    checks.require(whole, f"kv_cache_bytes_per_token({kind!r}, ...) returned {value!r}.", CAUSES["whole"])
    return int(value)


def sizes_of(kind):
    return {"gqa": {"n_kv_heads": KV_HEADS}, "mla": {"d_latent": LATENT, "d_rope": ROPE}}.get(kind, {})


def compare(student, kind, want, named):
    got = per_token(student, kind, **sizes_of(kind))
    if got != want:
        found = next((CAUSES[key] for key, value in named.items() if value == got), None)
        raise checks.Feedback(f"kv_cache_bytes_per_token({kind!r}, n_layers=1, n_heads={HEADS}, d_head={D_HEAD}, "
                              f"float8{', ' if sizes_of(kind) else ''}"
                              f"{', '.join(f'{k}={v}' for k, v in sizes_of(kind).items())}) gave {got:,} where "
                              f"{want:,} is right.", f"It matches {found}." if found else "")


def test_grows_with_the_heads(student):
    """The gate: twice the heads cache twice the bytes per token in MHA, and something at all."""
    one, two = (per_token(student, "mha", 30, torch.bfloat16, n_heads=heads) for heads in (16, 32))
    checks.require(one > 0 and two == 2 * one, f"The MHA cache per token is {one:,} bytes with 16 heads and {two:,} "
                   "with 32, so it does not count each head's keys and values yet.")


def test_returns_whole_numbers_and_rejects_unknown_kinds(student):
    for kind in ("mha", "gqa", "mqa", "mla"):
        per_token(student, kind, strict=True, **sizes_of(kind))
    expect_value_error(lambda: student.call("kv_cache_bytes_per_token", "flash", 1, 8, 64, torch.float16),
                         "kv_cache_bytes_per_token('flash', ...)", CAUSES["kind"])


def test_multi_head(student):
    compare(student, "mha", 2 * HEADS * D_HEAD, {"keys_only": HEADS * D_HEAD})


def test_grouped_and_multi_query(student):
    compare(student, "gqa", 2 * KV_HEADS * D_HEAD, {"keys_only": KV_HEADS * D_HEAD,
                                                    "group_size": 2 * HEADS // KV_HEADS * D_HEAD})
    compare(student, "mqa", 2 * D_HEAD, {"keys_only": D_HEAD})


def test_latent(student):
    compare(student, "mla", LATENT + ROPE, {"mla_per_head": HEADS * (LATENT + ROPE), "mla_two": 2 * LATENT + ROPE})


def test_bytes_of_the_dtype(student):
    for dtype, size in ((torch.bfloat16, 2), (torch.float32, 4)):
        got = per_token(student, "mla", 1, dtype, d_latent=LATENT, d_rope=ROPE)
        fp8 = per_token(student, "mla", 1, FP8, d_latent=LATENT, d_rope=ROPE)
        checks.require(got == size * fp8, f"The MLA cache per token is {got:,} bytes in {dtype} and {fp8:,} in "
                       f"float8, where {dtype} takes {size} bytes a number.",
                       f"Likely cause: {CAUSES['elements']}." if got == fp8 else "")


def test_every_layer(student):
    one = per_token(student, "gqa", 1, torch.bfloat16, n_kv_heads=KV_HEADS)
    many = per_token(student, "gqa", 61, torch.bfloat16, n_kv_heads=KV_HEADS)
    checks.require(many == 61 * one, f"The GQA cache per token is {one:,} bytes for 1 layer and {many:,} for 61.",
                   f"Likely cause: {CAUSES['one_layer']}." if many == one else "")
