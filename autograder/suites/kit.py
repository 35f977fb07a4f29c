"""What every suite shares: inputs, sizes, crash hints, module runs, gradient checks, and the
attention maths on the grader's side (once, with the switches its named mistakes need).

A suite never talks to the student process directly: its calls (one per student function, in the
suite's own module) go through `run_module` or `student.call`, check that what came back has the
promised form, and raise Feedback in words the student understands when it does not.  Inputs are
made here, so every test uses sizes that are all distinct (B != H != Sq != Sk != d_k != d_v).
"""

import contextlib
import functools
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.harness import checks
from autograder.harness.checks import Feedback
from autograder.harness.plugin import student_message
from autograder.student import StudentError

# Distinct sizes, so that a transpose or a reshape over the wrong axis cannot go unnoticed.
B, H, SQ, SK, D_K, D_V = 2, 3, 5, 7, 4, 6
D_MODEL = H * D_K


SHAPE_ERRORS = ("size of tensor", "shapes cannot be multiplied", "must match the size", "shape '[",
                "mat1 and mat2", "operands could not be broadcast", "matmul: Input operand",
                "not broadcastable", "dimension", "expanded size", "out of range")


@contextlib.contextmanager
def crash_hint(hint, when=SHAPE_ERRORS):
    """When the student's code raises an error whose message says one of `when` (by default, a
    mismatch of shapes), show their error and traceback, then the likely cause; any other error
    is shown as it is.  `hint` may also be a list of (signs, hint) pairs: the first that matches;
    a hint may be a function, called only then, that finds the cause ('' when it cannot)."""
    causes = hint if isinstance(hint, list) else [(when, hint)]
    try:
        yield
    except StudentError as error:
        if error.kind == "NotImplementedError":
            raise
        for signs, cause in causes:
            if any(sign in error.message for sign in signs):
                cause = cause() if callable(cause) else cause
                raise Feedback(student_message(error), f"Likely cause: {cause}" if cause else "") from None
        raise


def randn(*shape, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype)


def qkv(leading=(B, H), sq=SQ, sk=SK, d_k=D_K, d_v=D_V, dtype=torch.float64, seed=0):
    return (randn(*leading, sq, d_k, dtype=dtype, seed=seed),
            randn(*leading, sk, d_k, dtype=dtype, seed=seed + 1),
            randn(*leading, sk, d_v, dtype=dtype, seed=seed + 2))


def random_mask(*shape, seed=0):
    """A boolean mask (True = may attend) with at least one allowed and one blocked key per row."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(*shape, generator=generator) > 0.4
    rows = mask.shape[-1]
    first = torch.randint(rows, shape[:-1], generator=generator)
    mask.scatter_(-1, first.unsqueeze(-1), True)
    blocked = (first + 1 + torch.randint(rows - 1, shape[:-1], generator=generator)) % rows
    mask.scatter_(-1, blocked.unsqueeze(-1), False)
    return mask


def tril(sq, sk=None):
    return torch.ones(sq, sk or sq, dtype=torch.bool).tril()


BACKWARD_HINT = ("The backward pass failed: an in-place operation (masked_fill_, /=, +=) on a tensor that "
                 "autograd still needs breaks it; use the out-of-place forms.")
INPLACE_ERRORS = ("inplace operation", "in-place operation")
CUT_HINT = ("Its path to the output is cut: something is detached, converted to NumPy, or rebuilt as a "
            "new tensor from its values.")


# -- torch as the independent reference ------------------------------------------------------

def torch_attention(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def torch_weights(q, k, mask=None):
    return attention(q, k, k, mask)[1]


# -- modules: parameters, runs, ValueErrors, gradients, causality --------------------------------

PROJECTIONS = ("W_q", "W_k", "W_v", "W_o")


def linear_parameters(shapes, bias=True, dtype=torch.float64, seed=10):
    """Random weights for named nn.Linear layers; shapes maps a name to (d_out, d_in)."""
    params = {}
    for offset, (name, (d_out, d_in)) in enumerate(shapes.items()):
        params[f"{name}.weight"] = randn(d_out, d_in, dtype=dtype, seed=seed + offset) / d_in ** 0.5
        if bias:
            params[f"{name}.bias"] = randn(d_out, dtype=dtype, seed=seed + 10 + offset) * 0.1
    return params


def has_bias(params):
    return any(name.endswith(".bias") for name in params)


def mha_parameters(d_model=D_MODEL, bias=True, dtype=torch.float64, seed=10):
    """Random weights for W_q, W_k, W_v, W_o, named as in the student's module."""
    return linear_parameters({name: (d_model, d_model) for name in PROJECTIONS}, bias, dtype, seed)


