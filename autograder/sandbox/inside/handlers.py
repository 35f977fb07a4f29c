"""What a forked child of the warm worker answers (worker.py starts it, confined, and calls serve).

Requests to a child (dicts with an "op"):
  run_cells  run the notebook's code cells in order, one at a time, each under a time limit (first
             writing the grader's files beside them: a student's variant.json)
  names      which of the given names the submission defines, and whether they are classes
  value      the value the notebook gave a name (an answer written as numbers)
  call       call a function with inputs, optionally back-propagate given output gradients
  module     build an nn.Module, optionally set its parameters, run steps on it (a method of the
             module, a notebook function that takes the module first, or new values for some
             parameters), back-propagate
A request with "from_scratch" runs under the attention guard (guard.py).

Each reply is {"ok": True, "value": ...} or {"ok": False, "error": {type, message, traceback}}; the
traceback holds only frames of the student's own cells.
"""

import contextlib
import os
import signal
import sys
import traceback
import types
import warnings

import torch

import protocol
import reach
from cells import compile_cell
from counter import Work
from guard import GUARD

REQUESTS = REPLIES = None  # this child's pipe ends, set by serve
KERNELS = None             # the kernels module in a kernel assignment's child (set by serve), else None


class CellTimeout(BaseException):
    """Raised inside student code when its time is up (BaseException: `except Exception` misses it)."""


def _on_alarm(signum, frame):
    raise CellTimeout()


STUDENT_FILES = "<cell"


def student_traceback(error):
    """The traceback trimmed to frames in the student's own cells."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if frame.filename.startswith(STUDENT_FILES)]
    lines = traceback.format_list(frames) if frames else []
    lines += traceback.format_exception_only(type(error), error)
    return "".join(lines)[-4000:]


def describe_error(error):
    if isinstance(error, CellTimeout):
        return {"type": "Timeout", "message": "ran out of time", "traceback": ""}
    return {"type": type(error).__name__, "message": str(error)[:1000],
            "traceback": student_traceback(error)}


class TimeLimit:
    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)


def ipython_to_python(source):
    """Notebook cells may hold IPython-only lines (%magic, !shell); they do nothing when grading."""
    if source.lstrip().startswith("%%"):
        return ""
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            line = line[: len(line) - len(stripped)] + "pass"
        lines.append(line)
    return "\n".join(lines)


def fresh_namespace():
    """The submission's module, as IPython's user namespace is: __main__, with built-ins whose attribute
    functions hold computed names to the rule written names are read by (reach.py)."""
    main = types.ModuleType("__main__")
    namespace = vars(main)
    namespace["__builtins__"] = reach.checked_builtins()
    namespace["display"] = lambda *args, **kwargs: None
    namespace["get_ipython"] = lambda: None
    return main, namespace


MAIN, NAMESPACE = fresh_namespace()
# The grader's modules in this process (the sandbox's own folder); they leave sys.modules before the
# submission's code runs (serve), so no name of theirs leads to the guard or the counters.
GRADER_MODULES = ("worker", "handlers", "guard", "counter", "kernels", "protocol", "cells", "confine",
                  "gpu_compiler", "reach", "__main__")


def seal():
    """Before the submission's first line: the grader's modules are out of sys.modules (each holds on to
    what it uses), and __main__ is the submission's own module."""
    for name in GRADER_MODULES:
        sys.modules.pop(name, None)
    sys.modules["__main__"] = MAIN


def run_cells(request):
    for name, text in request.get("files", {}).items():  # the grader's own files beside the notebook (variant.json)
        with open(os.path.basename(name), "w") as handle:
            handle.write(text)
    results = []
    for index, cell in enumerate(request["cells"]):
        protocol.write_message(REPLIES, protocol.encode({"event": "cell", "index": index, "nonce": request.get("nonce")}))
        label = cell["label"]
        earlier = [other["label"] for other in request["cells"][:index]]  # one file name a cell
        filename = f"<cell {label}>" if label not in earlier else f"<cell {label} #{index}>"
        try:
            code = compile_cell(ipython_to_python(cell["source"]), filename)
        except SyntaxError as error:
            results.append({"status": "syntax", **describe_error(error)})
            continue
        try:
            with TimeLimit(request["cell_timeout"]):
                exec(code, NAMESPACE)
            results.append({"status": "ok"})
        except BaseException as error:  # noqa: B902 - student code may raise anything, SystemExit too
            status = "timeout" if isinstance(error, CellTimeout) else "error"
            results.append({"status": status, **describe_error(error)})
        finally:
            _close_figures()
    return {"cells": results}


