"""The catalogue of flash_kernel: its mistakes (with the cause each must be named by, a key of CAUSES in
autograder/suites/test_flash_kernel.py, and the tests it may fail), correct alternatives, degenerate
answers and answers that game the kernel's measured points."""

from functools import partial

from tests.catalogue.entries import UNDEFINED_ON_A_GPU, Degenerate, Gaming, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("triton_attention")["flash_kernel"]
changed = partial(edited, SOLUTION)
MEASURED = ("the_kernel_does_the_work", "causal_skips_tiles_above_the_diagonal")
CAUSES_NO_SKIP = "Programs must not visit the key tiles"
VALUES = ("matches_attention", "logsumexp", "lengths_the_blocks_do_not_divide", "strided_inputs", "causal",
          "keeps_float16", "large_scores_stay_finite")
K_LOAD = "mask=cols[:, None] < Sk, other=0.0)                     # [BLOCK_N, D]\n        v = tl.load"
RESCALE = "acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)"
SIGNATURE = '''@triton.jit
def flash_attention_kernel(
    Q, K, V, Out, Lse,
    stride_qb, stride_qh, stride_qs, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_ob, stride_oh, stride_os, stride_od,
    H, Sq, Sk, scale,
    CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
):
'''


MISTAKES = [
    Mistake("the output not rescaled when the maximum grows", "no_rescale",
            fails=tuple(test for test in VALUES if test != "logsumexp") + MEASURED,
            code=changed(RESCALE, "acc = acc + tl.dot(p.to(v.dtype), v).to(tl.float32)")),
    # Exact while every tile leaves each row a visible key (any reference point rescales consistently):
    # it shows where a causal tile hides a whole row (NaN) and where large scores overflow exp(m - m_new).
    Mistake("the running maximum of the current tile only", "block_max",
            fails=("logsumexp", "causal", "large_scores_stay_finite"),
            code=changed("m_new = tl.maximum(m, tl.max(s, axis=1))", "m_new = tl.max(s, axis=1)")),
    Mistake("the logsumexp without the maximum", "lse_no_max",
            fails=("logsumexp", "lengths_the_blocks_do_not_divide", "causal"),
            code=changed("tl.store(Lse + head * Sq + rows, m + tl.log(l), mask=rows < Sq)",
                         "tl.store(Lse + head * Sq + rows, tl.log(l), mask=rows < Sq)")),
    Mistake("no 1 / sqrt(D) on the scores", "no_scale",
            fails=VALUES + MEASURED,
            code=changed("H, Sq, Sk, 1.0 / math.sqrt(D), CAUSAL", "H, Sq, Sk, 1.0, CAUSAL")),
    Mistake("key lanes past Sk loaded as zeros but not masked in the scores", "key_mask",
            fails=("lengths_the_blocks_do_not_divide", "strided_inputs"),
            code=changed("        visible = cols[None, :] < Sk\n", "        visible = cols[None, :] >= 0\n")),
    Mistake("no mask on the loads of the last key tile", "out_of_bounds",
            fails=("lengths_the_blocks_do_not_divide", "strided_inputs", "causal"), on_gpu=UNDEFINED_ON_A_GPU,
            code=changed(K_LOAD, ")\n        v = tl.load",
                         "mask=cols[:, None] < Sk, other=0.0)                     # [BLOCK_N, D]\n        s = tl.dot",
                         ")\n        s = tl.dot")),
    Mistake("addresses from a contiguous layout instead of the strides", "stride",
            fails=("strided_inputs",),
            code=changed("*q.stride(), *k.stride(), *v.stride(), *out.stride()",
                         "H * Sq * D, Sq * D, D, 1, H * Sk * D, Sk * D, D, 1, H * Sk * D, Sk * D, D, 1, *out.stride()")),
    Mistake("no causal mask inside the diagonal tiles", "no_diagonal_mask",
            fails=("logsumexp", "causal", "causal_skips_tiles_above_the_diagonal"),
            code=changed("            visible = visible & (cols[None, :] <= rows[:, None])\n", "            pass\n")),
    Mistake("the causal mask, but every key tile visited", "no_skip",
            # A GPU cannot count the elements a kernel's loads address: there the causal call's values are checked.
            fails=("causal_skips_tiles_above_the_diagonal",), on_gpu=(),
            code=changed("        end = tl.minimum((tile + 1) * BLOCK_M, Sk)                          # are never visited\n",
                         "        pass\n")),
    # Right values (the tiles past Sk are masked off entirely): only the count of the loads shows the visits.
    Mistake("the causal loop's end not capped by Sk (tiles past the keys visited when BLOCK_M > BLOCK_N)", "no_cap",
            fails=("causal_skips_tiles_above_the_diagonal",), on_gpu=(),
            code=changed("end = tl.minimum((tile + 1) * BLOCK_M, Sk)", "end = (tile + 1) * BLOCK_M")),
    Mistake("no division by l at the end", "no_division",
            fails=VALUES + MEASURED,
            code=changed("    acc = acc / l[:, None]\n", "")),
    Mistake("the output stored over q", "in_place",
            fails=("matches_attention",),
            code=changed("    out = torch.empty(B, H, Sq, D, dtype=q.dtype, device=q.device)\n", "    out = q\n")),
    # A public kernel (FlagAttention's) has this slip: V's layout taken to be K's.
    Mistake("V addressed with K's strides", "v_strides",
            fails=("strided_inputs",),
            code=changed("v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vs + dims[None, :] * stride_vd,",
                         "v = tl.load(V + b * stride_kb + h * stride_kh + cols[:, None] * stride_ks + dims[None, :] * stride_kd,")),
    Mistake("the grid counted in key tiles (block_n)", "grid",   # (a GPU cannot count the programs launched)
            fails=("matches_attention", "the_kernel_does_the_work"), on_gpu=("matches_attention",),
            code=changed("grid = (triton.cdiv(Sq, block_m), B * H)", "grid = (triton.cdiv(Sq, block_n), B * H)")),
    Mistake("a grid over the heads of one batch element (H instead of B * H)", "grid",
            fails=("matches_attention", "strided_inputs"),
            code=changed("grid = (triton.cdiv(Sq, block_m), B * H)", "grid = (triton.cdiv(Sq, block_m), H)")),
    # Every program computes its rows right, but the rows of most heads are never written: the gate names it.
    Mistake("the two program ids swapped (the head from axis 0, the tile from axis 1)", "swapped_ids",
            fails=VALUES + MEASURED,
            code=changed("tile, head = tl.program_id(0), tl.program_id(1)", "head, tile = tl.program_id(0), tl.program_id(1)")),
    Mistake("the running maximum started at 0", "m_zero",
            fails=("large_scores_stay_finite",),
            code=changed('m = tl.full([BLOCK_M], float("-inf"), tl.float32)', "m = tl.zeros([BLOCK_M], tl.float32)")),
    Mistake("a float32 output for float16 inputs", "dtype",
            fails=("keeps_float16",),
            code=changed("out = torch.empty(B, H, Sq, D, dtype=q.dtype, device=q.device)",
                         "out = torch.empty(B, H, Sq, D, dtype=torch.float32, device=q.device)")),
]


