"""Hidden tests for PagedKVCache(num_blocks, block_size, num_heads, num_kv_heads, head_dim, dtype) with
append(seq, k, v), free(seq) and forward(q, seqs): a paged KV cache.

forward is compared with plain attention over each sequence's concatenated keys and values.  What the
cache holds is read from the module itself, never from what it reports: the blocks each sequence
holds are found in the pool's tensors by their content, in a pool with exactly the blocks the
sequences need; a freed sequence's blocks must serve the next one; the tensors the module keeps must
hold the num_kv_heads heads, not the repeated ones."""

import math

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers.common import crash_hint, named, run_module
from autograder.suites.helpers.paged import padded_heads, ragged_attention, ragged_cache

CAUSES = {
    "stride": "a token's row in the pool taken as block + t % block_size instead of block * block_size + "
              "t % block_size: token t of a sequence lives in block table[t // block_size], at slot "
              "t % block_size, row block * block_size + slot of the pool seen as [num_blocks * block_size, ...]",
    "partial": "every slot of a sequence's last block read: the last block may be partly filled (its other slots hold "
               "zeros or an earlier sequence's tokens); attend to the sequence's first length tokens only",
    "blocks_per_sequence": "more blocks taken than ceil(length / block_size) per sequence: take a new block only "
                           "when the sequence's last block is full (length == len(table) * block_size)",
    "not_freed": "free(seq) not giving the sequence's blocks back to the free list: the next sequence needs them",
    "cached_repeated": "the pool holding the keys and values after repeat_interleave (num_heads heads) instead of "
                       "the num_kv_heads heads appended: keep the pool at [num_blocks, block_size, num_kv_heads, "
                       "head_dim] and repeat for the groups when attending",
}
OUT_OF_BLOCKS = ("out of blocks", "pop from empty list", "pop index out of range")
STATEMENT = ("forward(q, seqs)[b] is attention of q[b] over the tokens sequence seqs[b] holds, read through its "
             "block table; query head h reads key/value head h // (num_heads // num_kv_heads).")


