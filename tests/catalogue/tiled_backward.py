"""The catalogue of tiled_backward: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_tiled_backward.py, and the tests it may fail), correct alternatives
and degenerate answers."""

from functools import partial

from tests.catalogue.entries import Degenerate, Gaming, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("flash_attention")["tiled_backward"]
changed = partial(edited, SOLUTION)
VALUES = ("dq_and_dk", "causal", "lengths_the_blocks_do_not_divide", "half_precision_works_in_float32")
MEMORY = "memory_stays_below_one_score_matrix"  # measured on a correct answer only: the values come first

# The answers below that are no tiled backward of the statement's still follow its dtypes (computed in
# lse's dtype, the gradients rounded back), so that they lose only what their own idea costs.
_WIDE = '''def _wide(function):
    def in_lse_dtype(q, k, v, out, lse, d_out, *args, **kwargs):
        grads = function(*(t.to(lse.dtype) for t in (q, k, v, out)), lse, d_out.to(lse.dtype), *args, **kwargs)
        return tuple(grad.to(t.dtype) for grad, t in zip(grads, (q, k, v)))
    return in_lse_dtype


'''


def widened(code):
    """code whose flash_attention_backward computes in lse's dtype (see _WIDE)."""
    return _WIDE + code.replace("def flash_attention_backward(", "@_wide\ndef flash_attention_backward(", 1)


MISTAKES = [
    Mistake("D computed in place in out", "in_place",
            fails=("returns_three_gradients",),
            code=changed("delta = (d_out.to(work) * out.to(work)).sum(dim=-1)", "delta = out.to(work).mul_(d_out.to(work)).sum(dim=-1)")),
    Mistake("no D = rowsum(dO * O)", "no_delta", fails=(*VALUES, MEMORY),
            code=changed(" - delta[:, :, i0:i1, None])", ")")),
    Mistake("dQ and dK without 1/sqrt(d)", "no_scale", fails=(*VALUES, MEMORY),
            code=changed("ds @ k_tile * scale", "ds @ k_tile", "@ q_tile * scale", "@ q_tile")),
    Mistake("dK and dV overwritten for each query tile", "accumulate", fails=("dv", *VALUES, MEMORY),
            code=changed("dv[:, :, j0:j1] +=", "dv[:, :, j0:j1] =", "dk[:, :, j0:j1] +=", "dk[:, :, j0:j1] =")),
    Mistake("the gradients accumulated in the inputs' dtype (a float32 lse meets bfloat16 tiles)", "half_state",
            fails=("half_precision_works_in_float32",),
            code=changed("work = lse.dtype", "work = q.dtype")),
    Mistake("dq, dk and dv summed in the inputs' dtype, every tile in float32", "half_state",
            fails=("half_precision_works_in_float32",),
            code=changed("dq, dk, dv = (torch.zeros(t.shape, dtype=work) for t in (q, k, v))",
                         "dq, dk, dv = (torch.zeros(t.shape, dtype=t.dtype) for t in (q, k, v))")),
    Mistake("D computed in the inputs' dtype, then widened", "half_delta",
            fails=("half_precision_works_in_float32",),
            code=changed("delta = (d_out.to(work) * out.to(work)).sum(dim=-1)", "delta = (d_out * out).sum(dim=-1).to(work)")),
    Mistake("the gradients summed in float16 only (bfloat16 widened)", "half_state",
            fails=("half_precision_works_in_float32",),
            code=changed("dq, dk, dv = (torch.zeros(t.shape, dtype=work) for t in (q, k, v))",
                         "dq, dk, dv = (torch.zeros(t.shape, dtype=t.dtype if t.dtype == torch.float16 else work) "
                         "for t in (q, k, v))")),
    Mistake("no causal mask in the recomputed weights", "no_mask", fails=("causal",),
            code=changed("            if causal:\n                s = s.masked_fill", "            if False:\n                s = s.masked_fill")),
    Mistake("autograd through the direct computation", "whole_matrix", fails=("memory_stays_below_one_score_matrix",),
            code=widened('''def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_q=64, block_k=64):
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    with torch.enable_grad():
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
        o = torch.softmax(s, dim=-1) @ v
        return torch.autograd.grad(o, (q, k, v), d_out)
''')),
]


