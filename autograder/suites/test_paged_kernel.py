"""Hidden tests for paged_decode(q, k_pool, v_pool, block_tables, lengths, num_splits) -> (out, lse), by
the student's paged_attention_kernel (grid (B, H_kv, num_splits)) and combine_kernel (grid (B, H)).

The pools are laid out as a serving system's pool looks after a while: blocks in a random order, NaN
in every slot nobody holds, and table entries past a sequence's blocks naming other sequences' blocks.
The kernels run in Triton's interpreter in the student's process, which counts what they did
(docs/kernels.md): the elements their loads address show that each block a sequence owns is
read once per head group and no other block is; their products and stores show the kernels did the
work; a load outside every tensor stops the kernel with OutOfBounds."""

import math

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers import kernels
from autograder.suites.helpers.common import crash_hint, named, randn
from autograder.suites.helpers.kernels import OUT_OF_BOUNDS, TRITON_CRASHES, check_kernel_work, laid_out
from autograder.suites.helpers.paged import chunked, combined, gathered, paged_layout, ragged_attention, ragged_cache

CAUSES = {
    "partial": "the slots past a sequence's length in its last block read (their loads unmasked): mask the loads "
               "of keys and values with position < length (other=0) and the scores with -inf",
    "table_stride": "row b of the block table taken at Tables + b * max_blocks instead of Tables + b * stride_tb: "
                    "pass block_tables.stride(0)",
    "averaged": "the chunks' outputs averaged in the combine: weigh chunk c by exp(lse_c - lse), lse = logsumexp "
                "over the chunks",
    "per_query_head": "a program per query head, so that each block is read once per query head: give a program "
                      "the GROUP = H / H_kv query heads of one key/value head (grid (B, H_kv, num_splits)) and "
                      "read each block once for all of them",
    "foreign": "blocks read beyond the sequence's own: a program must stop at cdiv(length, BLOCK) table entries; "
               "the entries past them name other sequences' blocks",
    "out_of_bounds": "a load or store whose lanes run past the end of a tensor (a mask missing on the group's "
                     "padded heads, the chunks or the last block)",
    "no_scale": "scores without the scale 1 / sqrt(D)",
    "dtype": "out has q's dtype (allocate it with q.dtype) and lse is float32",
}
STATEMENT = ("Program (b, g, c) reads the table entries of chunk c of sequence b (cdiv(max_blocks, num_splits) "
             "each, never past cdiv(length, BLOCK)), its keys and values of head g, and runs the online softmax "
             "for the GROUP query heads of g; the combine weighs chunk c by exp(lse_c - lse).")
CRASHES = [(OUT_OF_BOUNDS, CAUSES["out_of_bounds"])] + TRITON_CRASHES


tf32_on_a_gpu = kernels.tf32_on_a_gpu   # an autouse fixture: float32 at TF32's precision on a GPU


def decode(student, q, k_pool, v_pool, tables, lengths, num_splits, **options):
    """(out, lse, the reply) of the student's paged_decode."""
    with crash_hint(CRASHES):
        reply = student.call("paged_decode", q, k_pool, v_pool, tables, lengths, num_splits, **options)
    out, lse = checks.pair(reply["output"], "paged_decode(q, k_pool, v_pool, block_tables, lengths, num_splits)",
                           ("out", "lse"))
    return checks.tensor(out, "out"), checks.tensor(lse, "lse"), reply


def case(lengths, heads, kv_heads, d, block, seed, spare=2, dtype=torch.float32):
    """q [B, H, D] and a paged layout of ragged caches: (q, k_pool, v_pool, tables, lengths, keys, values)."""
    keys, values = ragged_cache(len(lengths), kv_heads, lengths, d, seed, dtype)
    need = sum(math.ceil(n / block) for n in lengths)
    layout = paged_layout(keys, values, block, need + spare, seed=seed)
    return (randn(len(lengths), heads, d, seed=seed + 50).to(dtype), *layout)


def kernel_mistakes(q, k_pool, v_pool, tables, lengths, num_splits, index):
    """What the combine's named mistake gives, over the kernel's chunks (cdiv(max_blocks, num_splits)
    table entries each)."""
    k, v = gathered(k_pool.double(), v_pool.double(), tables, lengths)
    size = math.ceil(tables.shape[1] / num_splits) * k_pool.shape[1]
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    pad = max(0, size * num_splits - k.shape[2])
    k, v = (torch.nn.functional.pad(x, (0, 0, 0, pad)) for x in (k, v))
    chunks = chunked(q, k, v, lengths, num_splits, size=size)
    unscaled = ragged_attention(q * math.sqrt(q.shape[-1]), *gathered(k_pool, v_pool, tables, lengths), lengths)
    return named(CAUSES, averaged=combined(*chunks, "averaged")[index].to(q.dtype),
                 no_scale=unscaled[index].to(q.dtype))


