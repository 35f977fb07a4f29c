"""The catalogue of tiled_attention: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_tiled_attention.py, and the tests it may fail), correct alternatives
and degenerate answers."""

from functools import partial

from autograder.suites.test_tiled_attention import CAUSES
from tests.catalogue.entries import Degenerate, Gaming, Mistake, Alternative, edited
from tests.notebooks import solution_answers

SOLUTION = solution_answers("flash_attention")["tiled_attention"]
changed = partial(edited, SOLUTION)
CAUSAL_VALUES = ("causal", "causal_with_uneven_blocks")
MEMORY, SKIP = "memory_stays_below_one_score_matrix", "causal_skips_tiles_above_the_diagonal"
CAUSAL_MEMORY = "causal_memory_stays_below_one_score_matrix"
MEASURED_MEMORY = (MEMORY, CAUSAL_MEMORY)
HALF = "half_precision_keeps_the_state_in_float32"  # its lse values too: an lse mistake fails it
# The memory is measured on a correct answer only (its values come first): a mistake on the long input
# (4096 tokens; blocks of 256 not causal, the default 64 causal) costs the memory points too.

# The answers below that are no tiled forward still follow the statement's dtypes (computed in the
# accumulation dtype, out rounded back), so that they lose only what their own idea costs.
_WIDE = '''def _wide(function):
    def in_the_accumulation_dtype(q, k, v, *args, **kwargs):
        work = torch.promote_types(q.dtype, torch.float32)
        out, lse = function(q.to(work), k.to(work), v.to(work), *args, **kwargs)
        return out.to(q.dtype), lse
    return in_the_accumulation_dtype


'''


def widened(code):
    """code whose flash_attention computes in the accumulation dtype (see _WIDE)."""
    return _WIDE + code.replace("def flash_attention(", "@_wide\ndef flash_attention(", 1)


DIRECT = widened('''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)
''')

MISTAKES = [
    Mistake("each query tile scaled in place (q changed)", "in_place",
            fails=("returns_output_and_logsumexp",),
            code=changed("        q_tile = q[:, :, i0:i1].to(work) * scale ", "        q_tile = q[:, :, i0:i1].to(work)\n        q_tile *= scale")),
    Mistake("buffers in torch's default float32 (float64 inputs rounded)", "dtypes",
            fails=("keeps_the_dtypes",),
            code=changed("out = torch.empty(B, H, Sq, d_v, dtype=q.dtype)", "out = torch.empty(B, H, Sq, d_v)",
                         "lse = torch.empty(B, H, Sq, dtype=work)", "lse = torch.empty(B, H, Sq)")),
    Mistake("the scores, the state and lse in the inputs' dtype (bfloat16 kept in bfloat16)", "half_state",
            fails=(HALF,),
            code=changed("work = torch.promote_types(q.dtype, torch.float32)", "work = q.dtype")),
    Mistake("each tile's scores made in the inputs' dtype, cast to float32 after the product", "half_state",
            fails=(HALF,),
            code=changed("q_tile = q[:, :, i0:i1].to(work) * scale", "q_tile = q[:, :, i0:i1] * scale",
                         "s = q_tile @ k[:, :, j0:j1].to(work).transpose(-2, -1)",
                         "s = (q_tile @ k[:, :, j0:j1].transpose(-2, -1)).to(work)")),
    Mistake("the accumulation dtype widened for bfloat16 only (float16 kept in float16)", "half_state",
            fails=(HALF,),
            code=changed("work = torch.promote_types(q.dtype, torch.float32)",
                         "work = torch.float32 if q.dtype == torch.bfloat16 else torch.promote_types(q.dtype, q.dtype)")),
    Mistake("the accumulated output not rescaled", "no_rescale",
            fails=("matches_attention", "lengths_the_blocks_do_not_divide", *CAUSAL_VALUES, "large_scores_stay_finite", HALF,
                   *MEASURED_MEMORY, SKIP),
            code=changed("acc = acc * rescale[..., None] + p @ v", "acc = acc + p @ v")),
    Mistake("the logsumexp of the last tile", "lse_last_tile",
            fails=("logsumexp", HALF, *MEASURED_MEMORY),
            code=changed("            l = l * rescale + p.sum(dim=-1)\n",
                         "            l_tile = p.sum(dim=-1)\n            l = l * rescale + l_tile\n",
                         "m + torch.log(l)", "m + torch.log(l_tile)")),
    Mistake("the logsumexp without the maximum", "lse_no_max",
            fails=("logsumexp", HALF, *MEASURED_MEMORY),
            code=changed("m + torch.log(l)", "torch.log(l)")),
    Mistake("only whole query tiles", "tail",
            fails=("lengths_the_blocks_do_not_divide", "causal_with_uneven_blocks", SKIP),
            code=changed("for i0 in range(0, Sq, block_q):", "for i0 in range(0, Sq - block_q + 1, block_q):",
                         "torch.empty(B, H, Sq, d_v", "torch.zeros(B, H, Sq, d_v")),
    Mistake("key tiles skipped after the tile's first query", "skip_from_first_query",
            # right whenever block_q == block_k (the diagonal tile starts at i0): so on the causal memory input
            fails=(*CAUSAL_VALUES, "logsumexp", SKIP),
            code=changed("last_key = min(Sk, i1) if causal else Sk", "last_key = min(Sk, i0 + 1) if causal else Sk")),
    Mistake("no mask inside the diagonal tiles", "no_diagonal_mask",
            fails=(*CAUSAL_VALUES, "logsumexp", SKIP, CAUSAL_MEMORY),
            code=changed("if causal and j1 > i0 + 1:", "if False:")),
    Mistake("every key tile computed, masked", "no_skip",
            fails=("causal_skips_tiles_above_the_diagonal",),
            code=changed("last_key = min(Sk, i1) if causal else Sk", "last_key = Sk")),
    Mistake("the direct computation, one score matrix", "whole_matrix",
            fails=(*MEASURED_MEMORY, SKIP),
            also_named=("no_skip", "causal_whole"), code=DIRECT),
    Mistake("a causal mask built for the whole score matrix", "causal_whole",
            fails=(CAUSAL_MEMORY,),
            code=changed("    for i0 in range(0, Sq, block_q):\n",
                         "    future = torch.triu(torch.ones(Sq, Sk), diagonal=1).bool() if causal else None\n"
                         "    for i0 in range(0, Sq, block_q):\n",
                         "                hidden = torch.arange(j0, j1) > torch.arange(i0, i1)[:, None]",
                         "                hidden = future[i0:i1, j0:j1]")),
]


