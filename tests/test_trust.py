"""What measures a student is decided on the grader's side from what it observed, never from what the
student's process says about itself: whose fault an error is, whether a call ran out of time, and the
memory a measured call is charged (the call runs where no other process of the submission is alive)."""

import pytest
import torch

from autograder.rules import reaches_into_internals
from autograder.sandbox.student import Limits, StudentCrash, StudentError, StudentTimeout
from tests import sandboxes

LIMITS = Limits(call_timeout=5, cell_timeout=5, time_budget=60, memory_mb=2048)


worker = sandboxes.warm_worker(LIMITS)


def submission(worker, *sources):
    return sandboxes.submission(worker, LIMITS, *sources)


NAMED_LIKE_THE_GRADER = """
class DeviceUnavailable(Exception):
    pass
class WorkerError(Exception):
    pass
class Timeout(BaseException):
    pass
def device():
    raise DeviceUnavailable("the GPU could not be opened in the sandbox")
def worker_error():
    raise WorkerError("the grader failed")
def timeout():
    raise Timeout("ran out of time")
def fine():
    return 1.0
"""


@pytest.mark.parametrize("name", ["device", "worker_error", "timeout"])
def test_an_exception_named_like_the_graders_is_the_students(worker, name):
    """An error the child reports is charged to the student whatever its class is called: the grader's
    own failures are the ones it observes (a child that does not start or answer), and a time-out is
    one only when the grader's clock saw the call's time run out."""
    with submission(worker, NAMED_LIKE_THE_GRADER) as student:
        with pytest.raises(StudentError) as raised:
            student.call(name)
        assert not isinstance(raised.value, StudentTimeout)
        assert raised.value.kind in ("DeviceUnavailable", "WorkerError", "Timeout")
        assert student.call("fine")["output"] == 1.0, "the submission goes on: nothing was charged to the grader"


def test_a_real_time_out_is_still_one(worker):
    with submission(worker, "def spin():\n    while True:\n        pass\n") as student:
        with pytest.raises(StudentTimeout):
            student.call("spin")


PRECOMPUTED = """
import os
import numpy as np
PATH = '/tmp/scores.bin'
if not os.path.exists(PATH):   # only the first process of the submission pays for the scores
    scores = np.memmap(PATH, dtype=np.float32, mode='w+', shape=(64 << 18,))
    scores[:] = 1.0
    scores.flush()
    del scores
def use():
    scores = np.memmap(PATH, dtype=np.float32, mode='r', shape=(64 << 18,))
    return float(scores[::1024].sum())
def found():
    return os.path.exists(PATH)
"""


def test_a_measured_call_is_charged_for_what_an_earlier_process_of_the_submission_made(worker):
    """Scores written to a file while the submission's first child ran its cells are not there, ready
    and uncharged, for the fresh child whose call is measured: that child runs alone, after the scratch
    space is emptied, and pays for the file when its own cells write it."""
    with submission(worker, PRECOMPUTED) as student:
        assert student.call("found")["output"] is True
        first = student.process.pid
        measured = student.call("use", measure_memory=True)
        if measured["peak_memory"].accounting != "cgroup":
            pytest.skip("no cgroup accounting here")
        assert measured["output"] == float(64 << 8)
        assert measured["peak_memory"].bytes >= 64 << 20, "the precomputed scores were used uncharged"
        assert student.process.pid != first, "the measured child serves the later requests"
        assert student.call("use")["output"] == float(64 << 8)


COUNTED = """
import math
def by_division(q, k):
    # products written as divisions, a sum and a power: no mm, no mul, no exp
    scores = (q[:, None, :] / (1.0 / k[None, :, :])).sum(-1)
    weights = torch.full_like(scores, math.e) ** scores
    return weights / weights.sum(-1, keepdim=True)
def one_by_one(x):
    return sum(x[i].item() for i in range(x.numel()))
def a_few(x):
    return float(x.max()) if bool((x > 0).any()) else 0.0
def views_and_copies(x):
    y = torch.empty_like(x)
    y.copy_(x.t().contiguous().t())
    return torch.cat([y, x.clone()]).reshape(-1)
"""


