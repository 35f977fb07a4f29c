"""The catalogue of kernel_autograd: its mistakes (with the cause each must be named by, a key of CAUSES
in autograder/suites/test_kernel_autograd.py, and the tests it may fail), correct alternatives,
degenerate answers and answers that game the forward pass's measured point."""

from functools import partial

from tests.catalogue.entries import Degenerate, Gaming, Mistake, Alternative, edited
from tests.catalogue.flash_kernel import MISTAKES as FLASH_MISTAKES
from tests.notebooks import solution_answers

SOLUTION = solution_answers("triton_attention")["kernel_autograd"]
changed = partial(edited, SOLUTION)
BACKWARD_CALL = ("flash_attention_backward(q.float(), k.float(), v.float(), out.float(), lse, d_out.float(),\n"
                 "                                              ctx.causal)")
RETURN = "        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None   # nothing for causal\n"


MISTAKES = [
    Mistake("three gradients for four inputs (no None for causal)", "no_none",
            fails=("gradients", "causal_gradients"),
            code=changed(RETURN, "        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)\n")),
    Mistake("the backward pass not told it is causal", "not_causal_backward",
            fails=("causal_gradients",),
            code=changed(BACKWARD_CALL, "flash_attention_backward(q.float(), k.float(), v.float(), out.float(), lse, "
                                        "d_out.float())")),
    Mistake("dk returned where dq belongs", "grad_order",
            fails=("gradients", "causal_gradients"),
            code=changed(RETURN, "        return dk.to(q.dtype), dv.to(k.dtype), dq.to(v.dtype), None\n")),
    Mistake("out and d_out swapped in the backward call", "d_out_for_out",
            fails=("gradients", "causal_gradients"),
            code=changed(BACKWARD_CALL, "flash_attention_backward(q.float(), k.float(), v.float(), d_out.float(), lse, "
                                        "out.float(), ctx.causal)")),
]


ALTERNATIVES = [
    Alternative("the options kept on ctx, the kernel's own blocks, gradients from a tuple", '''class TritonAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, causal=False):
        result, logsumexp = triton_flash_attention(query, key, value, causal, block_m=16, block_n=16)
        ctx.options = (causal, 64, 64)
        ctx.save_for_backward(query, key, value, result, logsumexp)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        saved = ctx.saved_tensors
        grads = flash_attention_backward(*saved[:4], saved[4].to(saved[0].dtype), grad_output, *ctx.options)
        return tuple(grads) + (None,)


def triton_attention(q, k, v, causal=False):
    return TritonAttention.apply(q, k, v, causal)
'''),
]

# A slip of triton_flash_attention, an exercise of its own (flash_kernel), is charged there alone: a right
# TritonAttention on the student's own wrong kernel keeps its points (test_kernel_autograd.BUILT_ON).
ALTERNATIVES += [Alternative(f"a right TritonAttention on a kernel with {slip.name!r} (flash_kernel's own slip)",
                             slip.code + "\n\n" + SOLUTION)
                 for slip in FLASH_MISTAKES if slip.cause in ("no_scale", "lse_no_max")]


DEGENERATES = [
    Degenerate("the values handed back as the output", changed(
        "        out, lse = triton_flash_attention(q, k, v, causal)\n",
        "        out, lse = v.clone(), torch.zeros(q.shape[:-1])\n")),
    Degenerate("zeros", changed(
        "        return out\n", "        return torch.zeros_like(out)\n")),
    Degenerate("the mean of the values", changed(
        "        return out\n", "        return v.mean(dim=-2, keepdim=True).expand_as(out).clone()\n")),
]


GAMING = [
    Gaming("the forward pass in torch (the kernel never launched)", changed(
        "        out, lse = triton_flash_attention(q, k, v, causal)\n",
        "        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
        "        if causal:\n"
        "            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), -math.inf)\n"
        "        lse = torch.logsumexp(s, dim=-1)\n"
        "        out = torch.exp(s - lse[..., None]) @ v\n"),
        loses=("forward_runs_the_kernel",), says="torch"),
]
