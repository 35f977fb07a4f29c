"""What the decoding suites share (the decoding assignment): one query per sequence against ragged
caches, attention over chunks of the cache with the named mistakes of its combination, and a paged
layout of caches in a pool of blocks, laid out as a serving system's pool looks after a while."""

import math

import torch

from autograder.suites.helpers.common import randn


def one_query_attention(q, k, v):
    """(out [..., D], lse [...]) in float64: one query per row of q [..., D] against k, v [..., S, D]."""
    s = (k.double() @ q.double()[..., None]).squeeze(-1) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(s, dim=-1)
    return (torch.exp(s - lse[..., None])[..., None, :] @ v.double()).squeeze(-2), lse


def ragged_attention(q, k, v, lengths):
    """(out [B, H, D], lse [B, H]) in float64 of q [B, H, D] against the first lengths[b] positions of
    k, v [B, H_kv, S, D] (each key/value head serving H / H_kv query heads)."""
    group = q.shape[1] // k.shape[1]
    outs, lses = [], []
    for b, n in enumerate(int(n) for n in lengths):
        keys, values = (x[b, :, :n].repeat_interleave(group, dim=0) for x in (k, v))
        out, lse = one_query_attention(q[b], keys, values)
        outs.append(out), lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def chunk_bounds(length, num_splits, size=None):
    """(start, end) of each of the num_splits chunks of a cache padded to `length` positions: chunks of
    `size` positions (by default ceil(length / num_splits)), the last ones shorter or empty."""
    size = size or math.ceil(length / num_splits)
    return [(min(j * size, length), min((j + 1) * size, length)) for j in range(num_splits)]


def chunked(q, k, v, lengths, num_splits, mistake=None, size=None):
    """(out_chunks [B, H, N, D], lse_chunks [B, H, N]) in float64: each chunk's attention over its visible
    keys and its logsumexp (0 and -inf for a chunk without one); `size`: positions per chunk, if not
    ceil(S / num_splits).  mistake "lse_no_max": the logsumexp
    without the chunk's maximum (log of the sum of exp(s - m)); "masked_nan": an empty chunk left as
    0 / 0 and -inf - (-inf) (NaN)."""
    batch, heads, length, d = k.shape
    s = (k.double() @ q.double()[..., None]).squeeze(-1) / math.sqrt(d)
    visible = torch.arange(length) < torch.as_tensor(lengths).reshape(batch, 1, 1)
    s = s.masked_fill(~visible, -math.inf)
    outs, lses = [], []
    for start, end in chunk_bounds(length, num_splits, size):
        part = s[..., start:end]
        m = part.amax(dim=-1) if end > start else torch.full((batch, heads), -math.inf, dtype=torch.float64)
        empty = torch.isneginf(m)
        safe = torch.where(empty, torch.zeros_like(m), m)
        p = torch.exp(part - safe[..., None])
        total = p.sum(dim=-1)
        out = (p[..., None, :] @ v.double()[..., start:end, :]).squeeze(-2) / total.clamp_min(1e-300)[..., None]
        lse = safe + torch.log(total)
        if mistake == "lse_no_max":
            lse = torch.log(total)
        if mistake == "masked_nan":
            out = torch.where(empty[..., None], math.nan, out)
            lse = torch.where(empty, math.nan, lse)
        else:
            out = torch.where(empty[..., None], 0.0, out)
        outs.append(out), lses.append(lse)
    return torch.stack(outs, dim=2), torch.stack(lses, dim=2)