def run_module(student, cls, init_args, init_kwargs=None, *, params=None, calls=(), dtype=torch.float64,
               train=False, grad_outputs=None, functions=(), stand_in=None, count_flops=False, held=False):
    """Build the student's module `cls` (or a stand-in, see Student.module), load `params`, run
    `calls` ((method, args, kwargs), (args, kwargs) for forward, or ("load", {name: value}) to change
    parameters between two calls) and then `functions`
    ((name, args, kwargs), called with the module first) on the one instance; returns the reply.
    count_flops: the reply's "flops" counts the matrix products of the last function; held: the reply's
    "held" lists the tensors the module keeps outside its parameters."""
    steps = []
    for call in calls:
        if call[0] == "load":  # ("load", {name: value}): new values for parameters between two calls
            steps.append({"load": dict(call[1]), "args": [], "kwargs": {}})
            continue
        method, args, kwargs = call if len(call) == 3 else ("forward", *call)
        steps.append({"method": method, "args": list(args), "kwargs": dict(kwargs)})
    for function, args, kwargs in functions:
        steps.append({"function": function, "args": list(args), "kwargs": dict(kwargs)})
    if count_flops:
        steps[-1]["count_flops"] = True
    try:
        return student.module(cls, init_args, init_kwargs or {}, load=params, dtype=dtype, train=train,
                              steps=steps, grad=grad_outputs is not None, stand_in=stand_in,
                              grad_outputs=grad_outputs or [[] for _ in steps], held=held)
    except StudentError as error:
        if error.kind == "AttributeError" and "no parameter named" in error.message:
            raise Feedback(f"{error.message}.", "Keep the parameter names the exercise asks for.") from None
        if error.kind == "ValueError" and "has shape" in error.message and "<cell" not in error.traceback:
            raise Feedback(f"{cls}: parameter {error.message}.", "Check the sizes of the nn.Linear layers.") from None
        raise


def expect_value_error(attempt, what, hint):
    """attempt() must make the student's code raise ValueError.  A missing name (the cell that
    should define it did not run) or an untouched stub is passed on, to be reported as such."""
    try:
        attempt()
    except StudentError as error:
        if error.kind in ("NameError", "NotImplementedError"):
            raise
        checks.require(error.kind == "ValueError", f"{what} raised {error.kind}, not ValueError.", hint)
        return
    raise Feedback(f"{what} was accepted.", hint)


def check_gradients(reply, forward, params, inputs, upstream, seed=900):
    """The gradients autograd gave through the student's forward (reply: input of the first call,
    then parameters) equal finite differences of that same forward, run again: along one random
    direction of the inputs and every parameter.  A wrong value elsewhere cannot fail this.

    forward(params, inputs) -> the outputs of the student's forward; upstream: one gradient per output.
    """
    got = dict(reply["param_grads"])
    got.update(zip(inputs, reply["input_grads"][0]))
    point = {**inputs, **params}
    for name in point:
        checks.require(got.get(name) is not None, f"No gradient reaches {name}.", CUT_HINT)
    direction = {name: randn(*value.shape, seed=seed + index) for index, (name, value) in enumerate(point.items())}

    def loss(shift):
        moved = {name: value + shift * direction[name] for name, value in point.items()}
        outputs = forward({name: moved[name] for name in params}, {name: moved[name] for name in inputs})
        return sum(float((output.double() * grad).sum()) for output, grad in zip(outputs, upstream))

    step = 1e-3
    numeric = (loss(step) - loss(-step)) / (2 * step)
    analytic = sum(float((got[name].double() * direction[name]).sum()) for name in point)
    if math.isnan(numeric):  # the forward itself gives NaN: its own tests say so, nothing to compare here
        return
    checks.require(abs(numeric - analytic) <= 1e-3 * (1 + abs(numeric)),
                   f"The gradients disagree with your own forward pass: along a random direction of the "
                   f"inputs and parameters they give {analytic:.6g}, finite differences give {numeric:.6g}.")


