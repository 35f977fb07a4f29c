"""Hidden tests for attend_chunks(q, k, v, lengths, num_splits) -> (out_chunks, lse_chunks) and
combine_chunks(out_chunks, lse_chunks) -> (out, lse), split-KV attention (FlashDecoding) for one query
per sequence; split_kv_attention runs one after the other.  Each pass is graded on its own: the chunks
against the grader's chunks, the combination on the grader's chunks."""

import math

import torch

from autograder.harness import checks, substance
from autograder.suites.helpers.common import named, randn
from autograder.suites.helpers.paged import chunked, combined, ragged_attention

CAUSES = {
    "lse_no_max": "a chunk's logsumexp taken as log(sum(exp(s - m))) without adding back the chunk's maximum m",
    "masked_nan": "a chunk with no visible key left as NaN (its maximum is -inf, and -inf - (-inf) is NaN): give "
                  "such a chunk the output 0 and the logsumexp -inf",
    "chunk_size": "chunks of S // num_splits positions: the statement's chunks hold ceil(S / num_splits) "
                  "positions each, the last ones shorter or empty",
    "averaged": "the chunks' outputs averaged: each chunk's output must be weighed by its share of the softmax, "
                "exp(lse_c - lse) with lse = logsumexp over the chunks",
    "one_max": "every chunk weighed against the first chunk's logsumexp (exp(lse_c - lse_0)), which overflows when "
               "another chunk's scores are far larger: take the maximum over the chunks (or torch.logsumexp)",
    "low_precision": "the arithmetic done in the inputs' dtype: compute the scores, the chunks and their "
                     "combination in float32 whatever the inputs' dtype (bfloat16's 8-bit mantissa puts a "
                     "logsumexp near 5 off by up to 0.03)",
    "dtype": "out_chunks, lse_chunks and the combination's out and lse are float32; split_kv_attention returns "
             "out in q's dtype",
}
STATEMENT = ("Chunk j covers positions j*size to min((j + 1)*size, S), size = ceil(S / num_splits); its output is "
             "attention over its visible keys (those below lengths[b]) and its lse = m + log(sum(exp(s - m))).")


def pair(reply, what, names):
    out, lse = checks.pair(reply["output"], what, names)
    return checks.tensor(out, names[0]), checks.tensor(lse, names[1])


def attend_chunks(student, q, k, v, lengths, num_splits):
    """The student's chunks, checked for their shapes before any test reads them."""
    out, lse = pair(student.call("attend_chunks", q, k, v, lengths, num_splits),
                    "attend_chunks(q, k, v, lengths, num_splits)", ("out_chunks", "lse_chunks"))
    checks.shape(out, (*q.shape[:2], num_splits, v.shape[-1]), "out_chunks", "One output per chunk: [B, H, num_splits, D].")
    checks.shape(lse, (*q.shape[:2], num_splits), "lse_chunks", "One logsumexp per chunk: [B, H, num_splits].")
    return out, lse


def combine_chunks(student, out_chunks, lse_chunks):
    """The student's combination, checked for its shapes before any test reads it."""
    out, lse = pair(student.call("combine_chunks", out_chunks, lse_chunks), "combine_chunks(out_chunks, lse_chunks)",
                    ("out", "lse"))
    checks.shape(out, out_chunks.shape[:2] + out_chunks.shape[3:], "out of combine_chunks",
                 "One output per sequence and head: [B, H, D].")
    checks.shape(lse, lse_chunks.shape[:2], "lse of combine_chunks", "One logsumexp per sequence and head: [B, H].")
    return out, lse


def inputs(batch, heads, length, d, seed, dtype=torch.float32, scale=1.0):
    return (randn(batch, heads, d, seed=seed).to(dtype) * scale, randn(batch, heads, length, d, seed=seed + 1).to(dtype),
            randn(batch, heads, length, d, seed=seed + 2).to(dtype))


def floor_chunks(q, k, v, lengths, num_splits):
    """The chunks of size S // num_splits, the last one taking the rest (the chunk_size mistake)."""
    length = k.shape[2]
    size = length // num_splits
    parts = [chunked(q, k[..., j * size:(j + 1) * size if j < num_splits - 1 else length, :],
                     v[..., j * size:(j + 1) * size if j < num_splits - 1 else length, :],
                     (lengths - j * size).clamp(min=0), 1) for j in range(num_splits)]
    return torch.cat([p[0] for p in parts], dim=2), torch.cat([p[1] for p in parts], dim=2)