ALTERNATIVES = [
    Alternative("key tiles outside, every query's state kept", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    dtype = q.dtype
    q, k, v = (t.to(torch.promote_types(dtype, torch.float32)) for t in (q, k, v))
    *lead, n_q, d = q.shape
    n_k = k.shape[-2]
    m = q.new_full((*lead, n_q, 1), float("-inf"))
    l = q.new_zeros(*lead, n_q, 1)
    acc = q.new_zeros(*lead, n_q, v.shape[-1])
    for start in range(0, n_k, block_k):
        end = min(start + block_k, n_k)
        for row in range(0, n_q, block_q):
            stop = min(row + block_q, n_q)
            if causal and start > stop - 1:
                continue
            s = torch.einsum("...qd,...kd->...qk", q[..., row:stop, :], k[..., start:end, :]) / d ** 0.5
            if causal:
                s = s.masked_fill(torch.arange(start, end)[None, :] > torch.arange(row, stop)[:, None], float("-inf"))
            top = torch.maximum(m[..., row:stop, :], s.max(dim=-1, keepdim=True).values)
            p = (s - top).exp()
            factor = (m[..., row:stop, :] - top).exp()
            l[..., row:stop, :] = l[..., row:stop, :] * factor + p.sum(-1, keepdim=True)
            acc[..., row:stop, :] = acc[..., row:stop, :] * factor + p @ v[..., start:end, :]
            m[..., row:stop, :] = top
    return (acc / l).to(dtype), (m + l.log()).squeeze(-1)
'''),
    Alternative("merging tile results through their logsumexp", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    given = q.dtype
    wide = torch.float64 if given == torch.float64 else torch.float32
    q, k, v = q.to(wide), k.to(wide), v.to(wide)
    outs, lses = [], []
    n_q, n_k = q.shape[-2], k.shape[-2]
    for i in range(0, n_q, block_q):
        qi = q[..., i:i + block_q, :] / math.sqrt(q.shape[-1])
        rows = torch.arange(i, min(i + block_q, n_q))
        out, lse = None, None
        for j in range(0, min(n_k, rows[-1].item() + 1) if causal else n_k, block_k):
            s = qi @ k[..., j:j + block_k, :].transpose(-2, -1)
            if causal:
                s = s.masked_fill(torch.arange(j, min(j + block_k, n_k)) > rows[:, None], -math.inf)
            tile_lse = torch.logsumexp(s, dim=-1)                  # -inf for a row with every key hidden
            safe = torch.where(torch.isinf(tile_lse), torch.zeros_like(tile_lse), tile_lse)
            tile_out = torch.exp(s - safe[..., None]) @ v[..., j:j + block_k, :]
            if out is None:
                out, lse = tile_out, tile_lse
            else:
                new_lse = torch.logaddexp(lse, tile_lse)
                out = out * torch.exp(lse - new_lse)[..., None] + tile_out * torch.exp(tile_lse - new_lse)[..., None]
                lse = new_lse
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs, dim=-2).to(given), torch.cat(lses, dim=-1)
'''),
]


