"""The seam between the hidden tests and the student's code.

Tests never talk to the student process directly: they call these adapters, which send inputs,
check that what came back has the promised form (a pair of tensors, a module with W_q...), and
raise Feedback in words the student understands when it does not.  Inputs are made here too, so
every test uses sizes that are all distinct (B != H != Sq != Sk != d_k != d_v) and non-constant.
"""

import contextlib
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


# -- scaled_dot_product_attention --------------------------------------------------------------

def sdpa(student, q, k, v, mask=None, grad_outputs=None):
    """Call the student's scaled_dot_product_attention; returns ((output, weights), input grads)."""
    kwargs = {} if mask is None else {"mask": mask}
    with crash_hint(BACKWARD_HINT, INPLACE_ERRORS) if grad_outputs is not None else \
            crash_hint([(("is invalid for input of size",), "the code assumes that queries and keys have the "
                         "same length; here Sq != Sk."),
                        (("must match the size of tensor", "Dimension out of range"), "Transpose only the last "
                         "two dimensions of k: k.transpose(-2, -1) works for any number of leading dimensions.")]):
        reply = student.call("scaled_dot_product_attention", q, k, v, grad=grad_outputs is not None,
                             grad_outputs=grad_outputs or (), **kwargs)
    output, weights = checks.pair(reply["output"], "scaled_dot_product_attention")
    checks.tensor(output, "The output")
    checks.tensor(weights, "The attention weights")
    return (output, weights), reply["input_grads"]


def torch_attention(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def torch_weights(q, k, mask=None):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


# -- causal_mask -----------------------------------------------------------------------------

def causal_mask(student, seq_len, *args, **kwargs):
    mask = student.call("causal_mask", seq_len, *args, **kwargs)["output"]
    return checks.tensor(mask, f"causal_mask({seq_len})")


# -- split_heads / merge_heads ---------------------------------------------------------------

def split_heads(student, x, num_heads):
    return checks.tensor(student.call("split_heads", x, num_heads)["output"], "split_heads(x)")


def merge_heads(student, x):
    return checks.tensor(student.call("merge_heads", x)["output"], "merge_heads(x)")


# -- MultiHeadAttention -----------------------------------------------------------------------

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
               train=False, grad_outputs=None, functions=(), stand_in=None):
    """Build the student's module `cls` (or a stand-in, see Student.module), load `params`, run
    `calls` ((method, args, kwargs) or (args, kwargs) for forward) and then `functions`
    ((name, args, kwargs), called with the module first) on the one instance; returns the reply."""
    steps = []
    for call in calls:
        method, args, kwargs = call if len(call) == 3 else ("forward", *call)
        steps.append({"method": method, "args": list(args), "kwargs": dict(kwargs)})
    for function, args, kwargs in functions:
        steps.append({"function": function, "args": list(args), "kwargs": dict(kwargs)})
    try:
        return student.module(cls, init_args, init_kwargs or {}, load=params, dtype=dtype, train=train,
                              steps=steps, grad=grad_outputs is not None, stand_in=stand_in,
                              grad_outputs=grad_outputs or [[] for _ in steps])
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


def build_mha(student, d_model=D_MODEL, num_heads=H, bias=True, **options):
    """Construct the student's MultiHeadAttention (nothing else); returns the probe's reply."""
    kwargs = {} if bias is True else {"bias": bias}
    return student.module("MultiHeadAttention", (d_model, num_heads), kwargs, **options)


def mha(student, query, key, value, mask=None, *, params, num_heads=H, grad_outputs=None):
    """Run the student's module with the given weights; returns ((output, weights), reply)."""
    kwargs = {} if mask is None else {"mask": mask}
    bias = has_bias(params)
    with crash_hint("Keys and values may be longer than the queries (cross-attention): take each "
                    "tensor's own length when splitting heads."):
        reply = run_module(student, "MultiHeadAttention", (query.shape[-1], num_heads),
                           {} if bias else {"bias": False}, params=params, dtype=query.dtype,
                           calls=[((query, key, value), kwargs)],
                           grad_outputs=None if grad_outputs is None else [grad_outputs])
    output, weights = checks.pair(reply["outputs"][0], "MultiHeadAttention.forward")
    checks.tensor(output, "The output")
    checks.tensor(weights, "The attention weights")
    return (output, weights), reply


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


def reference_mha(reference, params, num_heads, dtype=torch.float64):
    d_model = params["W_q.weight"].shape[0]
    module = reference["MultiHeadAttention"](d_model, num_heads, bias=has_bias(params)).to(dtype)
    with torch.no_grad():
        for name, value in params.items():
            module.get_parameter(name).copy_(value)
    return module


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


# -- NumPy softmax and attention -------------------------------------------------------------

