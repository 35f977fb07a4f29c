"""The catalogue of paged_kernel: its mistakes (with the cause each must be named by, a key of CAUSES in
autograder/suites/test_paged_kernel.py, and the tests it may fail), correct alternatives, degenerate
answers and answers that game the kernel's measured points."""

from functools import partial

from tests.catalogue.entries import UNDEFINED_ON_A_GPU, Degenerate, Gaming, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("decoding")["paged_kernel"]
changed = partial(edited, SOLUTION)
MEASURED = ("reads_each_block_once_per_head_group", "the_kernel_does_the_work")
WRAPPER = SOLUTION[SOLUTION.index("def paged_decode"):]
KERNELS = SOLUTION[:SOLUTION.index("def paged_decode")]
LAUNCH = "    paged_attention_kernel[(batch, kv_heads, num_splits)]("
K_LOAD = "k = tl.load(KPool + where, mask=inside[:, None], other=0.0).to(tl.float32)"
V_LOAD = "v = tl.load(VPool + where, mask=inside[:, None], other=0.0).to(tl.float32)"


MISTAKES = [
    Mistake("the block table read with the wrong stride", "table_stride",
            fails=("block_table_with_a_stride",),
            code=changed("*q.stride(), *k_pool.stride(), block_tables.stride(0),",
                         "*q.stride(), *k_pool.stride(), block_tables.shape[1],")),
    Mistake("the last partial block not masked", "partial",
            fails=("lengths_the_blocks_do_not_divide", "splits", "block_table_with_a_stride", "keeps_bfloat16") + MEASURED,
            on_gpu=UNDEFINED_ON_A_GPU,
            code=changed(K_LOAD, "k = tl.load(KPool + where).to(tl.float32)", V_LOAD,
                         "v = tl.load(VPool + where).to(tl.float32)")),
    Mistake("chunks combined by averaging", "averaged",
            fails=("matches_attention", "lengths_the_blocks_do_not_divide", "splits", "block_table_with_a_stride",
                   "keeps_bfloat16") + MEASURED,
            code=changed("out = tl.sum(w[:, None] * o, axis=0) / total", "out = tl.sum(o, axis=0) / num_splits")),
    Mistake("a program per query head", "per_query_head",
            fails=MEASURED, on_gpu=(),
            code=changed("    GROUP: tl.constexpr, GROUP_P: tl.constexpr, BLOCK: tl.constexpr, D: tl.constexpr,\n):",
                         "    GROUP: tl.constexpr, GROUP_P: tl.constexpr, BLOCK: tl.constexpr, D: tl.constexpr,\n"
                         "    RATIO: tl.constexpr,\n):",
                         "slots[:, None] * stride_ks + g * stride_kh", "slots[:, None] * stride_ks + (g // RATIO) * stride_kh",
                         LAUNCH, "    paged_attention_kernel[(batch, heads, num_splits)](",
                         "GROUP=group, GROUP_P=triton.next_power_of_2(group), BLOCK=block, D=d)",
                         "GROUP=1, GROUP_P=1, BLOCK=block, D=d, RATIO=group)")),
    Mistake("no 1 / sqrt(D) on the scores", "no_scale",
            fails=("matches_attention", "lengths_the_blocks_do_not_divide", "splits", "block_table_with_a_stride",
                   "keeps_bfloat16") + MEASURED,
            code=changed("1.0 / math.sqrt(d), triton.cdiv", "1.0, triton.cdiv")),
]


ALTERNATIVES = [
    # One program per (sequence, kv head, chunk) still, its group's scores by tl.dot over a group padded to 16 rows.
    Alternative("the group's scores by tl.dot, the group padded to 16 rows", changed(
        "s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale         # [GROUP_P, BLOCK]",
        "s = tl.dot(q, tl.trans(k)) * scale",
        "acc = acc * rescale[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)",
        "acc = acc * rescale[:, None] + tl.dot(p, v)",
        "GROUP=group, GROUP_P=triton.next_power_of_2(group), BLOCK=block, D=d)",
        "GROUP=group, GROUP_P=max(16, triton.next_power_of_2(group)), BLOCK=block, D=d)")),
    Alternative("exp2 with log2(e) folded into the scale, the combine in base 2 too", changed(
        "        rescale = tl.exp(m - m_new)\n        p = tl.exp(s - m_new[:, None])",
        "        rescale = tl.exp2((m - m_new) * 1.4426950408889634)\n"
        "        p = tl.exp2((s - m_new[:, None]) * 1.4426950408889634)",
        "    w = tl.exp(lse_c - m)", "    w = tl.exp2((lse_c - m) * 1.4426950408889634)")),
]


DEGENERATES = [
    Degenerate("zeros stored by both kernels", changed(
        "    tl.store(OutChunks + rows[:, None] * D + dims[None, :], out, mask=members[:, None] < GROUP)",
        "    tl.store(OutChunks + rows[:, None] * D + dims[None, :], out * 0.0, mask=members[:, None] < GROUP)",
        "    tl.store(Out + b * stride_ob + h * stride_oh + dims, out.to(Out.dtype.element_ty))",
        "    tl.store(Out + b * stride_ob + h * stride_oh + dims, (out * 0.0).to(Out.dtype.element_ty))")),
    Degenerate("uniform weights: the mean of the values", changed(
        "        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale         # [GROUP_P, BLOCK]",
        "        s = tl.zeros([GROUP_P, BLOCK], tl.float32)")),
]


GAMING = [
    Gaming("attention in torch over the gathered cache, the kernels launched for show", changed(
        "    return out, lse\n    ### END SOLUTION",
        "    rows = []\n"
        "    for b in range(batch):\n"
        "        n = int(lengths[b])\n"
        "        slots = block_tables[b].long()[torch.arange(n) // block] * block + torch.arange(n) % block\n"
        "        k = k_pool.reshape(-1, kv_heads, d)[slots].transpose(0, 1).repeat_interleave(group, dim=0)\n"
        "        v = v_pool.reshape(-1, kv_heads, d)[slots].transpose(0, 1).repeat_interleave(group, dim=0)\n"
        "        s = (k.float() @ q[b].float()[:, :, None]).squeeze(-1) / math.sqrt(d)\n"
        "        rows.append((torch.softmax(s, -1)[:, None, :] @ v.float()).squeeze(1))\n"
        "    return torch.stack(rows).to(q.dtype), lse\n    ### END SOLUTION"),
        loses=("the_kernel_does_the_work",), says="The work must be your kernel's"),
]