def compare_chunks(student, q, k, v, lengths, num_splits, what):
    out, lse = attend_chunks(student, q, k, v, lengths, num_splits)
    want_out, want_lse = chunked(q, k, v, lengths, num_splits)

    def mistakes(index):
        found = {key: chunked(q, k, v, lengths, num_splits, key)[index] for key in ("lse_no_max", "masked_nan")}
        if k.shape[2] % num_splits:
            found["chunk_size"] = floor_chunks(q, k, v, lengths, num_splits)[index]
        return named(CAUSES, **{key: value.float() for key, value in found.items()})

    checks.close(out, want_out.float(), f"out_chunks ({what})", STATEMENT, lambda: mistakes(0))
    checks.close(lse, want_lse.float(), f"lse_chunks ({what})", STATEMENT, lambda: mistakes(1))


def test_computes_attention(student):
    """The gate: one chunk (num_splits = 1) with the identity as the values: its output is the weights."""
    def call(q, k, v):
        lengths = torch.full((q.shape[0],), k.shape[2], dtype=torch.int64)
        out = attend_chunks(student, q[..., 0, :], k, v, lengths, 1)[0][..., 0, :]
        eye = torch.eye(k.shape[2]).expand(*k.shape[:2], -1, -1).contiguous()
        weights = attend_chunks(student, q[..., 0, :], k, eye, lengths, 1)[0][..., 0, :]
        return out[..., None, :], weights[..., None, :]
    q, k, v = inputs(1, 2, 8, 8, seed=1)
    substance.attention_function(call, q[..., None, :], k, v)


def test_returns_shapes_and_dtypes(student):
    q, k, v = inputs(2, 3, 20, 16, seed=2)
    out, lse = attend_chunks(student, q, k, v, torch.tensor([20, 13]), 4)
    checks.shape(out, (2, 3, 4, 16), "out_chunks", "One output per chunk: [B, H, num_splits, D].")
    checks.shape(lse, (2, 3, 4), "lse_chunks", "One logsumexp per chunk: [B, H, num_splits].")
    checks.dtype(out, torch.float32, "out_chunks", CAUSES["dtype"])
    checks.dtype(lse, torch.float32, "lse_chunks", CAUSES["dtype"])
    out, lse = combine_chunks(student, *(x.float() for x in chunked(q, k, v, torch.tensor([20, 13]), 4)))
    checks.shape(out, (2, 3, 16), "out of combine_chunks", "One output per sequence and head: [B, H, D].")
    checks.shape(lse, (2, 3), "lse of combine_chunks", "One logsumexp per sequence and head: [B, H].")


def test_chunks_match_attention(student):
    compare_chunks(student, *inputs(2, 3, 24, 16, seed=3), torch.tensor([24, 19]), 3,
                   "24 positions in 3 chunks of 8, lengths 24 and 19")


def test_chunk_counts_that_do_not_divide(student):
    compare_chunks(student, *inputs(2, 2, 22, 16, seed=4), torch.tensor([22, 21]), 4,
                   "22 positions in 4 chunks (of 6, 6, 6 and 4)")
    compare_chunks(student, *inputs(1, 2, 10, 8, seed=5), torch.tensor([10]), 4, "10 positions in 4 chunks")


def test_fully_masked_chunk(student):
    """Sequence 0 holds 5 keys of 22: its chunks 1 to 3 see none (output 0, logsumexp -inf); the
    combination of its chunks is still attention over its 5 keys."""
    q, k, v = inputs(2, 2, 22, 16, seed=6)
    lengths = torch.tensor([5, 22])
    out, lse = attend_chunks(student, q, k, v, lengths, 4)
    checks.require(not bool(torch.isnan(out).any() or torch.isnan(lse).any()),
                   "out_chunks or lse_chunks holds NaN where a chunk has no visible key.", CAUSES["masked_nan"])
    compare_chunks(student, q, k, v, lengths, 4, "a sequence of 5 keys: 3 of its 4 chunks empty")
    compare_combined(student, *(x.float() for x in chunked(q, k, v, lengths, 4)), ragged_attention(q, k, v, lengths),
                     "chunks with lse = -inf", "A chunk whose logsumexp is -inf has weight exp(-inf - lse) = 0.")


