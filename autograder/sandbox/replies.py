"""The exact shape of every reply a student process may send, checked before anything uses it.

protocol.decode has already bounded sizes and rebuilt plain values; these functions check that
the value is what the request asked for (the keys, and the type of each), so that a forged or
broken reply becomes one ProtocolError for that request instead of a KeyError or a TypeError
somewhere in the grader.  Values the hidden tests compare (outputs, gradients) are checked there,
with messages for the student.
"""

from dataclasses import dataclass, fields

import torch

from autograder.sandbox.inside.protocol import ProtocolError

CELL_STATUSES = {"ok", "syntax", "error", "timeout"}


def _require(condition, what):
    if not condition:
        raise ProtocolError(f"a malformed reply ({what})")


def _dict(value, what, required=()):
    _require(type(value) is dict, f"{what} is not a dict")
    missing = [key for key in required if key not in value]
    _require(not missing, f"{what} lacks {', '.join(missing)}")
    return value


def _text(value, what):
    _require(type(value) is str, f"{what} is not text")
    return value


def _tensor_or_none(value, what):
    _require(value is None or type(value) is torch.Tensor, f"{what} is not a tensor")
    return value


def _tensors(value, what, allow_none=False):
    _dict(value, what)
    for name, tensor in value.items():
        if allow_none:
            _tensor_or_none(tensor, f"{what}[{name}]")
        else:
            _require(type(tensor) is torch.Tensor, f"{what}[{name}] is not a tensor")
    return value


def _gradients(value, what):
    _require(value is None or type(value) is list, f"{what} is not a list")
    for item in value or []:
        _tensor_or_none(item, what)
    return value


def answering(message, nonce):
    """A message from a child, once it is known to answer the request that carried `nonce`: the
    handlers copy the request's nonce into every message they write, which the submission's own code
    cannot read; a message without it was written by something else on the reply pipe."""
    _require(type(message) is dict and message.get("nonce") == nonce,
             "a message that does not answer the grader's request (written by the submission itself?)")
    return {key: value for key, value in message.items() if key != "nonce"}


def envelope(reply):
    """(value, None) for a successful reply, (None, error) for a failed one."""
    _dict(reply, "the reply", ["ok"])
    _require(type(reply["ok"]) is bool, "ok is not a bool")
    if reply["ok"]:
        _require("value" in reply, "the reply has no value")
        return reply["value"], None
    error = _dict(reply.get("error"), "the error", ["type"])
    return None, {"type": _text(error["type"], "the error type")[:200],
                  "message": _text(error.get("message", ""), "the error message")[:2000],
                  "traceback": _text(error.get("traceback", ""), "the traceback")[-6000:]}


def ready(value):
    """What a child says as it starts serving: why it cannot grade ("" when it can)."""
    _dict(value, "the ready reply", ["unavailable"])
    return _text(value["unavailable"], "unavailable")[:1000]


def cell_event(message, cells):
    """The index of the cell that starts running, or None when the message is not an event."""
    if type(message) is not dict or "event" not in message:
        return None
    _require(message.get("event") == "cell", "an unknown event")
    index = message.get("index")
    _require(type(index) is int and 0 <= index < cells, "a cell event without a valid index")
    return index


def run_cells(value, cells):
    results = _dict(value, "the cells' reply", ["cells"])["cells"]
    _require(type(results) is list and len(results) == cells, "one result per cell")
    checked = []
    for result in results:
        _dict(result, "a cell result", ["status"])
        _require(result["status"] in CELL_STATUSES, "an unknown cell status")
        checked.append({"status": result["status"],
                        "message": _text(result.get("message", ""), "a cell message")[:2000],
                        "traceback": _text(result.get("traceback", ""), "a cell traceback")[-6000:]})
    return checked


def names(value):
    found = _dict(_dict(value, "the names reply", ["names"])["names"], "names")
    _require(all(kind in ("class", "callable", "value") for kind in found.values()), "a name kind")
    return found


def _builtin_flag(value):
    _require(type(value.get("used_builtin_attention", False)) is bool, "the attention flag")
    return value


@dataclass(frozen=True)
class Work:
    """A counted call's work, as the child counted it (sandbox/inside/counter.py's Work says what each
    count is), and other_threads: the threads the grader saw beside the call (student.py; work they
    did is not counted)."""
    intact: bool
    torch_flops: int
    exponentials: int
    kernels: bool                 # the kernels' share was counted (a kernel assignment's call)
    interpreted: bool = False     # ... in Triton's interpreter (on the CUDA device it is not: all zero)
    torch_elementwise: int = 0    # results of torch's other computing operators (booleans aside)
    launches: int = 0
    programs: int = 0
    addressed: int = 0
    distinct: int = 0
    idle_loads: int = 0           # loads whose every lane a mask turned off (a tile wholly outside its tensor)
    kernel_flops: int = 0
    kernel_flops_made: int = 0
    output_stored: float | None = None
    foreign_tensors: int | None = None
    other_threads: int | None = None


WORK_COUNTS = ("torch_flops", "torch_elementwise", "exponentials", "launches", "programs", "addressed", "distinct",
               "idle_loads", "kernel_flops", "kernel_flops_made")


def _work(value):
    """value["work"], where the call was counted, checked and made a Work."""
    if "work" not in value:
        return
    work = _dict(value["work"], "the work count", ["intact", "torch_flops", "torch_elementwise", "exponentials",
                                                   "kernels"])
    known = {field.name for field in fields(Work)} - {"other_threads"}
    _require(set(work) <= known, "the work count has unknown fields")
    _require(all(type(work[name]) is int and work[name] >= 0 for name in WORK_COUNTS if name in work),
             "a work count is not a whole number")
    _require(all(type(work[name]) is bool for name in ("intact", "kernels", "interpreted") if name in work),
             "a work flag is not a bool")
    _require(work.get("output_stored") is None or type(work["output_stored"]) is float, "output_stored")
    _require(work.get("foreign_tensors") is None or type(work["foreign_tensors"]) is int, "foreign_tensors")
    value["work"] = Work(**work)


def value(value):
    return _dict(value, "the value reply", ["output"])


def call(value):
    _dict(value, "the call reply", ["output"])
    _gradients(value.get("input_grads"), "input_grads")
    if "args_after" in value:
        _require(type(value["args_after"]) is list, "args_after is not a list")
    _work(value)
    return _builtin_flag(value)


def module(value):
    _dict(value, "the module reply", ["outputs", "parameters", "buffers", "param_grads",
                                      "input_grads", "attributes", "training"])
    _require(type(value["outputs"]) is list, "outputs is not a list")
    _tensors(value["parameters"], "parameters")
    _tensors(value["buffers"], "buffers")
    _tensors(value["param_grads"], "param_grads", allow_none=True)
    _require(type(value["input_grads"]) is list, "input_grads is not a list")
    for grads in value["input_grads"]:
        _gradients(grads, "input_grads")
    _dict(value["attributes"], "attributes")
    _require(type(value["training"]) is bool, "training is not a bool")
    replaced = value.get("replaced_buffers", [])
    _require(type(replaced) is list and all(type(name) is str for name in replaced), "replaced_buffers is not a list")
    _require(type(value.get("held_elements")) is int, "held_elements is not an int")
    held = value.get("held", [])
    _require(type(held) is list and all(type(tensor) is torch.Tensor for tensor in held), "held is not a list of tensors")
    _work(value)
    return _builtin_flag(value)