def _close_figures():
    if "matplotlib.pyplot" in sys.modules:
        try:
            sys.modules["matplotlib.pyplot"].close("all")
        except Exception:
            pass


UNAVAILABLE = ""  # why this child cannot grade (its GPU could not be opened), set by serve


def ready(request):
    """Answered once the child serves, before any of the submission's code runs: the grader then
    notes what the child holds (its memory, its threads).  It is the only answer in which the child
    may say that the grader's side failed (the GPU could not be opened): said later, after the
    submission's code has run, nothing the child says can be the grader's fault (student._unwrap)."""
    return {"unavailable": UNAVAILABLE}


def names(request):
    found = {}
    for name in request["names"]:
        value = NAMESPACE.get(name)
        if value is None:
            continue
        found[name] = "class" if isinstance(value, type) else "callable" if callable(value) else "value"
    return {"names": found}


def value(request):
    """A value the notebook's answer cell defined (an answer worked out by hand)."""
    return {"output": lookup(request["name"])}


def lookup(name):
    if name not in NAMESPACE:
        raise NameError(f"{name} is not defined in the notebook")
    return NAMESPACE[name]


def flat_tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [tensor for item in value for tensor in flat_tensors(item)]
    return []


def requires_grad(args):
    return [arg.detach().clone().requires_grad_(True)
            if isinstance(arg, torch.Tensor) and arg.is_floating_point() else arg for arg in args]


def backward(outputs, grad_outputs, sources):
    """Back-propagate the given output gradients; return the gradient of each source (or None)."""
    pairs = [(out, grad) for out, grad in zip(flat_tensors(outputs), grad_outputs)
             if grad is not None and isinstance(out, torch.Tensor) and out.requires_grad]
    wanted = [source for source in sources if isinstance(source, torch.Tensor) and source.requires_grad]
    if not pairs or not wanted:
        return [None] * len(sources)
    grads = torch.autograd.grad([out for out, _ in pairs], wanted,
                                [grad.to(out.dtype) for out, grad in pairs], allow_unused=True)
    found = iter(grads)
    return [next(found) if isinstance(s, torch.Tensor) and s.requires_grad else None for s in sources]


@contextlib.contextmanager
def guarded(request):
    GUARD.watch(bool(request.get("from_scratch")))
    try:
        yield
    finally:
        GUARD.check()


def work_count(wanted, kernels=None, given=()):
    """The count of a call's work (counter.Work) when wanted, else a context that does nothing;
    kernels: the kernels module where their share is counted too (a call in a kernel assignment's
    child: KERNELS; a module's steps, entered one after another, count torch's share alone); given:
    the call's inputs, the only tensors it may read beside those its operators make (Work.on)."""
    return Work(kernels).on(given) if wanted else contextlib.nullcontext()