def compare(student, q, k_pool, v_pool, tables, lengths, num_splits, what, sent_tables=None, extra=None):
    out, lse, reply = decode(student, q, k_pool, v_pool, sent_tables if sent_tables is not None else tables,
                             lengths, num_splits)
    want_out, want_lse = ragged_attention(q, *gathered(k_pool, v_pool, tables, lengths), lengths)

    def mistakes(index):
        found = kernel_mistakes(q, k_pool, v_pool, tables, lengths, num_splits, index)
        return {**found, **(extra(index) if extra else {})}

    try:
        checks.close(out, want_out.to(q.dtype), f"out ({what})", STATEMENT, lambda: mistakes(0))
    except checks.Feedback as feedback:
        # NaN where no named mistake explains it: a slot nobody holds was read (the grader's pool is NaN there)
        if "It matches" not in str(feedback) and out.shape == want_out.shape and bool(torch.isnan(out).any()):
            raise checks.Feedback(f"out ({what}) holds NaN: a slot nobody holds was read (every such slot of the "
                                  "grader's pool is NaN).", CAUSES["partial"]) from None
        raise
    checks.close(lse, want_lse.float(), f"lse ({what})", STATEMENT, lambda: mistakes(1))
    return reply


def test_computes_attention(student):
    """The gate: one sequence of 16 tokens in blocks of 8, 2 heads, one split; with the identity as the
    values the output is the weights."""
    def call(q, k, v):
        outs = []
        for values in (v[0], torch.eye(16).expand(2, 16, 16)):
            k_pool, v_pool, tables, lengths = paged_layout([k[0].transpose(0, 1)], [values.transpose(0, 1)], 8, 4)
            outs.append(decode(student, q[:, :, 0].contiguous(), k_pool, v_pool, tables, lengths, 1)[0][:, :, None])
        return outs
    q, k, v = (randn(1, 2, n, 16, seed=1 + n).float() for n in (1, 16, 16))
    substance.attention_function(call, q, k, v)


def test_returns_output_and_logsumexp(student):
    q, k_pool, v_pool, tables, lengths, = case([20, 9], 4, 2, 16, 8, seed=2)
    out, lse, _ = decode(student, q, k_pool, v_pool, tables, lengths, 2)
    checks.shape(out, (2, 4, 16), "out", "One output per sequence and query head: [B, H, D].")
    checks.shape(lse, (2, 4), "lse", "One logsumexp per sequence and query head: [B, H].")
    checks.dtype(out, torch.float32, "out", CAUSES["dtype"])
    checks.dtype(lse, torch.float32, "lse", CAUSES["dtype"])


def test_matches_attention(student):
    compare(student, *case([32, 16, 24], 4, 2, 16, 8, seed=3), 2, "3 sequences of 32, 16 and 24 tokens, blocks of 8")


def test_lengths_the_blocks_do_not_divide(student):
    compare(student, *case([37, 9, 20], 6, 2, 16, 8, seed=4), 2, "3 sequences of 37, 9 and 20 tokens, blocks of 8")


def test_splits(student):
    """The same caches in 1, 3 and 7 splits of a 5-entry table: chunks of one or two blocks, and chunks
    past a sequence's blocks, which hold nothing (their logsumexp is -inf in the combine)."""
    layout = case([40, 17], 4, 2, 16, 8, seed=5)
    for splits in (1, 3, 7):
        compare(student, *layout, splits, f"2 sequences of 40 and 17 tokens, blocks of 8, {splits} splits")


def test_block_table_with_a_stride(student):
    """The block table as a view into a wider tensor: row b starts 4 entries after row b - 1 ends."""
    q, k_pool, v_pool, tables, lengths = case([30, 12, 21], 4, 2, 16, 8, seed=6)
    width = tables.shape[1]
    wider = torch.cat([tables, tables.flip(0)[:, :4]], dim=1)   # the extra entries: other sequences' blocks
    view = wider[:, :width]
    as_contiguous = torch.as_strided(wider.flatten(), view.shape, (width, 1))

    def misread(index):
        k, v = gathered(k_pool, v_pool, as_contiguous, lengths)
        return named(CAUSES, table_stride=ragged_attention(q, k, v, lengths)[index].to(q.dtype))
    compare(student, q, k_pool, v_pool, tables, lengths, 2, "a block table whose rows are 4 entries apart",
            sent_tables=laid_out(view), extra=misread)