def softmax(student, x, **kwargs):
    """The student's softmax; returns (result, the input as it is after the call)."""
    with crash_hint("Reduce with keepdims=True (np.max(x, axis=axis, keepdims=True)) so the shapes broadcast."):
        reply = student.call("softmax", x, echo_args=True, **kwargs)
    return checks.tensor(reply["output"], "softmax(x)", "ndarray"), reply["args_after"][0]


def numpy_softmax(x, axis=-1):
    return torch.softmax(torch.from_numpy(x), dim=axis).numpy()


def numpy_attention(student, Q, K, V):
    with crash_hint("Swap only the last two axes of K: np.swapaxes(K, -1, -2) (K.T reverses all axes)."):
        reply = student.call("attention", Q, K, V)
    output, weights = checks.pair(reply["output"], "attention")
    checks.tensor(output, "The output of attention", "ndarray")
    checks.tensor(weights, "The weights of attention", "ndarray")
    return output, weights


# -- padding_mask ----------------------------------------------------------------------------

def padding_mask(student, lengths, max_len):
    mask = student.call("padding_mask", lengths, max_len)["output"]
    return checks.tensor(mask, f"padding_mask(lengths, {max_len})")


# -- CausalAttention (the fixed class) -------------------------------------------------------

D_IN, D_OUT, CONTEXT = 5, 6, 9
CAUSAL_ATTENTION = ("W_query", "W_key", "W_value")


def causal_attention_parameters(bias=False, dtype=torch.float64, seed=100):
    return linear_parameters({name: (D_OUT, D_IN) for name in CAUSAL_ATTENTION}, bias, dtype, seed)


def causal_attention(student, inputs, *, params, context=CONTEXT, dropout=0.0, train=False,
                     grad_outputs=None):
    """Run the student's CausalAttention on each input in turn; returns (outputs, reply)."""
    bias = has_bias(params)
    with crash_hint("masked_fill needs a boolean mask of the scores' shape: make the buffer boolean and "
                    "slice it to the current length, mask[:T, :T].", SHAPE_ERRORS + ("boolean",)):
        reply = run_module(student, "CausalAttention", (D_IN, D_OUT, context),
                           {"dropout": dropout, "qkv_bias": bias}, params=params, train=train,
                           dtype=inputs[0].dtype, calls=[((x,), {}) for x in inputs],
                           grad_outputs=grad_outputs)
    outputs = reply["outputs"]
    for output in outputs:
        checks.tensor(output, "CausalAttention(x)")
    return outputs, reply


def causal_attention_reference(params, x):
    def project(name):
        bias = params.get(f"{name}.bias")
        return F.linear(x, params[f"{name}.weight"], bias)
    q, k, v = (project(name) for name in CAUSAL_ATTENTION)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# -- CausalSelfAttention ---------------------------------------------------------------------

def causal_self_attention(student, inputs, *, params, num_heads=H, context=SK + 2, dropout=0.0,
                          train=False, grad_outputs=None):
    """Run the student's CausalSelfAttention on each input; returns ([(output, weights)], reply)."""
    d_model = inputs[0].shape[-1]
    bias = has_bias(params)
    with crash_hint(lambda: mask_buffer_cause(student, d_model, num_heads, context)):
        reply = run_module(student, "CausalSelfAttention", (d_model, num_heads, context),
                           {"dropout": dropout, "bias": bias}, params=params, train=train,
                           dtype=inputs[0].dtype, calls=[((x,), {}) for x in inputs],
                           grad_outputs=grad_outputs)
    pairs = []
    for output in reply["outputs"]:
        result, weights = checks.pair(output, "CausalSelfAttention.forward")
        pairs.append((checks.tensor(result, "The output"), checks.tensor(weights, "The weights")))
    return pairs, reply


def mask_buffer_cause(student, d_model, num_heads, context):
    """Why a CausalSelfAttention's mask did not fit, read from the sizes of its square buffers."""
    built = student.module("CausalSelfAttention", (d_model, num_heads, context), {})
    sizes = {buffer.shape[-1] for buffer in built["buffers"].values()
             if buffer.dim() >= 2 and buffer.shape[-1] == buffer.shape[-2]}
    if context in sizes:
        return "the [context_length, context_length] mask buffer is not sliced to [:T, :T]."
    if sizes:
        return (f"the mask buffer is {sorted(sizes)[0]} x {sorted(sizes)[0]} whatever the "
                f"context_length ({context} here): size it by context_length.")
    return ""


# -- train_model -----------------------------------------------------------------------------