class Pool:
    """The grader's own paged cache, with the allocation order of the statement's reference (the free
    list's last block first), to recompute what a named mistake gives: "stride" or "partial"."""

    def __init__(self, num_blocks, block_size, kv_heads, d, mistake=None):
        self.k = torch.zeros(num_blocks * block_size, kv_heads, d, dtype=torch.float64)
        self.v = torch.zeros_like(self.k)
        self.block_size, self.mistake = block_size, mistake
        self.unused, self.tables, self.lengths = list(range(num_blocks)), {}, {}

    def rows(self, seq, positions):
        table = torch.tensor(self.tables[seq])
        step = 1 if self.mistake == "stride" else self.block_size
        return table[positions // self.block_size] * step + positions % self.block_size

    def append(self, seq, k, v):
        table = self.tables.setdefault(seq, [])
        start = self.lengths.get(seq, 0)
        while len(table) * self.block_size < start + len(k):
            table.append(self.unused.pop())
        rows = self.rows(seq, torch.arange(start, start + len(k)))
        self.k[rows], self.v[rows] = k.double(), v.double()
        self.lengths[seq] = start + len(k)

    def free(self, seq):
        self.unused.extend(self.tables.pop(seq))
        del self.lengths[seq]

    def forward(self, q, seqs):
        outs = []
        for b, seq in enumerate(seqs):
            n = len(self.tables[seq]) * self.block_size if self.mistake == "partial" else self.lengths[seq]
            rows = self.rows(seq, torch.arange(n))
            k, v = self.k[rows].transpose(0, 1)[None], self.v[rows].transpose(0, 1)[None]
            outs.append(ragged_attention(q[b:b + 1], k, v, [n])[0][0])
        return torch.stack(outs)


def growth(keys, values, chunk):
    """The appends of a ragged batch, `chunk` tokens at a time, the sequences interleaved."""
    calls = []
    for start in range(0, max(len(k) for k in keys), chunk):
        calls += [("append", (seq, keys[seq][start:start + chunk], values[seq][start:start + chunk]), {})
                  for seq in range(len(keys)) if start < len(keys[seq])]
    return calls


def run(student, shape, calls, held=False, hint=None):
    """The reply of a PagedKVCache(*shape, dtype=float64) that ran `calls`."""
    with crash_hint(hint or CAUSES["blocks_per_sequence"], when=OUT_OF_BLOCKS):
        return run_module(student, "PagedKVCache", shape, {"dtype": torch.float64}, calls=calls, dtype=None,
                          held=held)


def attended(reply, what, shape=None):
    """forward's output, a tensor; of `shape` [B, num_heads, head_dim] where the caller reads into it."""
    out = checks.tensor(reply["outputs"][-1], f"forward(q, seqs) ({what})")
    if shape is not None:
        checks.shape(out, shape, f"forward(q, seqs) ({what})", "One output per sequence and query head: "
                     "[B, num_heads, head_dim].")
    return out


def expected(q, keys, values):
    return ragged_attention(q, padded_heads(keys), padded_heads(values), [len(k) for k in keys])[0]


def simulated(shape, calls, mistake):
    num_blocks, block_size, _, kv_heads, d = shape
    pool = Pool(num_blocks, block_size, kv_heads, d, mistake)
    result = None
    for method, args, _ in calls:
        result = getattr(pool, method)(*args)
    return result


def compare(student, shape, lengths, chunk, what, seed, mistakes=("stride",)):
    _, _, heads, kv_heads, d = shape
    keys, values = ragged_cache(len(lengths), kv_heads, lengths, d, seed)
    q = torch.randn(len(lengths), heads, d, generator=torch.Generator().manual_seed(seed + 99), dtype=torch.float64)
    calls = growth(keys, values, chunk) + [("forward", (q, list(range(len(lengths)))), {})]
    reply = run(student, shape, calls)
    checks.close(attended(reply, what), expected(q, keys, values), f"forward(q, seqs) ({what})", STATEMENT,
                 lambda: named(CAUSES, **{key: simulated(shape, calls, key) for key in mistakes}))
    return reply, keys


def test_attends_through_the_cache(student):
    """The gate: one sequence of 8 tokens in one block of 8 (a slip in the block table's arithmetic
    is the value tests' to charge), the identity as its values (the output is the weights), 2 heads."""
    def call(q, k, v):
        outs = []
        for values in (v[0], torch.eye(8, dtype=torch.float64).expand(2, 8, 8)):     # [heads, tokens, D]
            calls = [("append", (0, k[0].transpose(0, 1), values.transpose(0, 1)), {}),
                     ("forward", (q[:, :, 0], [0]), {})]
            outs.append(attended(run(student, (4, 8, 2, 2, 8), calls), "one sequence of 8 tokens",
                                 q[:, :, 0].shape)[:, :, None])
        return outs
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, n, 8, generator=generator, dtype=torch.float64) for n in (1, 8, 8))
    substance.attention_function(call, q, k, v)


def test_returns_one_output_per_sequence(student):
    keys, values = ragged_cache(3, 2, [5, 9, 3], 8, seed=10)
    q = torch.zeros(3, 4, 8, dtype=torch.float64)
    out = attended(run(student, (8, 4, 4, 2, 8), growth(keys, values, 4) + [("forward", (q, [0, 1, 2]), {})]),
                   "3 sequences")
    checks.shape(out, (3, 4, 8), "forward(q, seqs)", "One output per sequence and query head: [B, num_heads, head_dim].")
    checks.dtype(out, torch.float64, "forward(q, seqs) of a float64 cache", "Keep the pool's dtype.")


def test_matches_attention(student):
    compare(student, (12, 4, 4, 2, 8), [8, 12, 4], 3, "3 sequences of 8, 12 and 4 tokens, blocks of 4", seed=20)


def test_lengths_the_blocks_do_not_divide(student):
    compare(student, (8, 5, 4, 2, 8), [7, 13, 2], 2, "3 sequences of 7, 13 and 2 tokens, blocks of 5", seed=30,
            mistakes=("stride", "partial"))


def floating_held(reply):
    return sum(t.numel() for t in reply["held"] if isinstance(t, torch.Tensor) and t.is_floating_point())