DEGENERATES = [
    Degenerate("uniform weights", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    B, H, Sq, _ = q.shape
    out = v.mean(dim=-2, keepdim=True).expand(B, H, Sq, v.shape[-1]).clone()
    return out, torch.full((B, H, Sq), math.log(k.shape[-2]), dtype=q.dtype)
'''),
    Degenerate("zeros", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    return q.new_zeros(*q.shape[:-1], v.shape[-1]), q.new_zeros(q.shape[:-1])
'''),
    Degenerate("NaN", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    return q.new_full((*q.shape[:-1], v.shape[-1]), float("nan")), q.new_full(q.shape[:-1], float("nan"))
'''),
    Degenerate("scores that ignore the queries", '''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    s = k.sum(dim=-1)[..., None, :].expand(*q.shape[:-1], k.shape[-2])
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)
'''),
]


EVERY_TEST = ("returns_output_and_logsumexp", "keeps_the_dtypes", HALF, "matches_attention", "logsumexp",
             
              "lengths_the_blocks_do_not_divide", "causal", "causal_with_uneven_blocks", SKIP,
              "large_scores_stay_finite", *MEASURED_MEMORY)

# The direct computation as a helper, for the answers below that game the measurements around it.
_DIRECT_INTO = '''def _direct(q, k, v, causal, s):
    torch.matmul(q, k.transpose(-2, -1), out=s)
    s /= math.sqrt(q.shape[-1])
    if causal:
        s.masked_fill_(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    s.sub_(lse[..., None]).exp_()
    return s @ v, lse
'''

GAMING = [
    Gaming("a fast wrong answer on the long input only", changed(
        "    B, H, Sq, d = q.shape\n",
        "    B, H, Sq, d = q.shape\n    if Sq >= 4096:\n        return q.new_zeros(B, H, Sq, v.shape[-1]), q.new_zeros(B, H, Sq)\n"),
        loses=MEASURED_MEMORY, says="must first give the right answer"),
    Gaming("a workspace for the score matrix made when the cell runs", widened(_DIRECT_INTO + '''
_WORKSPACE = torch.zeros(1, 1, 4096, 4096)


def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    if q.shape[:2] == (1, 1) and q.dtype == torch.float32 and q.shape[-2] <= 4096 and k.shape[-2] <= 4096:
        s = _WORKSPACE[..., :q.shape[-2], :k.shape[-2]]
    else:
        s = q.new_empty(*q.shape[:-1], k.shape[-2])
    return _direct(q, k, v, causal, s)
'''), loses=(*MEASURED_MEMORY, SKIP), says="held before the call"),
    Gaming("the score matrix given back before the call returns", widened('''def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    out = torch.exp(s - lse[..., None]) @ v
    del s
    return out, lse
'''), loses=(*MEASURED_MEMORY, SKIP), says="held"),
    Gaming("the score matrix in a file of the scratch space", widened(_DIRECT_INTO + '''import numpy as np


def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    shape = (*q.shape[:-1], k.shape[-2])
    s = torch.from_numpy(np.memmap("scores.bin", dtype=np.float32, mode="w+", shape=shape)).to(q.dtype)
    if q.dtype == torch.float32:
        s = torch.from_numpy(np.memmap("scores.bin", dtype=np.float32, mode="w+", shape=shape))
    return _direct(q, k, v, causal, s)
'''), loses=(*MEASURED_MEMORY, SKIP), says="held"),
    Gaming("the score matrix in shared memory (/dev/shm)", widened(_DIRECT_INTO + '''import numpy as np


def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    shape = (*q.shape[:-1], k.shape[-2])
    if q.dtype != torch.float32:
        return _direct(q, k, v, causal, q.new_empty(shape))
    s = torch.from_numpy(np.memmap("/dev/shm/scores", dtype=np.float32, mode="w+", shape=shape))
    return _direct(q, k, v, causal, s)
'''), loses=(*MEASURED_MEMORY, SKIP), says="held"),
    Gaming("an anonymous memory file (memfd_create)", '''import os


def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    os.memfd_create("scores")
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]) @ v, lse
''', loses=EVERY_TEST, says="reaches os.memfd_create"),   # refused where it runs too (PermissionError)
    Gaming("the FLOP counter switched off during the call", _DIRECT_INTO + '''from torch.utils._python_dispatch import _disable_current_modes


def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    with _disable_current_modes():
        return _direct(q, k, v, causal, q.new_empty(*q.shape[:-1], k.shape[-2]))
