"""Hidden tests for attention_costs(batch, heads, n, d, dtype, block_q=None) -> (flops, bytes).

The counting rules are the statement's: the FLOPs of the two matrix products; the bytes of every
tensor that goes to memory and comes back (naive), or of Q and O once and K and V once per query
tile (tiled)."""

import math

import torch

from autograder.harness import checks

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {
    "multiply_add": "a multiply-add counted as one FLOP instead of two",
    "elements": "elements counted instead of bytes (multiply by the dtype's size: torch.finfo(dtype).bits // 8)",
    "scores_once": "the score matrix counted once, not written, read, written again as the weights and read "
                   "again (4 N^2 elements per head)",
    "kv_once": "K and V counted once, not once per query tile (ceil(N / block_q) times)",
    "floor_tiles": "N // block_q query tiles instead of ceil(N / block_q): a last, shorter tile still reads all of K "
                   "and V",
    "pair": "Return (flops, bytes) as two integers.",
}
SIZE = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.float64: 8}


def costs(student, batch, heads, n, d, dtype, block_q=None, exact=False):
    """(flops, bytes) as ints; whole floats are accepted unless exact (the statement's two ints)."""
    reply = student.call("attention_costs", batch, heads, n, d, dtype, block_q)
    flops, moved = checks.pair(reply["output"], "attention_costs(...)", ("flops", "bytes"))
    for value, name in ((flops, "flops"), (moved, "bytes")):
        checks.require(type(value) is int or (isinstance(value, float) and value.is_integer()),
                       f"attention_costs returned {name} = {value!r}, not a whole number.", CAUSES["pair"])
    if exact:
        checks.require(type(flops) is int and type(moved) is int, f"attention_costs returned "
                       f"({type(flops).__name__}, {type(moved).__name__}), not two ints.", CAUSES["pair"])
    return int(flops), int(moved)


def reference(batch, heads, n, d, dtype, block_q=None, mistake=None):
    """(flops, bytes) by the statement's rules, or as a named mistake counts them."""
    per_head = batch * heads
    flops = per_head * (2 if mistake == "multiply_add" else 4) * n * n * d
    if block_q is None:
        elements = per_head * (4 * n * d + (n * n if mistake == "scores_once" else 4 * n * n))
    else:
        tiles = 1 if mistake == "kv_once" else (n // block_q if mistake == "floor_tiles" else math.ceil(n / block_q))
        elements = per_head * (2 * n * d + 2 * n * d * tiles)
    return flops, elements * (1 if mistake == "elements" else SIZE[dtype])


def named_mistakes(args, index):
    return {CAUSES[key]: reference(*args, mistake=key)[index]
            for key in ("multiply_add", "elements", "scores_once", "kv_once", "floor_tiles")}


def compare(student, args, index, what, hint):
    got = costs(student, *args)[index]
    want = reference(*args)[index]
    if got != want:
        named = next((cause for cause, value in named_mistakes(args, index).items() if value == got), None)
        raise checks.Feedback(f"{what}: {got:,} where the statement's rules give {want:,}.",
                              f"It matches what {named} gives." if named else hint)


CONFIGS = [(2, 8, 1024, 64, torch.float32), (1, 16, 4096, 128, torch.float16), (4, 4, 300, 32, torch.bfloat16)]


def test_counts_grow_with_the_sequence(student):
    """The gate: FLOPs grow fourfold when n doubles; the bytes of naive attention grow with n."""
    flops, moved = costs(student, 1, 2, 512, 64, torch.float32)
    flops_2n, moved_2n = costs(student, 1, 2, 1024, 64, torch.float32)
    checks.require(flops > 0 and flops_2n == 4 * flops,
                   "The FLOPs of attention do not grow fourfold when n doubles, so they do not count the n x n "
                   "products yet.")
    checks.require(moved_2n > moved > 0,
                   "The bytes of naive attention do not grow with n, so they do not count the tensors yet.")


def test_returns_two_whole_numbers(student):
    """The statement says two integers: Python ints (the other tests accept whole floats, so a float
    costs this point alone)."""
    for block_q in (None, 32):
        costs(student, 1, 1, 128, 16, torch.float32, block_q, exact=True)


def test_flops(student):
    for args in CONFIGS:
        for block_q in (None, 128):
            compare(student, (*args, block_q), 0, f"The FLOPs of attention_{args} with block_q={block_q}",
                    "Two matrix products of 2 * N * N * d FLOPs each, per batch and head.")


def test_naive_bytes(student):
    for args in CONFIGS:
        compare(student, (*args, None), 1, f"The bytes of naive attention {args}",
                "Read Q and K, write S, read S and write P, read P and V, write O.")


def test_tiled_bytes(student):
    for args in CONFIGS[:2]:
        compare(student, (*args, 128), 1, f"The bytes of tiled attention {args} with block_q=128",
                "Read Q and write O once; read K and V once per query tile.")


def test_tiled_bytes_with_a_partial_tile(student):
    args = (4, 4, 300, 32, torch.float32)
    compare(student, (*args, 128), 1, f"The bytes of tiled attention {args} with block_q=128",
            "Read Q and write O once; read K and V once per query tile.")
