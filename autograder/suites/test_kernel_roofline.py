"""Hidden tests for kernel_roofline(heads, n, d, causal, block_m, block_n, peak_flops, bandwidth,
element_bytes=2) -> (flops, bytes, seconds): the cost of one launch of the FlashAttention kernel."""

import math

from autograder.harness import checks

CAUSES = {
    "causal_half": "the causal FLOPs taken as half of the full count: whole key tiles are computed up to the one "
                   "that holds the tile's last query, diagonal tiles included",
    "kv_once": "K and V counted once in all instead of once per query tile (each program reads them again)",
    "no_lse": "the logsumexp's 4 * n bytes (float32) left out",
    "full_last_tile": "the last key tile counted as a whole block_n keys, past the end of the sequence",
    "sum_not_max": "the time as the sum of compute time and memory time instead of the slower of the two",
    "lse_bytes": "the logsumexp counted with element_bytes instead of 4 bytes (it is float32)",
    "diagonal_keys": "a causal query tile's keys counted up to its last query instead of to the end of the last key "
                     "tile it visits (whole key tiles of block_n are computed; it shows when block_m < block_n)",
}
STATEMENT = ("Per query tile i: rows_i queries, keys_i = min(block_n * tiles visited, n); FLOPs 4 * rows_i * keys_i * d; "
             "bytes (2 * keys_i * d) * element_bytes; plus (2 * n * d) * element_bytes + 4 * n; times heads; "
             "seconds = max(FLOPs / peak_flops, bytes / bandwidth).")


def costs(heads, n, d, causal, block_m, block_n, peak, bandwidth, element_bytes=2, mistake=""):
    """The grader's (flops, bytes, seconds), or a named mistake's."""
    flops = moved = 0
    tiles_all = math.ceil(n / block_n)
    for start in range(0, n, block_m):
        rows = min(block_m, n - start)
        visited = math.ceil(min(start + block_m, n) / block_n) if causal else tiles_all
        keys = visited * block_n if mistake == "full_last_tile" else min(visited * block_n, n)
        if mistake == "diagonal_keys" and causal:
            keys = min(start + block_m, n)
        flops += 4 * rows * keys * d
        moved += 0 if mistake == "kv_once" else 2 * keys * d * element_bytes
    if mistake == "kv_once":
        moved += 2 * n * d * element_bytes
    if mistake == "causal_half" and causal:
        flops = costs(1, n, d, False, block_m, block_n, peak, bandwidth, element_bytes)[0] // 2
    lse = {"no_lse": 0, "lse_bytes": n * element_bytes}.get(mistake, 4 * n)
    moved += 2 * n * d * element_bytes + lse
    flops, moved = heads * flops, heads * moved
    seconds = flops / peak + moved / bandwidth if mistake == "sum_not_max" else max(flops / peak, moved / bandwidth)
    return flops, moved, seconds


def roofline(student, *args):
    reply = student.call("kernel_roofline", *args)
    result = checks.pair(reply["output"], f"kernel_roofline{args}", ("flops", "bytes", "seconds"))
    for name, value in zip(("flops", "bytes"), result[:2]):
        checks.require(type(value) is int, f"{name} is {type(value).__name__}, not a Python int.",
                       "Count with integers (math.ceil, //) and return int.")
    checks.require(isinstance(result[2], (int, float)), f"seconds is {type(result[2]).__name__}, not a number.")
    return result


def equal(index, got, want):
    """FLOPs and bytes (index 0, 1) are whole numbers; seconds (2) equal to rounding."""
    return math.isclose(got, want, rel_tol=1e-9) if index == 2 else got == want


def check(student, args, index, what, mistakes=()):
    got = roofline(student, *args)[index]
    if equal(index, got, costs(*args)[index]):
        return
    for key in mistakes:
        if equal(index, got, costs(*args, mistake=key)[index]):
            raise checks.Feedback(f"{what} of kernel_roofline{args} is {got:,}, which is not right.", CAUSES[key])
    raise checks.Feedback(f"{what} of kernel_roofline{args} is {got:,}, which is not right.", STATEMENT)


EVEN = (2, 512, 64, False, 128, 64, 1e14, 2e12)
CAUSAL = (3, 512, 64, True, 64, 64, 1e14, 2e12)
PARTIAL = (1, 200, 32, True, 64, 32, 1e13, 1e12, 4)
NARROW_QUERY_TILES = (1, 200, 32, True, 32, 64, 1e13, 1e12, 4)   # block_m < block_n: diagonal tiles half visible


def test_costs_grow_with_the_sequence(student):
    """The gate: FLOPs and bytes grow with n, and the time is a positive number."""
    small, large = roofline(student, 2, 256, 64, False, 64, 64, 1e14, 2e12), roofline(student, *EVEN)
    checks.require(large[0] > small[0] > 0 and large[1] > small[1] > 0 and large[2] > 0,
                   "kernel_roofline's FLOPs and bytes do not grow with the sequence length, so it counts nothing yet.")


def test_returns_three_numbers(student):
    roofline(student, *EVEN)


def test_flops(student):
    check(student, EVEN, 0, "flops")


def test_bytes(student):
    check(student, EVEN, 1, "bytes", ("kv_once", "no_lse", "lse_bytes"))


def test_causal(student):
    check(student, CAUSAL, 0, "flops (causal)", ("causal_half",))
    check(student, CAUSAL, 1, "bytes (causal)", ("kv_once", "no_lse", "lse_bytes"))


def test_partial_tiles(student):
    check(student, PARTIAL, 0, "flops (200 tokens, key tiles of 32)", ("full_last_tile", "causal_half"))
    check(student, PARTIAL, 1, "bytes (200 tokens, key tiles of 32)", ("full_last_tile", "kv_once", "no_lse", "lse_bytes"))
    check(student, NARROW_QUERY_TILES, 0, "flops (200 tokens, query tiles of 32, key tiles of 64)",
          ("diagonal_keys", "full_last_tile", "causal_half"))
    check(student, NARROW_QUERY_TILES, 1, "bytes (200 tokens, query tiles of 32, key tiles of 64)",
          ("diagonal_keys", "full_last_tile", "kv_once", "no_lse", "lse_bytes"))


def test_time_is_the_slower_limit(student):
    for args in ((2, 512, 64, False, 128, 64, 1e15, 1e11), (2, 512, 64, False, 128, 64, 1e12, 1e13)):
        # memory-bound, then compute-bound
        check(student, args, 2, "seconds", ("sum_not_max",))