''', loses=EVERY_TEST, says="reaches into what enforces that"),
    # Reaching what measures the call, each class by one route (rules.py, reach.py): the grader's modules
    # through sys.modules, a forged reply written on the reply pipe, the counter's frame through the
    # call stack, torch's internals by a name computed at run time.
    Gaming("the guard and the counter looked up in sys.modules", _DIRECT_INTO + '''from sys import modules


def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    counter = modules.get("counter")
    return _direct(q, k, v, causal, q.new_empty(*q.shape[:-1], k.shape[-2]))
''', loses=EVERY_TEST, says="imports modules from sys"),
    Gaming("a reply of its own written on the reply pipe", _DIRECT_INTO + '''import os


def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    for fd in range(3, 8):
        try:
            os.write(fd, b"")
        except OSError:
            pass
    return _direct(q, k, v, causal, q.new_empty(*q.shape[:-1], k.shape[-2]))
''', loses=EVERY_TEST, says="reaches os.write"),
    Gaming("the counter's frame found through the call stack", _DIRECT_INTO + '''import traceback


def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    frames = [frame for frame, _ in traceback.walk_stack(None)]
    return _direct(q, k, v, causal, q.new_empty(*q.shape[:-1], k.shape[-2]))
''', loses=EVERY_TEST, says="imports traceback"),
    Gaming("torch's internals by a name built at run time", _DIRECT_INTO + '''
def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    internals = getattr(torch, "_" + "C")
    return _direct(q, k, v, causal, q.new_empty(*q.shape[:-1], k.shape[-2]))
''', loses=EVERY_TEST, says="refused"),
    Gaming("every tile computed in a thread of its own", widened('''import threading


def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    found = {}

    def work():
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
        found["lse"] = torch.logsumexp(s, dim=-1)
        found["out"] = torch.exp(s - found["lse"][..., None]) @ v

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return found["out"], found["lse"]
'''), loses=EVERY_TEST, says="imports threading"),   # the reading flags it (a counted call runs alone, too)
    Gaming("every key tile's scores from element-wise products", changed(
        "        last_key = min(Sk, i1) if causal else Sk ", "        last_key = Sk ",
        "            s = q_tile @ k[:, :, j0:j1].to(work).transpose(-2, -1) ",
        "            s = torch.cat([(q_tile[..., r:r + 16, None, :] * k[:, :, None, j0:j1]).sum(-1) "
        "for r in range(0, i1 - i0, 16)], dim=-2).to(work) "),   # 16 queries at a time: the memory stays small
        loses=(SKIP,), says=CAUSES["no_skip"]),
    Gaming("every key tile's products in NumPy", changed(
        "        last_key = min(Sk, i1) if causal else Sk ", "        last_key = Sk ",
        "            s = q_tile @ k[:, :, j0:j1].to(work).transpose(-2, -1) ",
        "            s = torch.from_numpy(q_tile.numpy() @ k[:, :, j0:j1].to(work).transpose(-2, -1).numpy()) ",
        "            acc = acc * rescale[..., None] + p @ v[:, :, j0:j1].to(work)",
        "            acc = acc * rescale[..., None] + torch.from_numpy(p.numpy() @ v[:, :, j0:j1].to(work).numpy())"),
        loses=(SKIP,), says="NumPy"),
    # matrix-vector products on the inputs short enough to be counted (a Python loop of them over the
    # 4096-token memory inputs would only run out of time), every key tile computed there
    Gaming("a loop of matrix-vector products over every key", changed(
        "        last_key = min(Sk, i1) if causal else Sk ", "        last_key = Sk if Sq <= 256 else (min(Sk, i1) if causal else Sk) ",
        "            s = q_tile @ k[:, :, j0:j1].to(work).transpose(-2, -1) ",
        "            s = (torch.stack([torch.stack([torch.stack([torch.mv(k[b, h, j0:j1].to(work), q_tile[b, h, r]) "
        "for r in range(i1 - i0)]) for h in range(H)]) for b in range(B)]) if Sq <= 256 else "
        "q_tile @ k[:, :, j0:j1].to(work).transpose(-2, -1)) "),
        loses=(SKIP,), says=CAUSES["no_skip"]),
    Gaming("the work done by a thread started when the cell runs", widened('''import queue
import threading

_JOBS, _DONE = queue.Queue(), queue.Queue()


def _serve():
    while True:
        q, k, v, causal = _JOBS.get()
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
        lse = torch.logsumexp(s, dim=-1)
        _DONE.put((torch.exp(s - lse[..., None]) @ v, lse))


threading.Thread(target=_serve, daemon=True).start()


def flash_attention(q, k, v, causal=False, block_q=64, block_k=64):
    _JOBS.put((q, k, v, causal))
    return _DONE.get()
'''), loses=EVERY_TEST, says="imports queue"),   # the reading flags it (the thread beside a counted call is seen, too)
]