def moved(value, device):
    """value with every tensor in it (in lists, tuples and dicts) on `device`; a view keeps its layout
    in memory there (its strides and what lies between its elements), as the grader sent it."""
    if isinstance(value, torch.Tensor):
        if value.is_contiguous() or value.device.type == torch.device(device).type:
            return value.to(device)
        storage = value.untyped_storage()
        whole = torch.empty(0, dtype=value.dtype, device=value.device).set_(
            storage, 0, (storage.nbytes() // value.element_size(),))
        return whole.to(device).as_strided(value.shape, value.stride(), value.storage_offset())
    if isinstance(value, (list, tuple)):
        return type(value)(moved(item, device) for item in value)
    if isinstance(value, dict):
        return {key: moved(item, device) for key, item in value.items()}
    return value


def call(request):
    function = lookup(request["name"])
    args, kwargs = list(request["args"]), dict(request["kwargs"])
    device = request.get("device")  # an assignment's kernels on the CUDA device: inputs there, replies back
    if device:
        args, kwargs = moved(args, device), moved(kwargs, device)
    if request.get("grad"):
        args = requires_grad(args)
    work = work_count(request.get("count"), KERNELS, (args, kwargs))
    with TimeLimit(request["timeout"]), guarded(request):
        torch.manual_seed(request.get("seed", 0))
        with work:
            output = function(*args, **kwargs)
        grads = backward(output, moved(request["grad_outputs"], device) if device else request["grad_outputs"],
                         args) if request.get("grad") else None
    if device:
        output, grads, args = moved(output, "cpu"), moved(grads, "cpu"), moved(args, "cpu")
    reply = {"output": output, "input_grads": grads, "used_builtin_attention": GUARD.used}
    if request.get("count"):
        reply["work"] = work.reply(output, (args, kwargs))
    if request.get("echo_args"):
        reply["args_after"] = args  # what the inputs hold after the call (were they modified?)
    return reply


def stand_in(spec):
    """A plain nn.Module with the attributes and nn.Linear layers an exercise's statement promises,
    built from torch alone: a later exercise that takes such a module (to_torch_mha) is graded on
    this one, so a slip in the student's own class is charged to that class only."""
    module = torch.nn.Module()
    for name, value in spec["attributes"].items():
        setattr(module, name, value)
    for name, (d_in, d_out, bias) in spec["linears"].items():
        setattr(module, name, torch.nn.Linear(d_in, d_out, bias=bias))
    return module


def build_module(request):
    torch.manual_seed(request.get("seed", 0))
    if request.get("stand_in"):
        module = stand_in(request["stand_in"])
    else:
        module = lookup(request["cls"])(*request["init_args"], **request["init_kwargs"])
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"{request['cls']}(...) is not an nn.Module")
    if request.get("dtype"):
        module = module.to(request["dtype"])
    set_parameters(module, request.get("parameters") or {}, request["cls"])
    module.train(bool(request.get("train", False)))
    return module


def set_parameters(module, values, cls):
    """Copy the given values into the module's own parameters (by name), in place."""
    with torch.no_grad():
        for name, value in values.items():
            try:
                parameter = module.get_parameter(name)
            except AttributeError:
                raise AttributeError(f"{cls} has no parameter named {name}") from None
            if tuple(parameter.shape) != tuple(value.shape):
                raise ValueError(f"{name} has shape {tuple(parameter.shape)}, "
                                 f"expected {tuple(value.shape)}")
            parameter.copy_(value)


def describe_module(instance):
    """A module cannot cross the pipe; its class name, state and plain attributes can."""
    cls = type(instance)
    return {"class": f"{cls.__module__}.{cls.__qualname__}",
            "state": {name: value.detach() for name, value in instance.state_dict().items()},
            "attributes": {name: value for name, value in vars(instance).items()
                           if not name.startswith("_") and isinstance(value, (int, float, bool, str))}}


def held_tensors(instance):
    """The tensors a module keeps that are not its parameters (a cache, buffers), wherever in its own
    attributes or its submodules' it keeps them, each once."""
    seen, held = set(), []

    def visit(value, depth=0):
        if isinstance(value, torch.nn.Parameter) or depth > 4:
            return
        if isinstance(value, torch.Tensor):
            if id(value) not in seen:
                seen.add(id(value))
                held.append(value)
        elif isinstance(value, (tuple, list)):
            for item in value:
                visit(item, depth + 1)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item, depth + 1)

    for part in instance.modules():
        for name, value in vars(part).items():
            if name not in ("_parameters", "_modules"):
                visit(value)
    return held