ALTERNATIVES = [
    Alternative("exp2 with the scale and log2(e) folded into the queries, a block pointer per tensor", SIGNATURE + '''
    LOG2E: tl.constexpr = 1.4426950408889634
    start_m = tl.program_id(0) * BLOCK_M
    pid_bh = tl.program_id(1)
    batch, head = pid_bh // H, pid_bh % H
    m_range = start_m + tl.arange(0, BLOCK_M)
    n_range = tl.arange(0, BLOCK_N)
    d_range = tl.arange(0, D)
    q_base = Q + batch * stride_qb + head * stride_qh
    k_base = K + batch * stride_kb + head * stride_kh
    v_base = V + batch * stride_vb + head * stride_vh
    queries = tl.load(q_base + m_range[:, None] * stride_qs + d_range[None, :] * stride_qd,
                      mask=m_range[:, None] < Sq, other=0.0).to(tl.float32) * (scale * LOG2E)
    running_max = tl.full([BLOCK_M], -float("inf"), tl.float32)
    running_sum = tl.zeros([BLOCK_M], tl.float32)
    output = tl.zeros([BLOCK_M, D], tl.float32)
    stop = tl.minimum(start_m + BLOCK_M, Sk) if CAUSAL else Sk
    for key_start in range(0, stop, BLOCK_N):
        key_pos = key_start + n_range
        in_range = key_pos < Sk
        keys = tl.load(k_base + key_pos[:, None] * stride_ks + d_range[None, :] * stride_kd,
                       mask=in_range[:, None], other=0.0).to(tl.float32)
        values = tl.load(v_base + key_pos[:, None] * stride_vs + d_range[None, :] * stride_vd,
                         mask=in_range[:, None], other=0.0).to(tl.float32)
        logits = tl.dot(queries, tl.trans(keys))
        allowed = in_range[None, :] & ((key_pos[None, :] <= m_range[:, None]) | (not CAUSAL))
        logits = tl.where(allowed, logits, -float("inf"))
        new_max = tl.maximum(running_max, tl.max(logits, axis=1))
        correction = tl.exp2(running_max - new_max)
        weights = tl.exp2(logits - new_max[:, None])
        running_sum = running_sum * correction + tl.sum(weights, axis=1)
        output = output * correction[:, None] + tl.dot(weights, values)
        running_max = new_max
    o_base = Out + batch * stride_ob + head * stride_oh
    tl.store(o_base + m_range[:, None] * stride_os + d_range[None, :] * stride_od, output / running_sum[:, None],
             mask=m_range[:, None] < Sq)
    tl.store(Lse + pid_bh * Sq + m_range, (running_max + tl.log2(running_sum)) / LOG2E, mask=m_range < Sq)


def triton_flash_attention(q, k, v, causal=False, block_m=32, block_n=32):
    batch, heads, length, dim = q.shape
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((batch, heads, length), device=q.device, dtype=torch.float32)
    launch = (triton.cdiv(length, block_m), batch * heads)
    flash_attention_kernel[launch](q, k, v, out, lse, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                                   heads, length, k.shape[2], dim ** -0.5,
                                   CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, D=dim)
    return out, lse
'''),
    # Triton 3's tensor descriptors (what its tutorials teach in place of block pointers): a descriptor's
    # bounds are the loads' masks, its loads pass cache_policy to the interpreter by keyword.
    Alternative("tensor descriptors made in the kernel (tl.make_tensor_descriptor, desc.load, desc.store)",
                SIGNATURE + '''    tile, head = tl.program_id(0), tl.program_id(1)
    b, h = head // H, head % H
    q_desc = tl.make_tensor_descriptor(Q + b * stride_qb + h * stride_qh, shape=[Sq, D], strides=[stride_qs, 1],
                                       block_shape=[BLOCK_M, D])
    k_desc = tl.make_tensor_descriptor(K + b * stride_kb + h * stride_kh, shape=[Sk, D], strides=[stride_ks, 1],
                                       block_shape=[BLOCK_N, D])
    v_desc = tl.make_tensor_descriptor(V + b * stride_vb + h * stride_vh, shape=[Sk, D], strides=[stride_vs, 1],
                                       block_shape=[BLOCK_N, D])
    o_desc = tl.make_tensor_descriptor(Out + b * stride_ob + h * stride_oh, shape=[Sq, D], strides=[stride_os, 1],
                                       block_shape=[BLOCK_M, D])
    first = tile * BLOCK_M
    rows = first + tl.arange(0, BLOCK_M)
    q = q_desc.load([first, 0])
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    end = tl.minimum(first + BLOCK_M, Sk) if CAUSAL else Sk
    for start in range(0, end, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        k = k_desc.load([start, 0])
        v = v_desc.load([start, 0])
        s = tl.dot(q, tl.trans(k)).to(tl.float32) * scale
        visible = cols[None, :] < Sk
        if CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        rescale = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * rescale + tl.sum(p, axis=1)
        acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v).to(tl.float32)
        m = m_new
    o_desc.store([first, 0], (acc / l[:, None]).to(Out.dtype.element_ty))
    tl.store(Lse + head * Sq + rows, m + tl.log(l), mask=rows < Sq)


def triton_flash_attention(q, k, v, causal=False, block_m=32, block_n=32):
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    out = torch.empty(B, H, Sq, D, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, H, Sq, dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(Sq, block_m), B * H)
    flash_attention_kernel[grid](
        q, k, v, out, lse, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        H, Sq, Sk, 1.0 / math.sqrt(D), CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, D=D)
    return out, lse
'''),
    Alternative("pointers advanced tile by tile, products by broadcasting", SIGNATURE + '''    i = tl.program_id(0)
    bh = tl.program_id(1)
    offs_m = i * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_ptrs = Q + (bh // H) * stride_qb + (bh % H) * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd
    k_ptrs = K + (bh // H) * stride_kb + (bh % H) * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :] * stride_kd
    v_ptrs = V + (bh // H) * stride_vb + (bh % H) * stride_vh + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd
    q = tl.load(q_ptrs, mask=offs_m[:, None] < Sq, other=0.0).to(tl.float32) * scale
    m_i = tl.zeros([BLOCK_M], tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    hi = Sk
    if CAUSAL:
        hi = tl.minimum(Sk, (i + 1) * BLOCK_M)
    for n0 in range(0, hi, BLOCK_N):
        keys = n0 + offs_n
        k = tl.load(k_ptrs, mask=keys[:, None] < Sk, other=0.0).to(tl.float32)
        v = tl.load(v_ptrs, mask=keys[:, None] < Sk, other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2)
        ok = keys[None, :] < Sk
        if CAUSAL:
            ok = ok & (keys[None, :] <= offs_m[:, None])
        s = tl.where(ok, s, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_ij[:, None])
        alpha = tl.exp(m_i - m_ij)
        l_i = alpha * l_i + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_ij
        k_ptrs += BLOCK_N * stride_ks
        v_ptrs += BLOCK_N * stride_vs
    o_ptrs = Out + (bh // H) * stride_ob + (bh % H) * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od
    tl.store(o_ptrs, acc / l_i[:, None], mask=offs_m[:, None] < Sq)
    tl.store(Lse + bh * Sq + offs_m, m_i + tl.log(l_i), mask=offs_m < Sq)


def triton_flash_attention(q, k, v, causal=False, block_m=32, block_n=32):
    B, H, Sq, D = q.shape
    out = q.new_empty(B, H, Sq, D)
    lse = torch.empty(B, H, Sq, device=q.device)
    flash_attention_kernel[(triton.cdiv(Sq, block_m), B * H)](
        q, k, v, out, lse, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        H, Sq, k.shape[2], D ** -0.5, CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, D=D)
    return out, lse
'''),
]