def test_every_operator_that_computes_is_counted_and_numbers_cannot_leave_one_by_one(worker):
    """A counted call's torch work is complete by default: arithmetic outside the products and the
    exponentials is charged per floating-point result, a tensor raised to a tensor is an exponential,
    and Python numbers pulled out one by one are refused like tolist (a few, for a condition, are not);
    views, allocations and copies cost nothing."""
    q, k = torch.randn(8, 4), torch.randn(8, 4)
    with submission(worker, COUNTED) as student:
        work = student.call("by_division", q, k, count=True)["work"]
        assert work.torch_flops < 2 * 8 * 8 * 4 and work.exponentials == 1   # its products hide from COSTS
        assert work.torch_elementwise >= 8 * 8 * 4 + 8 * 8, work
        with pytest.raises(StudentError, match="counted"):
            student.call("one_by_one", torch.ones(1000), count=True)
        assert student.call("one_by_one", torch.ones(1000))["output"] == 1000.0
        assert student.call("a_few", torch.ones(10), count=True)["output"] == 1.0
        free = student.call("views_and_copies", torch.ones(4, 4), count=True)["work"]
        assert (free.torch_flops, free.torch_elementwise, free.exponentials) == (0, 0, 0)


REACHING = """
import sys
from sys import modules
def grader_modules():
    return sorted(name for name in ("guard", "counter", "handlers", "kernels", "protocol", "worker", "reach")
                  if name in modules) + [modules["__main__"].__dict__.get("grader_modules") is grader_modules]
def computed(name):
    g = getattr
    return repr(g(torch, name))
def dtype(name):
    return str(getattr(torch, name))
"""


def test_the_graders_objects_are_out_of_reach_by_any_spelling(worker):
    """sys.modules holds none of the grader's modules once the submission runs (__main__ is the
    submission's own), and a name computed at run time is held to the rule written names are read by,
    through getattr or any alias of it; the notebook's own idiom, getattr(torch, <a dtype's name>), passes."""
    with submission(worker, REACHING) as student:
        assert student.call("grader_modules")["output"] == [True]
        for parts in (("_", "C"), ("li", "brary"), ("o", "ps"), ("__glo", "bals__")):
            with pytest.raises(StudentError, match="refused"):
                student.call("computed", "".join(parts))
        assert student.call("dtype", "bfloat16")["output"] == "torch.bfloat16"


def test_the_static_reading_refuses_aliases_and_passes_the_notebooks_idiom():

    assert reaches_into_internals("dtype = getattr(torch, VARIANT['dtype'])\n") is None
    assert reaches_into_internals("g = getattr\nname = 'floa' + 't32'\nx = g(torch, name)\n") is None  # checked as it runs
    for code in ("from sys import modules\n", "import sys\nsys.modules['guard']\n", "F.__builtins__['getattr']\n",
                 "f.__globals__\n", "from sys import _getframe\n", "frame.f_back.f_locals\n"):
        assert reaches_into_internals(code) is not None, code


CONTEXT = ["import torch\nimport numpy as np\nimport torch.nn.functional as F\n"]
# Each class of route a hostile reading found past the rule over names, by one example: modules that walk
# the stack or read attributes by computed names, descriptors, raw memory, an alias of a module that a
# public module holds, a refused name inside a format field, a class whose array interface points anywhere.
ROUTES = {
    "the call stack through a library": "import traceback\nframes = list(traceback.walk_stack(None))\n",
    "attributes through a format field": "import string\nget = string.Formatter().get_field\n",
    "a refused name in a field string": "value = get('0.f_globals', (frame,), {})\n",
    "a descriptor written directly": "import os\nos.write(5, b'forged')\n",
    "a descriptor opened as a file": "open(5, 'wb').write(b'forged')\n",
    "an object's address": "where = id(counter)\n",
    "raw strides over any memory": "view = np.lib.stride_tricks.as_strided(x, (1 << 20,), (1,))\n",
    "a module held by a public one": "loaded = torch.sys.modules\n",
    "a module bound to a new name": "s = torch.sys\nloaded = s.modules\n",
    "an array interface at any address": "class Raw:\n    __array_interface__ = {'data': (0, False)}\n",
    "attributes by computed names": "import operator\nget = operator.attrgetter(name)\n",
    "a private part of torch": "version = x._version\n",
    "code in a string typing evaluates": "import typing\ndef f(x: 'sys . modules'): pass\nhints = typing.get_type_hints(f)\n",
    "code in a string a dataclass carries": "import dataclasses\nX = dataclasses.make_dataclass('X', [('a', 'frame . f_back')])\n",
    # the second hostile reading's routes
    "a module through a value the reading cannot follow": "m = [torch][0]\nframes = m.inspect.stack()\n",
    "a module through a parameter": "def f(m):\n    return m.os.write(1, b'x')\n",
    "typing's evaluator of computed annotations": "import typing\nhints = typing.get_type_hints(C)\n",
    "a pickle loaded from bytes it wrote": "value = np.load('p.bin', allow_pickle=True)\n",
    "a pickle allowed through a computed keyword": "value = np.load('p.bin', **{'allow_pickle': True})\n",
}