def mha_stand_in(d_model=D_MODEL, num_heads=H, bias=True):
    """What the statement of MultiHeadAttention promises later exercises: d_model, num_heads, d_k
    and the four projections (see Student.module)."""
    return {"attributes": {"d_model": d_model, "num_heads": num_heads, "d_k": d_model // num_heads},
            "linears": {name: [d_model, d_model, bias] for name in PROJECTIONS}}


def torch_mha(params, num_heads, query, key, value, mask=None):
    """nn.MultiheadAttention with the same weights: the independent reference."""
    d_model = query.shape[-1]
    bias = has_bias(params)
    module = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True, dtype=query.dtype)
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.cat([params[f"{n}.weight"] for n in PROJECTIONS[:3]]))
        module.out_proj.weight.copy_(params["W_o.weight"])
        if bias:
            module.in_proj_bias.copy_(torch.cat([params[f"{n}.bias"] for n in PROJECTIONS[:3]]))
            module.out_proj.bias.copy_(params["W_o.bias"])
    attn_mask = None if mask is None else ~mask  # nn.MultiheadAttention: True = blocked
    return module(query, key, value, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)


def causal_mha(params, num_heads, x):
    """Causal self-attention with nn.MultiheadAttention and the given W_q...W_o."""
    return torch_mha(params, num_heads, x, x, x, tril(x.shape[1]))


def changed_tokens(x, seed=700):
    """x, then one copy of x per position with that token replaced: the inputs of `influence`."""
    copies = [x]
    for position in range(x.shape[1]):
        changed = x.clone()
        changed[:, position] = randn(x.shape[0], x.shape[2], dtype=x.dtype, seed=seed + position)
        copies.append(changed)
    return copies


def influence(outputs):
    """[T, T]: how much output i of the first sequence moves when token j changes, from the
    outputs for changed_tokens(x); below 1e-9 counts as not at all."""
    base = outputs[0][0]
    moved = torch.stack([(changed[0] - base).abs().amax(-1) for changed in outputs[1:]], dim=1)
    return moved.double().masked_fill(moved < 1e-9, 0.0)


def check_causal(moved, what):
    """Output i must not move when a later token changes; a failure shows the dependency map."""
    checks.exactly_zero_where(moved, ~tril(moved.shape[0]), what, "A position must not see later positions.",
                              yours="how much output i moves when token j changes")


# -- the attention maths of the grader's side, with the switches its named mistakes need ---------

def attention(q, k, v, mask=None, *, scale=None, dim=-1, invert=False, mask_after=False, add=False):
    """(output, weights) of scaled dot-product attention (True = may attend; a row with no allowed
    key gets zeros); each keyword is one named mistake's switch."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None and invert:
        mask = ~mask
    if mask is not None and add:
        scores, mask = scores + mask.to(scores.dtype), None
    if mask is not None and not mask_after:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=dim).nan_to_num(0.0)
    if mask is not None and mask_after:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights


def heads_of(x, num_heads):
    """[B, S, H * d_k] -> [B, H, S, d_k]."""
    b, s, d = x.shape
    return x.view(b, s, num_heads, d // num_heads).transpose(1, 2)


def named(causes, **found):
    """{cause text: what that mistake gives}, from a suite's CAUSES and its keys: the feedback then
    says "It matches what <cause text> gives." when a student's value equals one of them."""
    return {causes[key]: value for key, value in found.items()}


def pick(mistakes, index):
    """The index-th item (0 = output, 1 = weights) of every mistaken pair."""
    return {name: values[index] for name, values in mistakes.items()}