DEGENERATES = [
    Degenerate("uniform weights (the mean of the values)", changed(
        "        s = tl.where(visible, s, float(\"-inf\"))\n",
        "        s = tl.where(visible, s * 0.0, float(\"-inf\"))\n")),
    Degenerate("zeros", changed("    acc = acc / l[:, None]\n", "    acc = acc * 0.0\n")),
    Degenerate("the values of the first keys handed back", changed(
        "    acc = acc / l[:, None]\n",
        "    acc = tl.load(V + b * stride_vb + h * stride_vh + rows[:, None] * stride_vs + dims[None, :] * stride_vd,\n"
        "                  mask=rows[:, None] < Sk, other=0.0).to(tl.float32)\n")),
    Degenerate("NaN", changed("    acc = acc / l[:, None]\n", "    acc = acc * float('nan')\n")),
]


GAMING = [
    # Lanes a mask turns off read nothing: visiting masked-off tiles past Sk in the call without the
    # mask does not make the causal call's loads look like a skip.
    Gaming("every tile visited when causal, masked-off tiles past Sk added when not", changed(
        "    end = Sk\n    if CAUSAL:                                                              # tiles above the diagonal\n"
        "        end = tl.minimum((tile + 1) * BLOCK_M, Sk)                          # are never visited\n",
        "    end = Sk if CAUSAL else 2 * Sk\n"),
        loses=("causal_skips_tiles_above_the_diagonal",), says=CAUSES_NO_SKIP, on_gpu=()),
    # NumPy inside the kernel's body on the tiles the interpreter loaded (their .handle.data), the
    # products of the algorithm computed beside it for the count: the GPU compiler refuses the body
    # (sandbox/inside/gpu_compiler.py), so no call of the kernel runs.
    Gaming("NumPy on the loaded tiles inside the kernel's body, tl.dot for the count", "import numpy as np\n\n\n"
           + SIGNATURE + '''    tile, head = tl.program_id(0), tl.program_id(1)
    b, h = head // H, head % H
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs + dims[None, :] * stride_qd,
                mask=rows[:, None] < Sq, other=0.0)
    keys, values = [], []
    for start in range(0, Sk, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        k = tl.load(K + b * stride_kb + h * stride_kh + cols[:, None] * stride_ks + dims[None, :] * stride_kd,
                    mask=cols[:, None] < Sk, other=0.0)
        v = tl.load(V + b * stride_vb + h * stride_vh + cols[:, None] * stride_vs + dims[None, :] * stride_vd,
                    mask=cols[:, None] < Sk, other=0.0)
        s = tl.dot(q, tl.trans(k))
        tl.dot(s.to(v.dtype), v)
        keys.append(k.handle.data.astype(np.float64))
        values.append(v.handle.data.astype(np.float64))
    n = int(np.asarray(getattr(Sk, "handle", Sk).data if hasattr(Sk, "handle") else Sk).item())
    kk, vv = np.concatenate(keys)[:n], np.concatenate(values)[:n]
    scores = q.handle.data.astype(np.float64) @ kk.T * float(np.asarray(scale.handle.data if hasattr(scale, "handle")
                                                                         else scale).item())
    if CAUSAL:
        scores = np.where(np.arange(n)[None, :] > np.asarray(rows.handle.data)[:, None], -np.inf, scores)
    top = scores.max(axis=1, keepdims=True)
    weights = np.exp(scores - top)
    total = weights.sum(axis=1, keepdims=True)
    o = tl.zeros([BLOCK_M, D], tl.float32)
    o.handle.data = (weights @ vv / total).astype(np.float32)
    lse = tl.zeros([BLOCK_M], tl.float32)
    lse.handle.data = (top + np.log(total))[:, 0].astype(np.float32)
    tl.store(Out + b * stride_ob + h * stride_oh + rows[:, None] * stride_os + dims[None, :] * stride_od,
             o, mask=rows[:, None] < Sq)
    tl.store(Lse + head * Sq + rows, lse, mask=rows < Sq)


''' + SOLUTION[SOLUTION.index("def triton_flash_attention"):], loses=VALUES + MEASURED + ("returns_output_and_logsumexp",),
        says="not Triton that a GPU compiles"),
    Gaming("attention in torch, the kernel launched for show", SOLUTION.replace(
        "    return out, lse\n",
        "    s = q.float() @ k.float().transpose(-2, -1) / math.sqrt(D)\n"
        "    if causal:\n"
        "        s = s.masked_fill(torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).triu(1), -math.inf)\n"
        "    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype), torch.logsumexp(s, dim=-1)\n"),
        loses=MEASURED, says="torch"),
    Gaming("the scores by the kernel's products, the softmax in torch", SIGNATURE + '''    pass


def triton_flash_attention(q, k, v, causal=False, block_m=32, block_n=32):
    D = q.shape[-1]
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), k.float()) / math.sqrt(D)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    return torch.einsum("bhqk,bhkd->bhqd", torch.exp(s - lse[..., None]), v.float()).to(q.dtype), lse
''',
        loses=MEASURED, says="torch"),
]