def test_grouped_query_heads_kept_unrepeated(student):
    """6 query heads share 2 key/value heads: the values, then what the module keeps in floating-point
    tensors: the two pools of num_kv_heads heads, 2 * num_blocks * block_size * num_kv_heads * head_dim."""
    shape = (6, 4, 6, 2, 4)
    compare(student, shape, [6, 9], 3, "6 query heads, 2 key/value heads", seed=40, mistakes=("stride", "partial"))
    keys, values = ragged_cache(2, 2, [6, 9], 4, seed=40)
    reply = run(student, shape, growth(keys, values, 3), held=True)
    kept, want = floating_held(reply), 2 * 6 * 4 * 2 * 4
    if kept == 3 * want:
        raise checks.Feedback(f"The module keeps {kept} floating-point numbers, three times the {want} of two pools of "
                              "the 2 key/value heads.", f"Likely cause: {CAUSES['cached_repeated']}.")
    checks.require(kept == want, f"The module keeps {kept} floating-point numbers in tensors; its two pools of "
                   f"[num_blocks, block_size, num_kv_heads, head_dim] hold {want}.",
                   "Keep the cache in k_pool and v_pool only, allocated once in __init__ (the pool is the memory).")


def blocks_of(pools, keys):
    """For each sequence, the set of blocks of the pool tensor (first axis: blocks) that hold its keys;
    None when no tensor holds them all."""
    for pool in pools:
        rows = pool.reshape(pool.shape[0], -1, pool.shape[-1])
        found = []
        for k in keys:
            vectors = k.reshape(-1, k.shape[-1])
            where = (rows[None] == vectors[:, None, None]).all(dim=-1).any(dim=-1)   # [vectors, blocks]
            if not bool(where.any(dim=1).all()):
                break
            found.append(set(torch.nonzero(where.any(dim=0)).flatten().tolist()))
        else:
            return found
    return None


def test_holds_ceil_length_over_block_blocks(student):
    """A pool of exactly the 2 + 4 + 1 blocks three sequences of 8, 13 and 2 tokens need in blocks of 4,
    grown one token at a time: the blocks each holds are read from the pool's content."""
    shape, lengths = (7, 4, 2, 2, 8), [8, 13, 2]
    keys, values = ragged_cache(3, 2, lengths, 8, seed=50)
    q = torch.randn(3, 2, 8, generator=torch.Generator().manual_seed(51), dtype=torch.float64)
    reply = run(student, shape, growth(keys, values, 1) + [("forward", (q, [0, 1, 2]), {})], held=True)
    calls = growth(keys, values, 1) + [("forward", (q, [0, 1, 2]), {})]
    checks.close(attended(reply, "3 sequences grown a token at a time"), expected(q, keys, values),
                 "forward(q, seqs) (3 sequences grown a token at a time, a pool of exactly 7 blocks)", STATEMENT,
                 lambda: named(CAUSES, **{key: simulated(shape, calls, key) for key in ("stride", "partial")}))
    pools = [t for t in reply["held"] if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[0] == 7
             and t.shape[-1] == 8 and t.is_floating_point()]
    found = blocks_of(pools, keys)
    checks.require(found is not None, "No tensor of the module of shape [num_blocks, ..., head_dim] holds every "
                   "appended key.", "Keep the keys in k_pool [num_blocks, block_size, num_kv_heads, head_dim].")
    held = [len(blocks) for blocks in found]
    want = [math.ceil(n / 4) for n in lengths]
    checks.require(held == want and not (found[0] & found[1] or found[1] & found[2] or found[0] & found[2]),
                   f"The sequences of {lengths} tokens hold their keys in {held} blocks of the pool (blocks "
                   f"{[sorted(b) for b in found]}); ceil(length / block_size) is {want}, each block one sequence's.",
                   CAUSES["blocks_per_sequence"])


def test_freed_blocks_are_reused(student):
    """A pool of exactly the 3 + 2 blocks of sequences of 9 and 6 tokens (blocks of 4); sequence 0 ends
    and a sequence of 10 tokens takes its blocks."""
    shape = (5, 4, 2, 2, 8)
    keys, values = ragged_cache(3, 2, [9, 6, 10], 8, seed=60)
    q = torch.randn(2, 2, 8, generator=torch.Generator().manual_seed(61), dtype=torch.float64)
    calls = (growth(keys[:2], values[:2], 4) + [("free", (0,), {})]
             + [("append", (2, keys[2][i:i + 4], values[2][i:i + 4]), {}) for i in range(0, 10, 4)]
             + [("forward", (q, [1, 2]), {})])
    reply = run(student, shape, calls, hint=CAUSES["not_freed"])
    checks.close(attended(reply, "after a sequence ended"), expected(q, keys[1:], values[1:]),
                 "forward(q, seqs) of the sequence that took the freed blocks and of the one that stayed", STATEMENT,
                 lambda: named(CAUSES, partial=simulated(shape, calls, "partial")))