def multi_head(params, num_heads, query, key, value, mask=None, *, scale=None, shared=False,
               output_projection=True, merge_transposed=True):
    """Multi-head attention with W_q...W_o from params, written out so that each mistake below is one
    switch: the attention maths stay those of `attention`."""
    def project(name, x):
        return F.linear(x, params[f"{name}.weight"], params.get(f"{name}.bias"))

    q = heads_of(project("W_q", query), num_heads)
    k = heads_of(project("W_q" if shared else "W_k", key), num_heads)
    v = heads_of(project("W_q" if shared else "W_v", value), num_heads)
    context, weights = attention(q, k, v, mask, scale=scale)
    b, h, s, d_k = context.shape
    merged = context.transpose(1, 2).reshape(b, s, h * d_k) if merge_transposed else context.reshape(b, s, h * d_k)
    return (project("W_o", merged) if output_projection else merged), weights


MHA_CAUSES = {
    "shared_projection": "one projection (W_q) for queries, keys and values; W_k and W_v are never used",
    "no_output_projection": "leaving out the output projection W_o",
    "scale_d_model": "scaling by sqrt(d_model) instead of sqrt(d_k) of one head",
    "merge_without_transpose": "merging the heads with a reshape of [B, H, S, d_k] without moving the head "
                               "axis back first",
}


def mha_mistakes(params, num_heads, query, key, value, mask=None):
    """The named mistakes of a module with W_q...W_o (MultiHeadAttention, CausalSelfAttention):
    cause text -> (output, weights)."""
    def run(**switch):
        return multi_head(params, num_heads, query, key, value, mask, **switch)
    return named(MHA_CAUSES, shared_projection=run(shared=True), no_output_projection=run(output_projection=False),
                 scale_d_model=run(scale=1 / math.sqrt(query.shape[-1])),
                 merge_without_transpose=run(merge_transposed=False))


# -- cached decoding: a sequence fed as a prompt, then chunks ------------------------------------

def piece_bounds(length, first, chunk):
    """(start, end) of the pieces: the first `first` tokens, then `chunk` at a time."""
    return [(0, first)] + [(start, min(start + chunk, length)) for start in range(first, length, chunk)]


def cache_calls(x, first=1, chunk=1):
    """Calls ((method, args, kwargs)) that reset a module's cache, then feed x [B, T, D] in pieces."""
    return [("reset_cache", (), {})] + [("forward", (x[:, start:end],), {"use_cache": True})
                                         for start, end in piece_bounds(x.shape[1], first, chunk)]


def joined_new_outputs(outputs, d_model, width="D"):
    """The tensors among a cached run's outputs (one per piece), each [B, T_new, d_model] (`width`
    names that size in the hint), concatenated over the tokens."""
    outputs = [output for output in outputs if isinstance(output, torch.Tensor)]
    for output in outputs:
        checks.require(output.dim() == 3 and output.shape[-1] == d_model,
                       f"forward(x_new, use_cache=True) returned shape {list(output.shape)}.",
                       f"Return the output for the new tokens only: [B, T_new, {width}].")
    return torch.cat(outputs, dim=1)


# -- tiled attention: the logsumexp, and memory read from outside the student's process ----------