def module(request):
    counting = any(step.get("count") for step in request.get("steps", []))
    work = work_count(counting)
    with TimeLimit(request["timeout"]), guarded(request):
        instance = build_module(request)
        own_buffers = {name: (buffer, buffer.data_ptr()) for name, buffer in instance.named_buffers()}
        outputs, input_grads = [], []
        step_args = []
        for step in request.get("steps", []):
            args = list(step["args"])
            if request.get("grad"):
                args = requires_grad(args)
            step_args.append(args)
            with work.on(args, step["kwargs"], step.get("set_parameters"), list(instance.parameters()),
                         list(instance.buffers()), held_tensors(instance)) if step.get("count") \
                    else contextlib.nullcontext():   # a step may read its inputs and the module's own tensors
                if step.get("set_parameters"):  # the grader changes parameters between two steps
                    set_parameters(instance, step["set_parameters"], request["cls"])
                    result = None
                elif step.get("function"):
                    result = lookup(step["function"])(instance, *args, **step["kwargs"])
                else:
                    result = getattr(instance, step.get("method", "forward"))(*args, **step["kwargs"])
            outputs.append(describe_module(result) if isinstance(result, torch.nn.Module) else result)
        parameters = dict(instance.named_parameters())
        param_grads = {}
        if request.get("grad") and outputs:
            sources = [arg for args in step_args for arg in args] + list(parameters.values())
            grad_outputs = [grad for grads in request["grad_outputs"] for grad in grads]
            flat = backward(tuple(outputs), grad_outputs, sources)
            position = 0
            for args in step_args:
                input_grads.append(flat[position: position + len(args)])
                position += len(args)
            param_grads = dict(zip(parameters, flat[position:]))
        attributes = {name: getattr(instance, name) for name in request.get("attributes", [])
                      if isinstance(getattr(instance, name, None), (int, float, bool, str))}
    held = held_tensors(instance)
    reply = {
        "outputs": outputs,
        "held_elements": sum(tensor.numel() for tensor in held),
        # what it keeps, by value, when the grader asks (a cache's content, not only its size)
        "held": [tensor.detach() for tensor in held] if request.get("held") else [],
        "parameters": {name: value.detach() for name, value in parameters.items()},
        "buffers": {name: value for name, value in instance.named_buffers()},
        # buffers the steps replaced by another tensor (or other storage) instead of writing into them
        "replaced_buffers": [name for name, value in instance.named_buffers() if name in own_buffers
                             and (value is not own_buffers[name][0] or value.data_ptr() != own_buffers[name][1])],
        "param_grads": param_grads,
        "input_grads": input_grads,
        "attributes": attributes,
        "training": instance.training,
        "used_builtin_attention": GUARD.used,
    }
    if counting:
        reply["work"] = work.reply()
    return reply


HANDLERS = {"ready": ready, "run_cells": run_cells, "names": names, "value": value, "call": call, "module": module}


def serve(requests, replies, unavailable="", counts_kernels=False):
    """A child's life: answer requests until the grader says exit or closes the pipe.  unavailable:
    why this child cannot grade (its GPU could not be opened), the answer to every request; counts_kernels:
    its assignment's answers are Triton kernels (prepared by the worker, kernels.prepare), whose work
    a counted call counts too."""
    global REQUESTS, REPLIES, KERNELS, UNAVAILABLE
    REQUESTS, REPLIES, UNAVAILABLE = requests, replies, unavailable
    KERNELS = sys.modules.get("kernels") if counts_kernels else None
    seal()
    sys.stdout = open(os.devnull, "w")  # what a submission prints goes nowhere
    sys.stderr = open(os.devnull, "w")
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _on_alarm)
    while True:
        try:
            request = protocol.decode(protocol.read_message(REQUESTS), strided=True)
        except (EOFError, OSError, protocol.ProtocolError):
            return
        if request.get("op") == "exit":
            return
        try:
            if unavailable and request.get("op") != "ready":   # the grader heard why at "ready"
                raise RuntimeError(unavailable)
            reply = {"ok": True, "value": HANDLERS[request["op"]](request)}
        except BaseException as error:  # noqa: B902
            reply = {"ok": False, "error": describe_error(error)}
        nonce = request.get("nonce")   # every answer carries its request's (student.StudentProcess._read)
        try:
            encoded = protocol.encode({**reply, "nonce": nonce})
        except protocol.Unsupported as problem:
            encoded = protocol.encode({"ok": False, "nonce": nonce, "error": {
                "type": "Unsupported", "message": f"returned {problem}", "traceback": ""}})
        protocol.write_message(REPLIES, encoded)