def combined(out_chunks, lse_chunks, mistake=None):
    """(out [B, H, D], lse [B, H]) in float64 of chunks combined exactly, or by a named mistake:
    "averaged" (the mean of the chunks' outputs), "one_max" (every chunk weighed against the first
    chunk's logsumexp, exp(lse_c - lse_0), then normalised: overflows when chunks lie far apart),
    "unweighted_lse" (the mean of the chunks' logsumexps)."""
    out_chunks, lse_chunks = out_chunks.double(), lse_chunks.double()
    if mistake == "one_max":
        w = torch.exp((lse_chunks - lse_chunks[..., :1]).float()).double()   # float32, as the mistake computes
        total = w.sum(dim=-1)
        return (w[..., None] * out_chunks).sum(dim=-2) / total[..., None], lse_chunks[..., 0] + torch.log(total)
    lse = torch.logsumexp(lse_chunks, dim=-1)
    if mistake == "averaged":
        return out_chunks.mean(dim=-2), lse
    return (torch.exp(lse_chunks - lse[..., None])[..., None] * out_chunks).sum(dim=-2), lse


def ragged_cache(batch, kv_heads, lengths, d, seed, dtype=torch.float64):
    """Keys and values [L_b, H_kv, D] of each sequence (a list each), as a decoding step appends them."""
    keys = [randn(n, kv_heads, d, seed=seed + 2 * b).to(dtype) for b, n in enumerate(lengths)]
    values = [randn(n, kv_heads, d, seed=seed + 2 * b + 1).to(dtype) for b, n in enumerate(lengths)]
    return keys, values


def padded_heads(parts):
    """[L_b, H_kv, D] per sequence -> [B, H_kv, S, D], zero past each length (for ragged_attention)."""
    length = max(len(part) for part in parts)
    out = torch.zeros(len(parts), parts[0].shape[1], length, parts[0].shape[2], dtype=parts[0].dtype)
    for b, part in enumerate(parts):
        out[b, :, :len(part)] = part.transpose(0, 1)
    return out


def paged_layout(keys, values, block_size, num_blocks, seed=0, table_width=None):
    """The sequences' keys and values placed in a pool of num_blocks blocks in a random order:
    (k_pool, v_pool [num_blocks, block_size, H_kv, D], block_tables [B, width] int32, lengths [B] int32).
    Every slot nobody holds is NaN; a table's entries past its sequence's blocks name blocks of the
    other sequences, so a kernel that walks past its own blocks reads theirs."""
    generator = torch.Generator().manual_seed(seed)
    kv_heads, d = keys[0].shape[1:]
    k_pool = torch.full((num_blocks, block_size, kv_heads, d), math.nan, dtype=keys[0].dtype)
    v_pool = torch.full_like(k_pool, math.nan)
    order = torch.randperm(num_blocks, generator=generator).tolist()
    need = [math.ceil(len(k) / block_size) for k in keys]
    width = table_width or max(need)
    owned = []
    for k, v in zip(keys, values):
        blocks = [order.pop() for _ in range(math.ceil(len(k) / block_size))]
        for i, block in enumerate(blocks):
            part = slice(i * block_size, (i + 1) * block_size)
            k_pool[block, :len(k[part])], v_pool[block, :len(v[part])] = k[part], v[part]
        owned.append(blocks)
    tables = torch.zeros(len(keys), width, dtype=torch.int32)
    for b, blocks in enumerate(owned):
        others = [block for other in owned[b + 1:] + owned[:b] for block in other] or blocks
        row = blocks + [others[i % len(others)] for i in range(width - len(blocks))]
        tables[b] = torch.tensor(row, dtype=torch.int32)
    return k_pool, v_pool, tables, torch.tensor([len(k) for k in keys], dtype=torch.int32)


def gathered(k_pool, v_pool, tables, lengths):
    """The caches a block table describes, [B, H_kv, S, D] each (zeros past a sequence's length): what a
    kernel that follows `tables` reads."""
    block = k_pool.shape[1]
    keys, values = [], []
    for b, n in enumerate(int(n) for n in lengths):
        rows = tables[b, torch.arange(n) // block].long() * block + torch.arange(n) % block
        keys.append(k_pool.reshape(-1, *k_pool.shape[2:])[rows])
        values.append(v_pool.reshape(-1, *v_pool.shape[2:])[rows])
    return padded_heads(keys), padded_heads(values)
