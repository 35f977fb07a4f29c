"""The catalogue of paged_cache: its mistakes (with the cause each must be named by, a key of CAUSES in
autograder/suites/test_paged_cache.py, and the tests it may fail), correct alternatives, degenerate
answers and an answer that keeps its cache outside the pool."""

from functools import partial

from tests.catalogue.entries import Degenerate, Gaming, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("decoding")["paged_cache"]
changed = partial(edited, SOLUTION)
HEAD = SOLUTION[:SOLUTION.index("        ### BEGIN SOLUTION")]   # the class line, docstring and sizes


MISTAKES = [
    Mistake("the block table read with the wrong stride", "stride",
            fails=("matches_attention", "lengths_the_blocks_do_not_divide", "grouped_query_heads_kept_unrepeated",
                   "holds_ceil_length_over_block_blocks", "freed_blocks_are_reused"),
            code=changed("return table[positions // self.block_size] * self.block_size + positions % self.block_size",
                         "return table[positions // self.block_size] + positions % self.block_size")),
    Mistake("the last partial block not masked", "partial",
            fails=("lengths_the_blocks_do_not_divide", "grouped_query_heads_kept_unrepeated",
                   "holds_ceil_length_over_block_blocks", "freed_blocks_are_reused"),
            code=changed("slots = self.slots(seq, torch.arange(self.lengths[seq]))",
                         "slots = self.slots(seq, torch.arange(len(self.block_tables[seq]) * self.block_size))")),
    Mistake("a freed block not returned to the free list", "not_freed",
            fails=("freed_blocks_are_reused",),
            code=changed("self.free_blocks.extend(self.block_tables.pop(seq))", "self.block_tables.pop(seq)")),
    Mistake("a new block taken when the last one is exactly full", "blocks_per_sequence",
            fails=("holds_ceil_length_over_block_blocks",),
            code=changed("while len(table) * self.block_size < end:", "while len(table) * self.block_size <= end:")),
    Mistake("the cache repeated before paging", "cached_repeated",
            fails=("grouped_query_heads_kept_unrepeated",),
            code=changed(
                "self.k_pool = torch.zeros(num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype)",
                "self.k_pool = torch.zeros(num_blocks, block_size, num_heads, head_dim, dtype=dtype)",
                "self.k_pool.view(-1, self.num_kv_heads, self.head_dim)[slots] = k.to(self.k_pool.dtype)\n"
                "        self.v_pool.view(-1, self.num_kv_heads, self.head_dim)[slots] = v.to(self.v_pool.dtype)",
                "group = self.num_heads // self.num_kv_heads\n"
                "        self.k_pool.view(-1, self.num_heads, self.head_dim)[slots] = k.repeat_interleave(group, dim=1)\n"
                "        self.v_pool.view(-1, self.num_heads, self.head_dim)[slots] = v.repeat_interleave(group, dim=1)",
                "k = self.k_pool.view(-1, self.num_kv_heads, self.head_dim)[slots].transpose(0, 1)",
                "k = self.k_pool.view(-1, self.num_heads, self.head_dim)[slots].transpose(0, 1)",
                "v = self.v_pool.view(-1, self.num_kv_heads, self.head_dim)[slots].transpose(0, 1)",
                "v = self.v_pool.view(-1, self.num_heads, self.head_dim)[slots].transpose(0, 1)",
                "            k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)      # [H, L, D]\n",
                "")),
]