@pytest.mark.parametrize("route", ROUTES)
def test_the_static_reading_is_deny_by_default_for_every_route_class(route):
    assert reaches_into_internals(ROUTES[route], CONTEXT) is not None, route


def test_honest_code_of_every_kind_the_course_writes_passes_the_reading():
    honest = ("import math\nfrom typing import Optional\nfrom dataclasses import dataclass\n"
              "import triton\nimport triton.language as tl\nfrom torch import nn\n"
              "class Attention(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
              "        self._scale = 1 / math.sqrt(d)\n    def forward(self, q, k):\n"
              "        return F.softmax(q @ k.transpose(-2, -1) * self._scale, dim=-1)\n"
              "dtype = getattr(torch, 'bfloat16')\nif __name__ == '__main__':\n    print(Attention.__name__)\n")
    assert reaches_into_internals(honest, CONTEXT) is None


RUNTIME = """
def array_interface(name):
    return type("Raw", (), {name: {"data": (0, False), "shape": (8,), "typestr": "<u1", "version": 3}})
def module_by_getattr(name):
    return repr(getattr(torch, name))
"""


def test_a_computed_name_is_held_to_the_rule_as_the_code_runs(worker):
    """What the reading cannot see, a name computed at run time, meets the same rule: a class made by
    type() with a refused attribute, and a module outside the allowed ones reached by getattr."""
    with submission(worker, RUNTIME) as student:
        with pytest.raises(StudentError, match="refused"):
            student.call("array_interface", "__array_" + "interface__")
        with pytest.raises(StudentError, match="refused"):
            student.call("module_by_getattr", "f" + "x")   # torch.fx: a module outside the allowed ones
        with pytest.raises(StudentError, match="refused"):
            student.call("module_by_getattr", "o" + "s")   # os: allowed for its paths, never as a value
        assert "torch.float16" in student.call("module_by_getattr", "float16")["output"]


FORGER = """
import json, os, struct
def forge():
    # a whole reply, framed as the child's are, written by the submission itself on the reply pipe
    message = ["dict", {"ok": ["py", True], "value": ["dict", {"output": ["py", 42.0], "input_grads": ["py", None],
               "used_builtin_attention": ["py", False]}]}]
    text = json.dumps(message).encode()
    payload = struct.pack("!I", len(text)) + text
    for fd in range(3, 12):
        try:
            os.write(fd, struct.pack("!Q", len(payload)) + payload)
        except OSError:
            pass
    os._exit(0)
def fine():
    return 1.0
"""


def test_a_reply_the_submission_writes_itself_is_not_taken(worker, caplog):
    """Every request carries a nonce that the answer must carry back; a reply the submission writes on
    the reply pipe itself does not have it, and costs the call instead of answering it.  What was wrong
    with it goes to the grader's log, not into the student's feedback (the submission wrote it)."""
    with submission(worker, FORGER) as student:
        with pytest.raises(StudentCrash, match="sent back something unreadable") as raised:
            student.call("forge")
        assert "does not answer" not in str(raised.value)
        assert any("does not answer the grader's request" in record.getMessage() for record in caplog.records)
        assert student.call("fine")["output"] == 1.0