def compare_combined(student, out_chunks, lse_chunks, want, what, hint):
    out, lse = combine_chunks(student, out_chunks, lse_chunks)
    mistakes = {key: combined(out_chunks, lse_chunks, key) for key in ("averaged", "one_max")}
    checks.close(out, want[0].float(), f"out of combine_chunks ({what})", hint,
                 lambda: named(CAUSES, **{key: value[0].float() for key, value in mistakes.items()}))
    checks.close(lse, want[1].float(), f"lse of combine_chunks ({what})", hint,
                 lambda: named(CAUSES, **{key: value[1].float() for key, value in mistakes.items()}))


def test_combine_is_exact(student):
    q, k, v = inputs(2, 3, 30, 16, seed=7, scale=2.0)
    lengths = torch.tensor([30, 23])
    chunks = [x.float() for x in chunked(q, k, v, lengths, 5)]
    compare_combined(student, *chunks, ragged_attention(q, k, v, lengths), "5 chunks of 6 positions",
                     "out = sum over chunks of exp(lse_c - lse) * out_c, lse = logsumexp over the chunks' lse_c.")


def test_chunks_far_apart(student):
    """Chunks whose logsumexps lie 150 apart, as a long context's chunks do when one of them holds the
    keys that matter: exp(lse_c - lse_0) overflows float32 where the first chunk is not the largest."""
    out_chunks = randn(1, 2, 3, 8, seed=8).float()
    lse_chunks = torch.tensor([[[-40.0, 110.0, 20.0], [3.0, -5.0, 1.0]]])
    out, lse = combine_chunks(student, out_chunks, lse_chunks)
    checks.require(bool(torch.isfinite(out).all() and torch.isfinite(lse).all()),
                   "combine_chunks returns NaN or infinity for chunks whose logsumexps lie 150 apart.",
                   CAUSES["one_max"])
    compare_combined(student, out_chunks, lse_chunks, combined(out_chunks, lse_chunks), "logsumexps 150 apart",
                     "Subtract the largest lse_c before exp (or use torch.logsumexp).")


def test_bfloat16_in_float32(student):
    """bfloat16 inputs: the chunks and the combination in float32, the logsumexp as exact as float32
    arithmetic on the bfloat16 numbers gives it, the output rounded to bfloat16 once."""
    q, k, v = inputs(2, 2, 40, 32, seed=9, dtype=torch.bfloat16, scale=3.0)
    lengths = torch.tensor([40, 33])
    out_chunks, lse_chunks = attend_chunks(student, q, k, v, lengths, 4)
    checks.dtype(out_chunks, torch.float32, "out_chunks of bfloat16 inputs", CAUSES["low_precision"])
    checks.dtype(lse_chunks, torch.float32, "lse_chunks of bfloat16 inputs", CAUSES["low_precision"])
    want_out, want_lse = chunked(q, k, v, lengths, 4)
    no_max = chunked(q, k, v, lengths, 4, "lse_no_max")[1].float()
    checks.close(lse_chunks, want_lse.float(), "lse_chunks of bfloat16 inputs", CAUSES["low_precision"],
                 named(CAUSES, lse_no_max=no_max))
    checks.close(out_chunks, want_out.float(), "out_chunks of bfloat16 inputs", CAUSES["low_precision"])
    reply = student.call("split_kv_attention", q, k, v, lengths, 4)
    out, lse = pair(reply, "split_kv_attention(q, k, v, lengths, num_splits)", ("out", "lse"))
    checks.dtype(out, torch.bfloat16, "out of split_kv_attention (bfloat16 inputs)", CAUSES["dtype"])
    checks.dtype(lse, torch.float32, "lse of split_kv_attention (bfloat16 inputs)", CAUSES["dtype"])
    want_out, want_lse = ragged_attention(q, k, v, lengths)
    averaged = combined(*chunked(q, k, v, lengths, 4), "averaged")
    checks.close(lse, want_lse.float(), "lse of split_kv_attention (bfloat16 inputs)", CAUSES["low_precision"])
    checks.close(out, want_out.to(torch.bfloat16), "out of split_kv_attention (bfloat16 inputs)",
                 CAUSES["low_precision"], named(CAUSES, averaged=averaged[0].to(torch.bfloat16)))
