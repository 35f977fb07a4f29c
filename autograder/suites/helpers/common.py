"""What every suite shares: inputs, sizes, crash hints, the torch reference, module runs, gradient
checks, and the attention maths of the grader's side (once, with the switches its named mistakes need)."""

import contextlib
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from autograder.harness import checks
from autograder.harness.checks import Feedback
from autograder.harness.plugin import student_message
from autograder.harness.context import StudentError
from autograder.variants import DEFAULTS


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
            if any(sign in f"{error.kind}: {error.message}" for sign in signs):   # a sign may be the error's type
                cause = cause() if callable(cause) else cause
                raise Feedback(student_message(error), f"Likely cause: {cause}" if cause else "") from None
        raise


def check_inputs_unchanged(reply, inputs, names, function, hint):
    """A call made with echo_args=True left its first inputs as they were handed in."""
    for before, after, name in zip(inputs, reply["args_after"], names):
        checks.require(isinstance(after, torch.Tensor) and torch.equal(after, before),
                       f"{function} changed its input {name} in place.", hint)


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
               train=False, grad_outputs=None, functions=(), stand_in=None, count=False, held=False, fresh=False):
    """Build the student's module `cls` (or a stand-in, see Student.module), set its parameters to
    `params`, run `calls` ((method, args, kwargs), (args, kwargs) for forward, or ("set_parameters",
    {name: value}) to change parameters between two calls) and then `functions` ((name, args,
    kwargs), called with the module first) on the one instance; returns the reply.  count: the
    reply's "work" counts the work of the last function; held: the reply's "held" lists the tensors
    the module keeps outside its parameters; fresh: it runs in a fresh child (Student.module)."""
    steps = []
    for call in calls:
        if call[0] == "set_parameters":  # ("set_parameters", {name: value}): new values between two calls
            steps.append({"set_parameters": dict(call[1]), "args": [], "kwargs": {}})
            continue
        method, args, kwargs = call if len(call) == 3 else ("forward", *call)
        steps.append({"method": method, "args": list(args), "kwargs": dict(kwargs)})
    for function, args, kwargs in functions:
        steps.append({"function": function, "args": list(args), "kwargs": dict(kwargs)})
    if count:
        steps[-1]["count"] = True
    try:
        return student.module(cls, init_args, init_kwargs or {}, parameters=params, dtype=dtype, train=train,
                              steps=steps, grad=grad_outputs is not None, stand_in=stand_in,
                              grad_outputs=grad_outputs or [[] for _ in steps], held=held,
                              **({"fresh": True} if fresh else {}))
    except StudentError as error:
        # Named by the grader's own names (the message is the student's process's text, see plugin.said_of).
        named = next((name for name in params or {} if name in error.message), "")
        if error.kind == "AttributeError" and "no parameter named" in error.message:
            raise Feedback(f"{cls} has no parameter named {named or 'as the grader expects'}.",
                           "Keep the parameter names the exercise asks for.") from None
        if error.kind == "ValueError" and "has shape" in error.message and "<cell" not in error.traceback:
            shape = f" {tuple(params[named].shape)}" if named else ""
            raise Feedback(f"{cls}: parameter {named or 'a parameter'} does not have the shape{shape} the grader sets.",
                           "Check the sizes of the nn.Linear layers.") from None
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

def scores(q, k, mask=None, *, scale=None):
    """The scaled dot-product scores q k^T / sqrt(d_k) ([..., Sq, d] x [..., Sk, d] -> [..., Sq, Sk]),
    -inf where `mask` (True = may attend) says no."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    return s if mask is None else s.masked_fill(~mask, float("-inf"))


def attention(q, k, v, mask=None, *, scale=None, dim=-1, invert=False, mask_after=False, add=False):
    """(output [..., Sq, d_v], weights [..., Sq, Sk]) of scaled dot-product attention (True = may
    attend; a row with no allowed key gets zeros); each keyword is one named mistake's switch."""
    if mask is not None and invert:
        mask = ~mask
    if mask is not None and add:
        s, mask = scores(q, k, scale=scale) + mask.to(q.dtype), None
    else:
        s = scores(q, k, None if mask_after else mask, scale=scale)
    weights = torch.softmax(s, dim=dim).nan_to_num(0.0)
    if mask is not None and mask_after:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights


def attention_lse(q, k, v, mask=None, *, causal=False):
    """(output [..., Sq, d_v], logsumexp [..., Sq]) of attention in the inputs' dtype, as the tiled
    and kernel forwards return them: lse is the log of each query's sum of exp(scores) over its
    allowed keys.  causal: query i sees keys 0..i (the mask's top-left corner)."""
    if causal:
        mask = tril(q.shape[-2], k.shape[-2])
    s = scores(q, k, mask)
    lse = s.logsumexp(dim=-1)
    return torch.exp(s - lse[..., None]) @ v, lse