MEMORY = """
import os, errno
def through_proc(path, mode):
    try:
        with open(path.replace('self', str(os.getpid())), mode) as handle:
            handle.read(8) if 'r' in mode else handle.write(b'x')
        return 'opened'
    except OSError as error:
        return errno.errorcode[error.errno]
def pipes():
    found = []
    for fd in range(3, 32):
        try:
            if os.readlink(f"/proc/{os.getpid()}/fd/{fd}").startswith("pipe:"):
                found.append(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return found
"""


def test_the_child_cannot_read_or_write_its_own_memory_or_pipes_through_proc(worker):
    """The nonce and the counts live in the child's memory: its /proc/<pid>/mem, and /proc/<pid>/fd, which
    would reopen its pipes, are out of its reach (it is not dumpable, so they belong to root, and it may
    not make itself dumpable again: confine.py); the files that describe the process stay readable."""
    with submission(worker, MEMORY) as student:
        pipes = student.call("pipes")["output"]
        assert len(pipes) == 2, pipes   # the requests' and the replies'
        for path, mode in (("/proc/self/mem", "rb"), ("/proc/self/mem", "r+b"), ("/proc/self/environ", "rb"),
                           *((pipe, "wb") for pipe in pipes), *((pipe, "rb") for pipe in pipes)):
            assert student.call("through_proc", path, mode)["output"] in ("EACCES", "EPERM"), path
        assert student.call("through_proc", "/proc/self/status", "rb")["output"] == "opened"


def _frame(value=None, raw=None, data=b""):
    """A frame as a hostile process would write it by hand: `value`'s JSON text and then `data` (the
    bytes its tensors name), or `raw` as the whole payload."""
    import json
    import struct
    if raw is None:
        text = json.dumps(value).encode()
        raw = struct.pack("!I", len(text)) + text + data
    return struct.pack("!Q", len(raw)) + raw


# One float64 of bytes named as a tensor of 100000 x 100000 (what an expanded tensor would be touched as).
HUGE = {"tensor": ["torch.float64", "torch.strided", [100000, 100000], 0, 8]}


@pytest.mark.parametrize("frame,reason", [
    (_frame(raw=b"\x00" * 100), "unreadable message"),
    (_frame(raw=b"cos\nsystem\n(S'touch /tmp/pwned'\ntR."), "unreadable message"),
    (_frame(["dict", {"ok": ["py", True], "value": ["tensor", HUGE]}], data=bytes(8)), "over the size limit"),
    (_frame(["tensor", {"tensor": ["torch.float64", "torch.strided", [4], 0, 8]}], data=bytes(8)), "not in the message"),
    (_frame(["tensor", {"tensor": ["torch.complex64", "torch.strided", [1], 0, 8]}], data=bytes(8)), "unsupported kind"),
    (_frame(["list", [["list", [["list", [["py", 0]]]]]]] * 1), None),
])
def test_a_frame_on_the_pipe_is_read_with_limits_before_anything_uses_it(frame, reason):
    """What the reply pipe carries is read as plain data with limits (no code runs, no amplified tensor is
    touched), whoever wrote it: the grader's own reading, beside the nonce."""
    import os

    from autograder.sandbox.inside import protocol
    read, write = os.pipe()
    try:
        os.write(write, frame)
        if reason is None:
            assert protocol.decode(protocol.read_message(read)) == [[[0]]]
        else:
            with pytest.raises(protocol.ProtocolError, match=reason):
                protocol.decode(protocol.read_message(read))
    finally:
        os.close(read)
        os.close(write)
    assert not os.path.exists("/tmp/pwned")


def test_a_deeply_nested_frame_is_refused():
    import os

    from autograder.sandbox.inside import protocol
    nested = ["py", 0]
    for _ in range(100):
        nested = ["list", [nested]]
    read, write = os.pipe()
    try:
        os.write(write, _frame(nested))
        with pytest.raises(protocol.ProtocolError, match="nested more than"):
            protocol.decode(protocol.read_message(read))
    finally:
        os.close(read)
        os.close(write)