def trained_pattern_model(student, reference, num_heads, steps, sequences):
    """Train the notebook's PatternModel with the student's train_model (once per submission);
    returns (reported losses, a reference PatternModel holding the trained parameters, the batch)."""
    key = ("trained_pattern_model", num_heads, steps, sequences)
    if key not in student.memo:
        inputs, targets = reference["make_pattern_data"](sequences, seed=1000)
        reply = run_module(student, "PatternModel", (num_heads,), train=True, dtype=None,
                           functions=[("train_model", (inputs, targets), {"steps": steps, "lr": 1e-2})])
        model = reference["PatternModel"](num_heads)
        trained = reply["parameters"]
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                checks.require(name in trained, f"The trained model has no parameter {name}.",
                               "Keep the parameter names of PatternModel and CausalSelfAttention.")
                checks.shape(trained[name], parameter.shape, f"The trained parameter {name}")
                parameter.copy_(trained[name])
        student.memo[key] = (reply["outputs"][0], model, (inputs, targets))
    return student.memo[key]


def pattern_loss(model, inputs, targets, flatten_targets=lambda t: t.reshape(-1)):
    """The training loss of a PatternModel on a batch, computed here (never taken from the student)."""
    model.eval()
    with torch.no_grad():
        logits = model(inputs)[0]
        return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), flatten_targets(targets)))


# -- CachedSelfAttention ---------------------------------------------------------------------

def cached_attention(student, calls, *, params, num_heads=H, dtype=torch.float64):
    """Run steps on one CachedSelfAttention; calls are (method, args, kwargs). Returns outputs."""
    d_model = params["W_q.weight"].shape[0]
    with crash_hint("The cache holds keys and values as [B, H, S, d_k]: concatenate along the sequence "
                    "axis (dim=2), and build the mask over [T_new, P + T_new]."):
        reply = run_module(student, "CachedSelfAttention", (d_model, num_heads), {}, params=params,
                           dtype=dtype, calls=calls)
    return [checks.tensor(output, "CachedSelfAttention(x)") if method == "forward" else output
            for (method, _, _), output in zip(calls, reply["outputs"])]


def token_by_token(x, first=1, chunk=1):
    """Calls that reset the cache, then feed x in pieces: `first` tokens, then `chunk` at a time."""
    calls = [("reset_cache", (), {}), ("forward", (x[:, :first],), {"use_cache": True})]
    for start in range(first, x.shape[1], chunk):
        calls.append(("forward", (x[:, start:start + chunk],), {"use_cache": True}))
    return calls


# -- GroupedQueryAttention -------------------------------------------------------------------

GQA_HEADS, GQA_KV_HEADS, GQA_D_K = 6, 2, 4
GQA_D_MODEL = GQA_HEADS * GQA_D_K


def gqa_parameters(num_heads=GQA_HEADS, num_kv_heads=GQA_KV_HEADS, d_k=GQA_D_K, dtype=torch.float64,
                   seed=200):
    d_model, d_kv = num_heads * d_k, num_kv_heads * d_k
    shapes = {"W_q": (d_model, d_model), "W_k": (d_kv, d_model), "W_v": (d_kv, d_model),
              "W_o": (d_model, d_model)}
    return linear_parameters(shapes, bias=False, dtype=dtype, seed=seed)


def gqa(student, x, mask=None, *, params, num_heads=GQA_HEADS, num_kv_heads=GQA_KV_HEADS,
        grad_outputs=None):
    kwargs = {} if mask is None else {"mask": mask}
    with crash_hint("W_k and W_v produce num_kv_heads heads; repeat each for its group of query heads "
                    "before the product with the queries."):
        reply = run_module(student, "GroupedQueryAttention", (x.shape[-1], num_heads, num_kv_heads), {},
                           params=params, dtype=x.dtype, calls=[((x,), kwargs)],
                           grad_outputs=None if grad_outputs is None else [grad_outputs])
    output, weights = checks.pair(reply["outputs"][0], "GroupedQueryAttention.forward")
    return (checks.tensor(output, "The output"), checks.tensor(weights, "The weights")), reply


def heads_of(x, num_heads):
    b, s, d = x.shape
    return x.view(b, s, num_heads, d // num_heads).transpose(1, 2)


def torch_gqa(params, num_heads, num_kv_heads, x, mask=None, kv_order="interleave"):
    """Grouped-query attention through F.scaled_dot_product_attention(enable_gqa=True);
    returns (output, per-head weights)."""
    q = heads_of(F.linear(x, params["W_q.weight"]), num_heads)
    k = heads_of(F.linear(x, params["W_k.weight"]), num_kv_heads)
    v = heads_of(F.linear(x, params["W_v.weight"]), num_kv_heads)
    group = num_heads // num_kv_heads
    if kv_order == "interleave":
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        k_full = k.repeat_interleave(group, dim=1)
    else:  # a mistake: query head h paired with key/value head h % num_kv_heads
        k_full, v_full = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        context = F.scaled_dot_product_attention(q, k_full, v_full, attn_mask=mask)
    b, h, s, d_k = context.shape
    output = F.linear(context.transpose(1, 2).reshape(b, s, h * d_k), params["W_o.weight"])
    return output, torch_weights(q, k_full, mask)