ALTERNATIVES = [
    Alternative("key tiles outside, as FlashAttention-2's backward", '''def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_q=64, block_k=64):
    dtypes = q.dtype, k.dtype, v.dtype
    q, k, v, out, d_out = (t.to(lse.dtype) for t in (q, k, v, out, d_out))
    scale = q.shape[-1] ** -0.5
    n_q, n_k = q.shape[-2], k.shape[-2]
    D = torch.einsum("...qd,...qd->...q", d_out, out)
    dq = torch.zeros_like(q)
    dks, dvs = [], []
    for j in range(0, n_k, block_k):
        kj, vj = k[..., j:j + block_k, :], v[..., j:j + block_k, :]
        dk_j, dv_j = torch.zeros_like(kj), torch.zeros_like(vj)
        for i in range(0, n_q, block_q):
            rows = torch.arange(i, min(i + block_q, n_q))
            if causal and j > rows[-1]:
                continue
            s = q[..., i:i + block_q, :] @ kj.transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(torch.arange(j, j + kj.shape[-2]) > rows[:, None], float("-inf"))
            p = (s - lse[..., i:i + block_q, None]).exp()
            do = d_out[..., i:i + block_q, :]
            dv_j = dv_j + p.transpose(-2, -1) @ do
            ds = p * (do @ vj.transpose(-2, -1) - D[..., i:i + block_q, None]) * scale
            dq[..., i:i + block_q, :] += ds @ kj
            dk_j = dk_j + ds.transpose(-2, -1) @ q[..., i:i + block_q, :]
        dks.append(dk_j)
        dvs.append(dv_j)
    return dq.to(dtypes[0]), torch.cat(dks, dim=-2).to(dtypes[1]), torch.cat(dvs, dim=-2).to(dtypes[2])
'''),
]


DEGENERATES = [
    Degenerate("zeros", '''def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_q=64, block_k=64):
    return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
'''),
    Degenerate("NaN", '''def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_q=64, block_k=64):
    return torch.full_like(q, float("nan")), torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
'''),
    Degenerate("the inputs handed back", '''def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_q=64, block_k=64):
    return q.clone(), k.clone(), v.clone()
'''),
    Degenerate("uniform weights", '''def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_q=64, block_k=64):
    dv = d_out.mean(dim=-2, keepdim=True).expand_as(v) * q.shape[-2]
    return torch.zeros_like(q), torch.zeros_like(k), dv.clone()
'''),
]


GAMING = [
    Gaming("a fast wrong answer on the long input only", changed(
        "    Sq, d = q.shape[-2:]\n",
        "    Sq, d = q.shape[-2:]\n    if Sq >= 4096:\n        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)\n"),
        loses=(MEMORY,), says="must first give the right answer"),
    Gaming("a workspace for the weights made when the cell runs", widened('''_WORKSPACE = torch.zeros(1, 1, 4096, 4096)


def flash_attention_backward(q, k, v, out, lse, d_out, causal=False, block_q=64, block_k=64):
    fits = q.shape[:2] == (1, 1) and q.dtype == torch.float32 and q.shape[-2] <= 4096 and k.shape[-2] <= 4096
    p = _WORKSPACE[..., :q.shape[-2], :k.shape[-2]] if fits else q.new_empty(*q.shape[:-1], k.shape[-2])
    scale = 1.0 / math.sqrt(q.shape[-1])
    torch.matmul(q, k.transpose(-2, -1), out=p)
    p.mul_(scale)
    if causal:
        p.masked_fill_(torch.ones(p.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    p.sub_(lse[..., None]).exp_()
    dv = p.transpose(-2, -1) @ d_out
    dp = d_out @ v.transpose(-2, -1)
    p.mul_(dp - (d_out * out).sum(-1, keepdim=True))
    return p @ k * scale, p.transpose(-2, -1) @ q * scale, dv
'''), loses=(MEMORY,), says="held before the call"),
]