def logsumexp(q, k, mask=None):
    """The natural logarithm of each query's sum of exp(scaled scores) over its allowed keys."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.logsumexp(dim=-1)


# The long inputs of the memory tests: one [N, N] float32 matrix (64 MiB) stands far out in a call's memory.
MEMORY_N, MEMORY_D, MEMORY_BLOCK = 4096, 32, 256
# What a fresh child holds to run a notebook's cells and take one call, beside the call's own tensors,
# in the kernel's accounting (measured on the course's own answer: 3.5 to 6 MiB; see docs of make bench).
RUNTIME_BYTES = 8 << 20
HELD_AHEAD = ("The notebook's cells already held {held} before the call started: memory made ahead of the "
              "call (a workspace, a cache of scores) counts as the call's. Keep no large tensors at the top "
              "level of your cells.")


def memory_inputs(count, seed):
    """`count` float32 tensors [1, 1, MEMORY_N, MEMORY_D]."""
    return [randn(1, 1, MEMORY_N, MEMORY_D, seed=seed + i, dtype=torch.float32) for i in range(count)]


@functools.lru_cache(maxsize=None)
def memory_reference(seed, causal=False):
    """(q, k, v, out, lse) of the forward's memory input: the grader's attention in float32 (the
    inputs' dtype), causal or not, computed once per grading process."""
    q, k, v = memory_inputs(3, seed)
    scores = q @ k.transpose(-2, -1) / math.sqrt(MEMORY_D)
    if causal:
        scores.masked_fill_(~tril(MEMORY_N), float("-inf"))
    lse = scores.logsumexp(dim=-1)
    return q, k, v, torch.exp(scores - lse[..., None]) @ v, lse


@functools.lru_cache(maxsize=None)
def memory_gradients(seed):
    """(q, k, v, d_out, out, lse, dq, dk, dv) of the backward's memory input, in float32 and in closed
    form (dV = P^T dO; dS = P * (dO V^T - rowsum(dO * O)); dQ = dS K / sqrt(d); dK = dS^T Q / sqrt(d)),
    computed once per grading process."""
    q, k, v, d_out = memory_inputs(4, seed)
    scale = 1 / math.sqrt(MEMORY_D)
    scores = q @ k.transpose(-2, -1) * scale
    lse = scores.logsumexp(dim=-1)
    weights = torch.exp(scores.sub_(lse[..., None]))
    del scores
    out = weights @ v
    dv = weights.transpose(-2, -1) @ d_out
    weights.mul_(d_out @ v.transpose(-2, -1) - (d_out * out).sum(-1, keepdim=True))
    return q, k, v, d_out, out, lse, weights @ k * scale, weights.transpose(-2, -1) @ q * scale, dv


def check_inputs_unchanged(reply, inputs, names, function, hint):
    """A call made with echo_args=True left its first inputs as they were handed in."""
    for before, after, name in zip(inputs, reply["args_after"], names):
        checks.require(isinstance(after, torch.Tensor) and torch.equal(after, before),
                       f"{function} changed its input {name} in place.", hint)


def megabytes(count):
    return f"{count / 2**20:.1f} MiB"


MEASURED_WRONG = "The measured call must first give the right answer: the memory of a wrong answer earns nothing."


def check_measured_values(actual, expected, what, names, mistakes_of=None):
    """A measured point is earned only by the right answer: the values of the very call that was
    measured, on its own inputs, within float32's tolerance.  mistakes_of(index), called only when
    a value is wrong, gives the named mistakes of that output (they are costly on long inputs)."""
    for index, (value, want, name) in enumerate(zip(actual, expected, names)):
        checks.shape(value, want.shape, f"{name} of {what}")
        if checks.is_close(checks.as_tensor(value), want):
            continue
        mistakes = {name: found.to(want.dtype) for name, found in (mistakes_of(index) if mistakes_of else {}).items()}
        named = checks.known_mistake(checks.as_tensor(value), mistakes)
        checks.close(value, want, f"{name} of {what}",
                     f"{MEASURED_WRONG} {named}" if named else MEASURED_WRONG)


def check_memory(reply, function, tensors, matrix, whole, blocks=f"blocks of {MEMORY_BLOCK}"):
    """A call of `function` on the memory inputs (made with measure_memory=True, with `blocks`
    (as the feedback words them: MEMORY_BLOCK, or the statement's defaults), in a fresh child) was charged at most RUNTIME_BYTES, a quarter of one [N, N]
    float32 `matrix`, and three times `tensors`, the call's inputs and outputs (its window also holds
    the request as it arrives and the reply as it leaves).  With the kernel's accounting the charge
    is everything the child held at the call's worst moment since before the notebook's first line
    ran; `whole` is the hint when the call itself reached the size of that matrix."""
    peak = reply.get("peak_memory")
    what = f"{function} on {MEMORY_N} queries and {MEMORY_N} keys (d = {MEMORY_D}, float32, {blocks})"
    if peak is None:
        raise Feedback(f"The memory of {what} could not be measured (the process stopped during the call).")
    matrix_bytes = MEMORY_N * MEMORY_N * 4
    allowed = RUNTIME_BYTES + matrix_bytes // 4 + 3 * sum(t.numel() * t.element_size() for t in tensors)
    if peak.bytes <= allowed:
        return
    held = f" ({megabytes(peak.held_before)} of it held before the call)" if peak.accounting == "cgroup" else ""
    if peak.held_before >= matrix_bytes // 4:
        hint = HELD_AHEAD.format(held=megabytes(peak.held_before))
    elif peak.bytes - peak.held_before >= matrix_bytes:
        hint = whole
    else:
        hint = "Hold one tile of scores at a time."
    raise Feedback(f"{what} held {megabytes(peak.bytes)} of memory at its peak{held}, where {megabytes(allowed)} "
                   f"is allowed (one {MEMORY_N} x {MEMORY_N} float32 {matrix} is {megabytes(matrix_bytes)}).", hint)


# -- counted work: the FLOPs of a call's products, counted in the student's process (sandbox/counter.py) ---

HIDDEN_WORK = ("Do the products with torch (@, torch.matmul, einsum or element-wise products): work done in "
               "NumPy or with Python numbers cannot be counted, and a count below what the algorithm itself "
               "needs earns nothing.")


def check_work(reply, what, low, high, observed, too_much):
    """The counted call's FLOPs (reply of a request with count_flops) lie in [low, high]: above is
    `too_much` (the hint), below is work the count cannot see.  The count must have stayed whole and
    the call must have been the child's only thread."""
    if not reply.get("count_intact", False):
        raise Feedback(f"The count of {what}'s work was switched off or changed while it ran.",
                       "Leave the grader's FLOP counter alone: the count of a call is what it did.")
    if reply.get("other_threads"):
        raise Feedback(f"{what} ran beside {reply['other_threads']} other thread(s) started by the notebook; "
                       "their work cannot be counted.", "Start no threads in the notebook's cells.")
    flops = reply["flops"]
    if flops > high:
        raise Feedback(f"{what} did {flops:,} floating-point operations in its products; {observed}", too_much)
    if flops < low:
        raise Feedback(f"{what} did {flops:,} floating-point operations in products torch could count, fewer "
                       f"than the {low:,} that computing every score it needs takes.", HIDDEN_WORK)


# -- latent attention: RoPE and DeepSeek-V2's multi-head latent attention ---------------------------

def rope(x, positions, base=10000.0, *, half_split=False, clockwise=False, frequency_per_dim=False, cos_only=False):
    """Rotary position embedding in interleaved pairs (x[2i], x[2i + 1]) turned by positions * base^(-2i/d);
    each keyword is one named mistake's switch."""
    d = x.shape[-1]
    exponents = torch.arange(d // 2, dtype=torch.float64) * (1 if frequency_per_dim else 2) / d
    angles = positions.to(torch.float64)[:, None] * base ** -exponents * (-1 if clockwise else 1)   # [S, d/2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if cos_only:
        return x * cos.repeat_interleave(2, dim=-1)
    if half_split:
        first, second = x[..., : d // 2], x[..., d // 2:]
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


# Distinct sizes of the MLA tests: d_model, heads, per-head width, latent width, RoPE width.
MLA_D_MODEL, MLA_H, MLA_D_HEAD, MLA_D_LATENT, MLA_D_ROPE = 16, 3, 6, 10, 4
MLA_SIZES = (MLA_D_MODEL, MLA_H, MLA_D_HEAD, MLA_D_LATENT, MLA_D_ROPE)


def mla_shapes(d_model=MLA_D_MODEL, num_heads=MLA_H, d_head=MLA_D_HEAD, d_latent=MLA_D_LATENT, d_rope=MLA_D_ROPE):
    """{projection: (out, in)} of MultiHeadLatentAttention, as the statement names them."""
    return {"W_q": (num_heads * d_head, d_model), "W_qr": (num_heads * d_rope, d_model),
            "W_dkv": (d_latent, d_model), "W_uk": (num_heads * d_head, d_latent),
            "W_uv": (num_heads * d_head, d_latent), "W_kr": (d_rope, d_model), "W_o": (d_model, num_heads * d_head)}


def mla_parameters(dtype=torch.float64, seed=30):
    return linear_parameters(mla_shapes(), bias=False, dtype=dtype, seed=seed)


def mla_stand_in():
    """What the statement of MultiHeadLatentAttention promises absorbed_attention: its sizes and projections."""
    return {"attributes": {"num_heads": MLA_H, "d_head": MLA_D_HEAD, "d_latent": MLA_D_LATENT, "d_rope": MLA_D_ROPE},
            "linears": {name: [d_in, d_out, False] for name, (d_out, d_in) in mla_shapes().items()}}


def mla_cache_entries(params, x, positions, rope_of=rope, *, unrotated_key=False):
    """(latent [B, S, d_latent], rotated RoPE key [B, S, d_rope]) that x's tokens at `positions` add to the cache."""
    k_rope = F.linear(x, params["W_kr.weight"])
    return F.linear(x, params["W_dkv.weight"]), (k_rope if unrotated_key else rope_of(k_rope, positions))


def mla_queries(params, x, positions, rope_of=rope):
    """(content queries [B, H, S, d_head], rotated RoPE queries [B, H, S, d_rope])."""
    b, s, _ = x.shape
    q = F.linear(x, params["W_q.weight"]).view(b, s, MLA_H, MLA_D_HEAD).transpose(1, 2)
    q_rope = F.linear(x, params["W_qr.weight"]).view(b, s, MLA_H, MLA_D_ROPE).transpose(1, 2)
    return q, rope_of(q_rope, positions)


def mla_attend(params, x_new, latent, k_rope, positions, rope_of=rope, *, scale=None, mask=True,
               mask_offset=True, rope_values=False, absorbed_weights=None):
    """The output [B, S, d_model] of x_new's queries over a cache of T >= S tokens (the last S are
    x_new's), the naive way: the latent up-projected to per-head keys and values.  absorbed_weights:
    (W_uk, W_uv) per head, [H, d_head, d_latent], to fold into the query and output side instead."""
    b, s, _ = x_new.shape
    t = latent.shape[1]
    q, q_rope = mla_queries(params, x_new, positions, rope_of)
    scale = 1 / math.sqrt(MLA_D_HEAD + MLA_D_ROPE) if scale is None else scale
    rope_scores = q_rope @ k_rope.unsqueeze(1).transpose(-2, -1)                       # [B, H, S, T]
    if absorbed_weights is None:
        k = F.linear(latent, params["W_uk.weight"]).view(b, t, MLA_H, MLA_D_HEAD).transpose(1, 2)
        v = F.linear(latent, params["W_uv.weight"]).view(b, t, MLA_H, MLA_D_HEAD).transpose(1, 2)
        if rope_values:
            v = rope_of(v, torch.arange(t))
        scores = q @ k.transpose(-2, -1) + rope_scores
    else:
        w_uk, w_uv = absorbed_weights
        scores = (q @ w_uk) @ latent.unsqueeze(1).transpose(-2, -1) + rope_scores
    if mask:
        allowed = torch.ones(s, t, dtype=torch.bool).tril(diagonal=t - s if mask_offset else 0)
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores * scale, dim=-1)
    context = weights @ v if absorbed_weights is None else (weights @ latent.unsqueeze(1)) @ w_uv.transpose(-2, -1)
    return F.linear(context.transpose(1, 2).reshape(b, s, MLA_H * MLA_D_HEAD), params["W_o.weight"])


def mla(params, x, rope_of=rope, *, unrotated_key=False, **switches):
    """MultiHeadLatentAttention(x) without a cache: causal self-attention over x [B, S, d_model]."""
    positions = torch.arange(x.shape[1])
    latent, k_rope = mla_cache_entries(params, x, positions, rope_of, unrotated_key=unrotated_key)
    return mla_attend(params, x, latent, k_rope, positions, rope_of, **switches)


def students_rope(student):
    """The student's apply_rope as a function on the grader's tensors (None when it cannot run)."""
    def turn(x, positions):
        return checks.tensor(student.call("apply_rope", x, positions)["output"], "apply_rope")
    try:
        turn(randn(1, 2, MLA_D_ROPE, seed=1), torch.arange(2))
    except (StudentError, checks.Feedback):
        return None
    return turn


def reference_or_own_rope(student, output, reference_of):
    """What an exercise built on apply_rope should give: reference_of(rope) (the grader's RoPE), unless
    `output` equals reference_of(the student's own apply_rope); then the output is right, and a RoPE
    slip is charged to apply_rope alone."""
    theirs = students_rope(student)
    if theirs is not None and checks.is_close(output, reference_of(theirs)):
        return output
    return reference_of(rope)


def up_projections_read_as_in_out(params):
    """W_uk and W_uv per head, [H, d_head, d_latent], as a named mistake reads them: nn.Linear's weight
    [out, in] taken as if it were [in, out] (the right reading is weight.view(H, d_head, d_latent))."""
    return tuple(params[f"{name}.weight"].reshape(MLA_D_LATENT, MLA_H, MLA_D_HEAD).permute(1, 2, 0)
                 for name in ("W_uk", "W_uv"))


# -- head pruning: the notebook's PrunableModel, evaluated here with the grader's weights -----------

PRUNING_HEADS = 4


def prunable_parameters(reference, seed):
    """Random float64 weights of the notebook's PrunableModel(PRUNING_HEADS), named as in the module."""
    torch.manual_seed(seed)
    model = reference["PrunableModel"](PRUNING_HEADS).double()
    return {name: parameter.detach().clone() for name, parameter in model.named_parameters()}


def pruning_data(reference, seed):
    return reference["make_pattern_data"](96, seed=seed)


def louder_head(params, head, factor=4.0):
    """The weights with head `head`'s share of W_o (its d_k = 8 input columns) multiplied by factor."""
    louder = {**params, "attention.W_o.weight": params["attention.W_o.weight"].clone()}
    louder["attention.W_o.weight"][:, 8 * head: 8 * (head + 1)] *= factor
    return louder


def loss_without(reference, params, inputs, targets, removed=()):
    """The notebook's loss_of for the reference model (eval mode) with the given weights and the heads
    in `removed` masked."""
    model = reference["PrunableModel"](PRUNING_HEADS).double()
    model.load_state_dict(params, strict=False)
    model.eval()
    for head in removed:
        model.attention.head_mask[head] = 0.0
    return reference["loss_of"](model, inputs, targets)


def run_pruning(student, function, params, args, train=True):
    """function(model, *args) in the student's process on the notebook's PrunableModel holding params
    (handed over in training mode, as a model straight out of training is, unless train=False);
    returns (output, reply)."""
    reply = run_module(student, "PrunableModel", (PRUNING_HEADS,), params=params, dtype=torch.float64, train=train,
                       functions=[(function, args, {})])
    return reply["outputs"][0], reply


IN_PLACE_MASK = ("a new head_mask tensor put in the model: change the entries of model.attention.head_mask in "
                 "place (mask[h] = 0.0, then mask[h] = 1.0); the model's own buffer is the one to write")
HANDED_BACK = "the model handed back with heads still removed: set every entry of head_mask back to 1"


def check_values_before_handing_back(values, expected, what):
    """The hands-back point is earned by an answer that measured the model: the values of that very call
    (the model handed over in eval mode) equal the recomputed ones or a named mistake's."""
    if not any(checks.is_close(values, want) for want in expected):
        raise Feedback(f"{what} gave values that match no recomputed measurement of the model, so handing the "
                       "model back earns nothing yet.", "Remove the heads with model.attention.head_mask and "
                       "measure with the notebook's loss_of.")


def check_model_handed_back(reply, what):
    """After the call every head is back: head_mask is all ones, and still the module's own buffer."""
    mask = reply["buffers"].get("attention.head_mask")
    checks.require(mask is not None, f"After {what} the model has no head_mask buffer any more.", IN_PLACE_MASK)
    checks.require(bool((checks.as_tensor(mask) == 1).all()),
                   f"After {what} the model's head_mask is {checks.as_tensor(mask).tolist()}.",
                   f"Likely cause: {HANDED_BACK}.")
    checks.require("attention.head_mask" not in reply.get("replaced_buffers", []),
                   f"After {what} the model's head_mask is another tensor than the one it was handed over with.",
                   f"Likely cause: {IN_PLACE_MASK}")