def test_keeps_bfloat16(student):
    q, k_pool, v_pool, tables, lengths = case([33, 14], 4, 2, 32, 8, seed=7, dtype=torch.bfloat16)
    out, lse, _ = decode(student, q, k_pool, v_pool, tables, lengths, 2)
    checks.dtype(out, torch.bfloat16, "out of bfloat16 inputs", CAUSES["dtype"])
    checks.dtype(lse, torch.float32, "lse of bfloat16 inputs", CAUSES["dtype"])
    want_out, want_lse = ragged_attention(q, *gathered(k_pool, v_pool, tables, lengths), lengths)
    checks.close(out, want_out.to(torch.bfloat16), "out (bfloat16)", "Accumulate m, l and acc in float32.")
    checks.close(lse, want_lse.float(), "lse (bfloat16)", "Accumulate m, l and acc in float32.")


MEASURED_LENGTHS, MEASURED_HEADS, MEASURED_KV_HEADS, MEASURED_D, MEASURED_BLOCK, MEASURED_SPLITS = (
    (120, 40, 17), 8, 2, 16, 8, 2)


def measured_call(student):
    layout = case(list(MEASURED_LENGTHS), MEASURED_HEADS, MEASURED_KV_HEADS, MEASURED_D, MEASURED_BLOCK, seed=8)
    out, lse, reply = decode(student, *layout, MEASURED_SPLITS, count=True)
    q, k_pool, v_pool, tables, lengths = layout
    want_out, _ = ragged_attention(q, *gathered(k_pool, v_pool, tables, lengths), lengths)
    checks.close(out, want_out.float(), "out of the counted call (3 sequences of 120, 40 and 17 tokens)",
                 "The counted call must first give the right answer.")
    return reply


def test_reads_each_block_once_per_head_group(student):
    """One counted call: its values first, then the elements its kernels' loads addressed.  Each
    block a sequence owns read once per key/value head (its slots past the length may be read or
    not), and beside it the queries, the tables, the lengths and the chunks' partial results (a few
    loads each per program); a program per query head reads the blocks GROUP = 4 times, a program
    that walks its chunk's whole share of the table reads other sequences' blocks."""
    reply = measured_call(student)
    work = reply["work"]
    if not work.interpreted:
        return  # compiled for a GPU: its loads cannot be counted, the values above are what is checked
    batch, heads, kv_heads, d, splits = (len(MEASURED_LENGTHS), MEASURED_HEADS, MEASURED_KV_HEADS, MEASURED_D,
                                         MEASURED_SPLITS)
    owned = 2 * kv_heads * d * sum(math.ceil(n / MEASURED_BLOCK) * MEASURED_BLOCK for n in MEASURED_LENGTHS)
    beside = 2 * batch * heads * splits * (d + 1) + batch * heads * splits * d + 4 * batch * kv_heads * splits * 16
    group = heads // kv_heads
    if work.addressed > owned + beside:
        cause = CAUSES["per_query_head"] if work.addressed >= 0.9 * group * owned else CAUSES["foreign"]
        raise checks.Feedback(f"The kernels' loads addressed {work.addressed:,} elements; the blocks the three "
                              f"sequences own, once per key/value head, are {owned:,}, and the rest of the step "
                              f"needs at most {beside:,}.", f"Likely cause: {cause}.")


def test_the_kernel_does_the_work(student):
    """The same counted call: the products of attention made by the kernels and stored, every element of
    the caches read, the statement's grids (B * H_kv * num_splits + B * H programs), and torch
    computing nothing of the answer."""
    reply = measured_call(student)
    tokens = sum(MEASURED_LENGTHS)
    check_kernel_work(reply, "paged_decode", least_flops=4 * tokens * MEASURED_D * MEASURED_HEADS,
                      least_addressed=2 * tokens * MEASURED_KV_HEADS * MEASURED_D,
                      programs=len(MEASURED_LENGTHS) * (MEASURED_KV_HEADS * MEASURED_SPLITS + MEASURED_HEADS))