ALTERNATIVES = [
    # vLLM's own layout puts the heads before the slots of a block; blocks gathered whole, then cut.
    Alternative("heads before slots in a block, whole blocks gathered and cut to the length", HEAD + '''        self.k_pool = torch.zeros(num_blocks, num_kv_heads, block_size, head_dim, dtype=dtype)
        self.v_pool = torch.zeros(num_blocks, num_kv_heads, block_size, head_dim, dtype=dtype)
        self.free_blocks = list(range(num_blocks))
        self.block_tables = {}
        self.lengths = {}

    def append(self, seq, k, v):
        table = self.block_tables.setdefault(seq, [])
        for token in range(k.shape[0]):
            position = self.lengths.get(seq, 0)
            if position == len(table) * self.block_size:
                if not self.free_blocks:
                    raise RuntimeError("out of blocks")
                table.append(self.free_blocks.pop(0))
            block, slot = table[position // self.block_size], position % self.block_size
            self.k_pool[block, :, slot] = k[token]
            self.v_pool[block, :, slot] = v[token]
            self.lengths[seq] = position + 1

    def free(self, seq):
        for block in self.block_tables.pop(seq):
            self.free_blocks.append(block)
        self.lengths.pop(seq)

    def forward(self, q, seqs):
        out = torch.empty(q.shape, dtype=self.k_pool.dtype)
        group = self.num_heads // self.num_kv_heads
        for b, seq in enumerate(seqs):
            n = self.lengths[seq]
            blocks = torch.tensor(self.block_tables[seq])
            k = self.k_pool[blocks].permute(1, 0, 2, 3).reshape(self.num_kv_heads, -1, self.head_dim)[:, :n]
            v = self.v_pool[blocks].permute(1, 0, 2, 3).reshape(self.num_kv_heads, -1, self.head_dim)[:, :n]
            for h in range(self.num_heads):
                s = k[h // group] @ q[b, h] / self.head_dim ** 0.5
                out[b, h] = torch.softmax(s, dim=0) @ v[h // group]
        return out
'''),
    Alternative("a deque of free blocks and PyTorch's attention over the gathered cache", HEAD + '''        from collections import deque
        self.k_pool = torch.zeros(num_blocks, block_size, num_kv_heads, head_dim, dtype=dtype)
        self.v_pool = torch.zeros_like(self.k_pool)
        self.free_blocks = deque(range(num_blocks))
        self.block_tables, self.lengths = {}, {}

    def append(self, seq, k, v):
        table = self.block_tables.setdefault(seq, [])
        start = self.lengths.get(seq, 0)
        end = start + len(k)
        needed = -(-end // self.block_size) - len(table)
        if needed > len(self.free_blocks):
            raise RuntimeError("out of blocks")
        table += [self.free_blocks.popleft() for _ in range(needed)]
        for i, t in enumerate(range(start, end)):
            self.k_pool[table[t // self.block_size], t % self.block_size] = k[i]
            self.v_pool[table[t // self.block_size], t % self.block_size] = v[i]
        self.lengths[seq] = end

    def free(self, seq):
        self.free_blocks.extend(self.block_tables.pop(seq))
        del self.lengths[seq]

    def forward(self, q, seqs):
        outs = []
        for b, seq in enumerate(seqs):
            n = self.lengths[seq]
            table = self.block_tables[seq]
            k = torch.cat([self.k_pool[i] for i in table])[:n].transpose(0, 1)     # [H_kv, n, D]
            v = torch.cat([self.v_pool[i] for i in table])[:n].transpose(0, 1)
            out = torch.nn.functional.scaled_dot_product_attention(q[b][:, None], k, v, enable_gqa=True)
            outs.append(out[:, 0])
        return torch.stack(outs)
'''),
]


DEGENERATES = [
    Degenerate("zeros", changed(SOLUTION[SOLUTION.index("        group = self.num_heads // self.num_kv_heads\n        outputs"):
                                         SOLUTION.rindex("        ### END SOLUTION")],
                                "        return torch.zeros_like(q)\n")),
    Degenerate("the mean of the cached values (uniform weights)",
               changed("outputs.append((torch.softmax(scores, dim=-1)[:, None, :] @ v).squeeze(-2))",
                       "outputs.append(v.mean(dim=1))")),
]


GAMING = [
    Gaming("a tensor per sequence grown with torch.cat beside an unused pool", changed(
        "        self.lengths[seq] = end\n",
        "        self.lengths[seq] = end\n"
        "        self.contiguous = getattr(self, 'contiguous', {})\n"
        "        old = self.contiguous.get(seq, (k[:0], v[:0]))\n"
        "        self.contiguous[seq] = (torch.cat([old[0], k]), torch.cat([old[1], v]))\n"),
        loses=("grouped_query_heads_kept_unrepeated",), says="k_pool and v_pool only"),
]