def recomputed_gradients(q, k, v, out, lse, d_out, seen=None, *, delta=True, scaled=True):
    """(dq, dk, dv) as FlashAttention's backward recomputes them from the forward's out and lse, written
    once (in one tile): P = exp(S - lse) over the keys `seen` allows (True = may attend; every key when
    None), dV = P^T dO, dS = P * (dO V^T - D) with D = rowsum(dO * O), dQ = dS K / sqrt(d) and
    dK = dS^T Q / sqrt(d).  A right answer's gradients come from autograd through `attention`; this is
    for what the inputs handed in imply (an `out` rounded to their dtype) and for the named mistakes'
    switches: delta=False (no D), scaled=False (no 1/sqrt(d) on dQ and dK), `seen` other than the
    mask lse was taken with."""
    scale = 1 / math.sqrt(q.shape[-1])
    p = torch.exp(scores(q, k, seen, scale=scale) - lse[..., None])
    dv = p.transpose(-2, -1) @ d_out
    ds = p * (d_out @ v.transpose(-2, -1) - ((d_out * out).sum(-1, keepdim=True) if delta else 0))
    factor = scale if scaled else 1.0
    return ds @ k * factor, ds.transpose(-2, -1) @ q * factor, dv


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
               output_projection=True, merge_transposed=True, dim=-1):
    """Multi-head attention with W_q...W_o from params, written out so that each mistake below is one
    switch: the attention maths stay those of `attention`."""
    def project(name, x):
        return F.linear(x, params[f"{name}.weight"], params.get(f"{name}.bias"))

    q = heads_of(project("W_q", query), num_heads)
    k = heads_of(project("W_q" if shared else "W_k", key), num_heads)
    v = heads_of(project("W_q" if shared else "W_v", value), num_heads)
    context, weights = attention(q, k, v, mask, scale=scale, dim=dim)
    b, h, s, d_k = context.shape
    merged = context.transpose(1, 2).reshape(b, s, h * d_k) if merge_transposed else context.reshape(b, s, h * d_k)
    return (project("W_o", merged) if output_projection else merged), weights


MHA_CAUSES = {
    "shared_projection": "one projection (W_q) for queries, keys and values; W_k and W_v are never used",
    "no_output_projection": "leaving out the output projection W_o",
    "scale_d_model": "scaling by sqrt(d_model) instead of sqrt(d_k) of one head",
    "merge_without_transpose": "merging the heads with a reshape of [B, H, S, d_k] without moving the head "
                               "axis back first",
    "softmax_over_queries": "a softmax over dim=2 of the [B, H, Sq, Sk] scores: the keys' axis of [B, Sq, Sk] "
                            "scores, but the queries' once the heads are split (use dim=-1)",
}


def mha_mistakes(params, num_heads, query, key, value, mask=None):
    """The named mistakes of a module with W_q...W_o (MultiHeadAttention, CausalSelfAttention):
    cause text -> (output, weights)."""
    def run(**switch):
        return multi_head(params, num_heads, query, key, value, mask, **switch)
    return named(MHA_CAUSES, shared_projection=run(shared=True), no_output_projection=run(output_projection=False),
                 scale_d_model=run(scale=1 / math.sqrt(query.shape[-1])),
                 merge_without_transpose=run(merge_transposed=False), softmax_over_queries=run(dim=-2))


def counted(reply, what):
    """The work of a counted call (a replies.Work), once the count is known to be whole: every counter
    stayed in place through the call, and no thread the notebook started ran beside it (its work
    would not be counted)."""
    work = reply["work"]
    if not work.intact:
        raise Feedback(f"The count of what {what} did was switched off or changed while it ran.",
                       "Leave the grader's counters (and Triton's interpreter) alone: the count of a call is "
                       "what it did.")
    if work.other_threads:
        raise Feedback(f"{what} ran beside {work.other_threads} other thread(s) started by the notebook, whose "
                       "work the count does not see.", "Start no thread in the notebook's cells.")
    return work


def whose_numbers(student, agrees):
    """The variant an answer that is not the student's own was worked out for: the first of
    student.others whose numbers satisfy agrees(numbers) (the released notebook's, or a classmate's,
    which the instructor is told of in the submission's flags), or None."""
    for whose, numbers in student.others.items():
        if agrees(numbers):
            if whose != DEFAULTS:
                flag = f"{student.exercise}: the answers are those of {whose}'s variant"
                if flag not in student.flags:
                    student.flags.append(flag)
            return whose
    return None
