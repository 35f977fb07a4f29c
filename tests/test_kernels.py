"""The kernel track's machinery: Triton's interpreter in the sandbox, what it counts of a call's
kernels, the loads and stores it stops, and tensors sent with their layout in memory."""

import json
import re
import warnings
from importlib.metadata import version

import pytest
import torch

from autograder.harness.context import Student
from autograder.rules import reaches_into_internals
from autograder.sandbox.inside import protocol
from autograder.sandbox.student import Cell, Limits, StudentError, StudentProcess, Worker
from tests.check import device_problems, entries, grade_entries, student_id
from tests.notebooks import COURSE, ROOT, solution_answers
from tests.sandboxes import warm_worker

LIMITS = Limits(call_timeout=20, cell_timeout=20, time_budget=120, memory_mb=4096)

KERNEL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if MASKED:
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < n) * 2.0, mask=offsets < n)
    else:
        tl.store(dst + offsets, tl.load(src + offsets) * 2.0)


def double(x, masked=True, block=16):
    out = torch.empty_like(x)
    copy_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block, MASKED=masked)
    return out


def strides(x):
    return list(x.stride()), x.is_contiguous()


@triton.jit
def add_kernel(dst, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.atomic_add(dst + offsets, 1.0, mask=offsets < n)


def atomically_added(x, n):
    add_kernel[(1,)](x, n, BLOCK=32)
    return x


@triton.jit
def square_kernel(src, dst, BLOCK: tl.constexpr, KEEP: tl.constexpr):
    tile = tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    x = tl.load(src + tile)
    product = tl.dot(x, x)
    tl.store(dst + tile, product if KEEP else x + 1.0)


def squared(x, keep):
    out = torch.empty_like(x)
    square_kernel[(1,)](x, out, BLOCK=16, KEEP=keep)
    return out


@triton.jit
def unused_products_kernel(src, dst, BLOCK: tl.constexpr, HOW: tl.constexpr):
    tile = tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    x = tl.load(src + tile)
    product = tl.dot(x, x)
    if HOW == 0:      # multiplied by zero before the store
        out = x + product * 0.0
    elif HOW == 1:    # in the branch of a tl.where that no lane chooses
        out = tl.where(x == x, x, product)
    else:             # kept: every lane takes the product
        out = tl.where(x == x, product, x)
    tl.store(dst + tile, out)


def unused_products(x, how):
    out = torch.empty_like(x)
    unused_products_kernel[(1,)](x, out, BLOCK=16, HOW=how)
    return out


@triton.jit
def add_zeros_kernel(src, dst, BLOCK: tl.constexpr):
    tile = tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    x = tl.load(src + tile)
    tl.store(dst + tile, x)
    tl.atomic_add(dst + tile, tl.dot(x, x) * 0.0)


def zeros_added(x):
    out = torch.empty_like(x)
    add_zeros_kernel[(1,)](x, out, BLOCK=16)
    return out


def overwritten(x):
    out = double(x)
    out.copy_(x * 0 + 7.0)   # the kernel stored 2x; the wrapper writes over it in place
    return out


PREPARED = torch.arange(16.0)   # made when the cell ran, before any call


def launched_on(x, source):
    out = torch.empty(16)
    made = {"prepared": lambda: PREPARED, "input": lambda: x, "numbers": lambda: torch.tensor([1.0] * 16),
            "scaled": lambda: x * 2.0}[source]()
    copy_kernel[(1,)](made, out, 16, BLOCK=16, MASKED=True)
    return out


def copied(x):
    return double(x).clone()


def filled(n):
    out = torch.empty(n)
    for i in range(n):
        out[i].fill_(1.0 + i / n)
    return out * 0 + 1.0


def brought_in(x, how):
    """A kernel's input from outside torch's own memory (or from the call's own work: "own")."""
    import numpy
    source = {"borrowed": lambda: torch.from_numpy(numpy.ones(16, dtype=numpy.float32)),
              "copied in": lambda: torch.empty(16).copy_(torch.from_numpy(numpy.ones(16, dtype=numpy.float32))),
              "listed": lambda: torch.tensor(numpy.ones(300, dtype=numpy.float32).tolist())[:16],
              "filled": lambda: filled(300)[:16],
              "indexed": lambda: torch.stack([torch.arange(1000)[k] for k in range(300, 600)])[:16].float() * 0 + 1,
              "launched": lambda: [copy_kernel[(1,)](x, torch.empty(16), 16 + k, BLOCK=16, MASKED=True)
                                   for k in range(300)] and x,
              "own": lambda: x * 1.0}[how]()
    out = torch.empty(16)
    copy_kernel[(1,)](source, out, 16, BLOCK=16, MASKED=True)
    return out


KEPT, CONSTANT = torch.ones(300), torch.ones(16)


def unseen(x, how):
    """A kernel's input that no operator of the call made: from bytes, a storage set_() onto, the pickle
    torch.save wrote, kept from before the call; or a small constant, or the call's own work ("own")."""
    import io
    import numpy

    def pickled(t):
        buffer = io.BytesIO()
        torch.save(t, buffer, _use_new_zipfile_serialization=False)
        buffer.seek(0)
        return torch.load(buffer, weights_only=True)
    ones = numpy.ones(300, dtype=numpy.float32)
    source = {"from bytes": lambda: torch.empty(0).set_(torch.UntypedStorage.from_buffer(ones.tobytes(), dtype=torch.uint8)),
              "copied from bytes": lambda: torch.empty(300).copy_(torch.empty(0).set_(
                  torch.UntypedStorage.from_buffer(ones.tobytes(), dtype=torch.uint8))),
              "pickled": lambda: pickled(torch.ones(300)) * 1.0,
              "kept": lambda: KEPT,
              "constant": lambda: CONSTANT,
              "own": lambda: torch.ones(300) * x[0]}[how]()
    out = torch.empty(16)
    copy_kernel[(1,)](source, out, 16, BLOCK=16, MASKED=True)
    return out


def half_stored(x):
    out = torch.zeros_like(x)
    copy_kernel[(triton.cdiv(x.numel(), 16),)](x, out, x.numel() // 2, BLOCK=16, MASKED=True)
    return out, double(x)
'''


worker = warm_worker(LIMITS)


@pytest.fixture(scope="module")
def student(worker):
    with StudentProcess(worker, [Cell("kernel", KERNEL)], LIMITS, "triton") as process:
        assert process.cell_reports[0].status == "ok", process.cell_reports
        yield Student(process)


def test_a_kernel_runs_in_the_interpreter_and_its_work_is_counted(student):
    x = torch.arange(40, dtype=torch.float32)
    reply = student.call("double", x, count=True)
    assert torch.equal(reply["output"], 2 * x)
    work = reply["work"]
    assert work.kernels and work.interpreted and work.intact
    assert (work.launches, work.programs) == (1, 3)                   # 40 elements in blocks of 16
    assert work.addressed == 40 and work.distinct == 40               # lanes a mask turns off read nothing
    assert work.kernel_flops == 2 * 3 * 16                            # the element-wise multiply, 2 per element
    assert work.torch_flops == 0 and work.exponentials == 0           # torch did none of it


def test_a_child_of_an_assignment_without_kernels_counts_torch_alone(worker, student):
    """The worker has prepared Triton (the student fixture's child is a kernel assignment's); a child
    forked for another assignment counts its calls' work in torch alone, the same shape of count."""
    product = "import torch\ndef product(n):\n    x = torch.ones(n, n)\n    return x @ x\n"
    with StudentProcess(worker, [Cell("product", product)], LIMITS) as process:
        work = Student(process).call("product", 8, count=True)["work"]
    assert work.intact and work.torch_flops == 2 * 8 ** 3
    assert not work.kernels and (work.launches, work.kernel_flops, work.output_stored) == (0, 0, None)


PREPARED = """
import types
def prepared():
    from triton.runtime import interpreter
    run = interpreter.InterpretedFunction.run
    # the grader's modules are out of sys.modules in a child (handlers.seal): the compiler is found as
    # the interpreter's wrapper holds it
    held = [cell.cell_contents for cell in run.__closure__ or ()]
    compiler = next((value for value in held if isinstance(value, types.ModuleType)
                     and value.__name__ == "gpu_compiler"), None)
    return [run.__module__, len(compiler._CHECKED) if compiler else None]
"""


@pytest.mark.parametrize("kernel_kind", ["triton", ""])
def test_a_worker_started_for_kernels_is_ready_with_them_prepared(kernel_kind):
    """Started for a kernel assignment (as grade-class and the grading service start them), the worker
    prepares the kernels before it says it is ready: Triton loaded, the interpreter's wrappers in place and
    the GPU compiler's first check done (its own kernel's); a child forked without asking for kernels finds
    them so.  Started without, it loads none of Triton's compiled library and its children find the
    interpreter as Triton made it."""
    import select

    import psutil

    with Worker(LIMITS, kernel_kind=kernel_kind) as worker:
        worker.start()
        assert select.select([worker.control], [], [], 120)[0], "the worker never said it was ready"
        sandbox = psutil.Process(worker.process.pid)
        python = [p for p in [sandbox, *sandbox.children(recursive=True)] if "worker.py" in " ".join(p.cmdline())]
        maps = "".join(open(f"/proc/{p.pid}/maps").read() for p in python)
        assert ("libtriton" in maps) == bool(kernel_kind)
        with StudentProcess(worker, [Cell("probe", PREPARED)], LIMITS) as process:
            found = Student(process).call("prepared")["output"]
    assert found == (["kernels", 1] if kernel_kind else ["triton.runtime.interpreter", None])


def test_products_count_only_when_their_results_reach_a_store(student):
    x = torch.randn(16, 16)
    kept = student.call("squared", x, True, count=True)
    assert torch.allclose(kept["output"], x @ x, atol=1e-4)
    assert kept["work"].kernel_flops == kept["work"].kernel_flops_made == 2 * 16 ** 3
    thrown_away = student.call("squared", x, False, count=True)     # the tl.dot made, never stored
    assert torch.equal(thrown_away["output"], x + 1.0)
    assert thrown_away["work"].kernel_flops_made == 2 * 16 ** 3 and thrown_away["work"].kernel_flops == 0


@pytest.mark.parametrize("how,kept", [(0, False), (1, False), (2, True)])
def test_a_product_counts_only_if_the_stored_values_depend_on_it(student, how, kept):
    """A product multiplied by zero, or in the branch of a tl.where that no lane chooses, never reaches
    what is stored: made, not credited."""
    x = torch.randn(16, 16)
    work = student.call("unused_products", x, how, count=True)["work"]
    assert work.kernel_flops_made >= 2 * 16 ** 3    # (and the multiply by zero's own)
    assert work.kernel_flops == (2 * 16 ** 3 if kept else 0)


def test_products_added_as_zeros_by_an_atomic_are_not_credited(student):
    work = student.call("zeros_added", torch.randn(16, 16), count=True)["work"]
    assert work.kernel_flops_made >= 2 * 16 ** 3 and work.kernel_flops == 0


def test_an_output_written_over_after_the_kernel_stored_it_is_not_the_kernels(student):
    x = torch.arange(40, dtype=torch.float32)
    reply = student.call("overwritten", x, count=True)
    assert torch.equal(reply["output"], torch.full((40,), 7.0))
    assert reply["work"].output_stored == 0.0


def test_a_kernel_launched_on_a_tensor_made_before_the_call_is_seen(student):
    x = torch.ones(16)
    for source, foreign in (("prepared", 1), ("input", 0), ("numbers", 0), ("scaled", 0)):
        reply = student.call("launched_on", x, source, count=True)
        assert reply["work"].foreign_tensors == foreign, source


def test_a_counted_call_computes_on_memory_torch_keeps_to_itself(student):
    """NumPy's memory handed to a kernel or to torch, and Python's numbers brought in in bulk (as values, as
    positions in a table, as a kernel's arguments), refuse a counted call, naming why (work done on them
    outside torch could not be counted); uncounted, the
    same calls run, and a counted call on its own work is counted as before."""
    x = torch.ones(16)
    for how, words in (("borrowed", "memory torch did not allocate"), ("copied in", "memory torch did not allocate"),
                       ("listed", "numbers moved between torch and Python"),
                       ("filled", "numbers moved between torch and Python"),
                       ("indexed", "numbers moved between torch and Python"),
                       ("launched", "numbers moved between torch and Python")):
        with pytest.raises(StudentError) as raised:
            student.call("brought_in", x, how, count=True)
        assert words in raised.value.message, how
        assert torch.equal(student.call("brought_in", x, how)["output"], torch.full((16,), 2.0)), how
    work = student.call("brought_in", x, "own", count=True)["work"]
    assert work.intact and work.launches == 1 and work.foreign_tensors == 0


def test_a_counted_call_reads_only_what_it_was_given_or_made(student):
    """Provenance, not the memory's properties: a tensor no operator of the counted call made (a storage
    from bytes set_() onto, the bytes copied into a tensor torch made, torch.load of a pickle, a tensor kept
    from before the call) refuses the call past the 256 numbers that may come from elsewhere, naming why;
    uncounted the same calls run; a small constant kept from before passes (and is foreign to the kernel);
    the call's own work is counted as before."""
    x = torch.ones(16)
    for how in ("from bytes", "copied from bytes", "pickled", "kept"):
        with pytest.raises(StudentError) as raised:
            student.call("unseen", x, how, count=True)
        assert "that no operation of the call made" in raised.value.message, how
        assert torch.equal(student.call("unseen", x, how)["output"], torch.full((16,), 2.0)), how
    assert student.call("unseen", x, "constant", count=True)["work"].foreign_tensors == 1
    work = student.call("unseen", x, "own", count=True)["work"]
    assert work.intact and work.launches == 1 and work.foreign_tensors == 0


def test_what_a_call_returns_is_checked_against_what_its_kernels_stored(student):
    x = torch.arange(40, dtype=torch.float32)
    assert student.call("double", x, count=True)["work"].output_stored == 1.0
    assert student.call("copied", x, count=True)["work"].output_stored == 0.0   # a copy made after
    reply = student.call("half_stored", x, count=True)          # 20 + 40 of the 80 returned elements
    assert reply["work"].output_stored == 0.75 and torch.equal(reply["output"][1], 2 * x)


def test_a_load_past_the_end_stops_the_kernel_and_names_the_program(student):
    with pytest.raises(StudentError) as raised:
        student.call("double", torch.ones(40), False)
    assert "OutOfBounds" in raised.value.message and "program (2, 0, 0)" in raised.value.message
    assert "tl.load" in raised.value.message


def test_an_atomic_is_held_to_the_launchs_tensors_and_counted_as_stored(student):
    reply = student.call("atomically_added", torch.zeros(32), 32, count=True)
    assert torch.equal(reply["output"], torch.ones(32)) and reply["work"].output_stored == 1.0
    with pytest.raises(StudentError) as raised:       # 32 lanes on a tensor of 20: no mask covers the rest
        student.call("atomically_added", torch.zeros(20), 32)
    assert "OutOfBounds" in raised.value.message and "atomic" in raised.value.message


def test_the_whole_tensor_is_in_bounds(student):
    reply = student.call("double", torch.ones(48), False)   # three whole blocks: no mask needed
    assert torch.equal(reply["output"], torch.full((48,), 2.0))


def test_taking_the_count_apart_is_seen(worker):
    tamper = '''
def tamper(x):
    from triton.runtime import interpreter
    interpreter.InterpreterBuilder.create_dot = lambda self, a, b, d, *rest: d
    return double(x)
'''
    assert reaches_into_internals(tamper) is not None            # read on the trusted side first
    with StudentProcess(worker, [Cell("kernel", KERNEL), Cell("tamper", tamper)], LIMITS, "triton") as process:
        reply = Student(process).call("tamper", torch.ones(16), count=True)
    assert reply["work"].intact is False


def test_a_tensor_sent_with_its_layout_arrives_as_the_same_view(student):
    big = torch.arange(60.0).reshape(6, 10)
    view = big[:, 2:7].t()
    reply = student.call("strides", protocol.Strided(view))
    assert reply["output"] == ([1, 10], False)
    reply = student.call("strides", view)                             # without it: a contiguous copy
    assert reply["output"] == ([6, 1], True)


def test_a_strided_tensor_that_reaches_past_its_memory_is_refused():
    encoded = protocol.encode(protocol.Strided(torch.arange(10.0)[::3]))
    tag, (span, shape, strides) = encoded
    assert tag == "strided" and span.numel() == 10
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(["strided", [span, ["tuple", [["py", 5]]], strides]], strided=True)
    with pytest.raises(protocol.ProtocolError):   # the grader's side never accepts one
        protocol.decode(encoded)
    assert protocol.decode(encoded, strided=True).tolist() == [0.0, 3.0, 6.0, 9.0]


KERNEL_ASSIGNMENTS = [assignment for assignment in COURSE.assignments if assignment.kernel_kind]
# The Triton whose interpreter grades where there is no GPU (requirements.txt).
PINNED_TRITON = re.search(r"^triton==([\w.]+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)


def kernel_exercises():
    return [exercise.id for assignment in KERNEL_ASSIGNMENTS for exercise in assignment.exercises]


def grade_kernel_track(root, device, monkeypatch, catalogue=True):
    """The kernel assignments' reference, released stub and (with catalogue) every catalogue entry of
    their exercises, graded as one class with the kernels on `device`; the results folder."""
    monkeypatch.setenv("AUTOGRADER_KERNEL_DEVICE", device)
    chosen = [pair for exercise in kernel_exercises() for pair in entries(exercise)] if catalogue else []
    extra = [(student, assignment.id, answers) for assignment in KERNEL_ASSIGNMENTS
             for student, answers in (("reference", solution_answers(assignment.id)), ("stub", {}))]
    return grade_entries(chosen, root, extra)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device here: the kernel track's grading on a GPU was not tried")
def test_the_kernel_track_grades_on_the_gpu_as_the_catalogue_says(tmp_path, monkeypatch):
    """On a machine with a CUDA device, in the sandbox: the reference earns full marks with its kernels
    compiled for the GPU and in Triton's interpreter, and every kernel catalogue entry (mistakes,
    alternatives, degenerate answers, gaming answers) grades on the GPU as the catalogue says, with the
    differences its entries state (on_gpu: what only the interpreter can count or stop)."""
    problems = device_problems(grade_kernel_track(tmp_path / "cuda", "cuda", monkeypatch), kernel_exercises(), "cuda")
    if version("triton") == PINNED_TRITON:
        reference = grade_kernel_track(tmp_path / "cpu", "cpu", monkeypatch, catalogue=False)
        problems += [f"in the interpreter: {problem}"
                     for problem in device_problems(reference, kernel_exercises(), "cpu", catalogue=False)]
    else:   # the interpreter of another Triton is not the one the course grades with
        warnings.warn(f"Triton {version('triton')} here, not the course's {PINNED_TRITON}: the reference was not "
                      "graded in its interpreter (only on the GPU)")
    assert not problems, "\n".join(problems)


def test_the_gpu_verdicts_fail_when_every_score_is_zero(tmp_path):
    """The GPU test's judgement cannot pass when grading is broken: with every test of every answer
    at zero (a grader that could not run), the reference is named, and so is every alternative."""
    results = tmp_path / "results"
    students = ["reference", "stub"] + [student_id(kind, entry) for exercise in kernel_exercises()
                                        for kind, entry in entries(exercise)]
    for assignment in KERNEL_ASSIGNMENTS:
        tests = [{"name": f"{exercise.id}: {name}", "score": 0, "max_score": points}
                 for exercise in assignment.exercises for name, points in exercise.points.items()]
        for student in students:
            folder = results / student / assignment.id
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "results.json").write_text(json.dumps({"tests": tests, "output": ""}))
    problems = device_problems(results, kernel_exercises(), "cuda")
    for exercise in kernel_exercises():
        assert any(problem.startswith(f"{exercise}, reference:") for problem in problems), problems
    alternatives = [entry for exercise in kernel_exercises() for kind, entry in entries(exercise) if kind == "alternative"]
    assert alternatives and all(any(f"alternative {v.name!r}" in problem for problem in problems) for v in alternatives)


# The GPU path, guarded where no GPU is needed: cells that @triton.jit compiles from their source, the
# device files the sandbox binds, a warm worker that never initialises CUDA, a compiling child's filter.

JIT_CELL = '''
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x + offsets, tl.load(x + offsets, mask=offsets < n) * 2.0, mask=offsets < n)
'''


def run_python(script, **env):
    """Run a Python script in a fresh interpreter of the course's environment without Triton's
    interpreter (as on a GPU grader); its stdout, or the test fails with its stderr."""
    import os
    import subprocess
    import sys
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    process = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                             env={**environment, **env})
    assert process.returncode == 0, process.stderr[-3000:]
    return process.stdout


def test_jit_cells_load_without_the_interpreter_on_both_sides():
    """Without TRITON_INTERPRET, @triton.jit reads its function's source (to compile it for a GPU):
    the reference's cells (the grader) and the student's (the sandbox's handlers) are compiled with
    their source readable, as IPython's are.  Decorating needs no GPU, so this runs anywhere."""
    out = run_python(f'''
import os, sys, torch
torch.cuda.is_available = lambda: True            # the notebook's first cell: "a GPU is here"
torch.cuda.get_device_name = lambda *args: "a GPU"
from triton.runtime.jit import JITFunction
from autograder.reference import reference_namespace
from tests.notebooks import COURSE
assignment = COURSE.assignment("triton_attention")
namespace = reference_namespace(COURSE.source_notebook(assignment, assignment.notebooks[0]))
assert os.environ.get("TRITON_INTERPRET") is None
for name in ("softmax_kernel", "flash_attention_kernel"):
    kernel = namespace[name]
    assert type(kernel) is JITFunction and f"def {{name}}(" in kernel.src, (name, type(kernel))
sys.path.insert(0, "autograder/sandbox/inside")
import handlers
handlers.REPLIES = os.pipe()[1]
reply = handlers.run_cells({{"cells": [{{"label": "kernel", "source": {JIT_CELL!r}}}], "cell_timeout": 0}})
assert reply == {{"cells": [{{"status": "ok"}}]}}, reply
kernel = handlers.NAMESPACE["scale_kernel"]
assert type(kernel) is JITFunction and "tl.program_id(0) * BLOCK" in kernel.src
print("both sides loaded")
''', AUTOGRADER_KERNEL_DEVICE="cuda")
    assert "both sides loaded" in out


def test_the_warm_worker_never_initialises_cuda():
    """On a GPU grader the worker's start-up (run again by each child there, worker.fresh_child) does not
    initialise CUDA: the guard learns where kernels run from the environment, not from torch."""
    out = run_python('''
import sys, torch
def initialised(*args):
    raise AssertionError("CUDA was initialised")
torch.cuda._lazy_init = torch.cuda.init = torch._C._cuda_getDeviceCount = initialised
sys.path.insert(0, "autograder/sandbox/inside")
import guard, kernels
assert guard.DISPATCH_KEYS[-2:] == ("CUDA", "AutogradCUDA"), guard.DISPATCH_KEYS
kernels.prepare()
print("untouched")
''', AUTOGRADER_KERNEL_DEVICE="cuda")
    assert "untouched" in out


def test_the_sandbox_binds_the_gpus_device_files_and_nothing_else(monkeypatch):
    from autograder.sandbox import jail
    present = {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"}
    monkeypatch.setattr(jail.glob, "glob", lambda pattern: sorted(p for p in present | {"/dev/nvidia-caps"}
                                                                  if p.startswith("/dev/nvidia")))
    monkeypatch.setattr(jail.os.path, "exists", lambda path: path in present)
    monkeypatch.setenv("AUTOGRADER_KERNEL_DEVICE", "cuda")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    assert jail.gpu_device_files() == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    args = jail.bwrap_args({}, 3)
    bound = [args[i + 1] for i, arg in enumerate(args) if arg == "--dev-bind"]
    assert bound == jail.gpu_device_files()
    environment = jail.kernel_environment()
    assert "TRITON_INTERPRET" not in environment and environment["TRITON_F32_DEFAULT"] == "ieee"
    assert environment["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    monkeypatch.setenv("AUTOGRADER_KERNEL_DEVICE", "cpu")
    assert jail.gpu_device_files() == [] and "--dev-bind" not in jail.bwrap_args({}, 3)
    assert jail.kernel_environment() == {"TRITON_INTERPRET": "1"}


def test_the_probe_refuses_a_gpu_grader_without_the_device_files(monkeypatch):
    from autograder.sandbox import jail
    monkeypatch.setenv("AUTOGRADER_KERNEL_DEVICE", "cuda")
    monkeypatch.setattr(jail, "gpu_device_files", lambda: [])
    with pytest.raises(jail.SandboxUnavailable, match="no NVIDIA device files"):
        jail.probe()


def test_a_compiling_child_may_start_processes_but_still_signal_no_other():
    """A child whose kernels are compiled for a GPU runs Triton's assembler as a process: its filter
    allows that, and still refuses signals to other processes; every other child may start none."""
    out = run_python('''
import os, subprocess, sys
sys.path.insert(0, "autograder/sandbox/inside")
import confine
pid = os.fork()
if pid == 0:
    confine.submission_filter(os.getpid(), compiles=True)
    assert subprocess.run(["true"]).returncode == 0
    try:
        os.kill(os.getppid(), 0)
        os._exit(3)
    except PermissionError:
        os._exit(0)
assert os.waitpid(pid, 0)[1] == 0, "a compiling child"
pid = os.fork()
if pid == 0:
    confine.submission_filter(os.getpid())
    try:
        subprocess.run(["true"])
        os._exit(3)
    except PermissionError:
        os._exit(0)
assert os.waitpid(pid, 0)[1] == 0, "any other child"
print("filtered")
''')
    assert "filtered" in out


def test_removing_a_childs_cgroup_kills_what_still_runs_in_it():
    """What a child started (a compiler on a GPU grader, or anything) dies with its cgroup (in a
    process of its own: a grader's cgroup folder is named after its process)."""
    out = run_python('''
import subprocess
from autograder.sandbox import cgroup
accounting = cgroup.open_accounting()
sleeper = subprocess.Popen(["sleep", "60"])
try:
    group = accounting.child(sleeper.pid, 1 << 30, 64)
    group.remove()
    assert sleeper.wait(timeout=10) == -9
    assert not any(folder.exists() for folder in group.folders)
finally:
    sleeper.kill()
    accounting.close()
print("killed")
''')
    assert "killed" in out


def test_a_gpu_child_starts_afresh_and_says_when_it_cannot_open_the_gpu(monkeypatch):
    """On a GPU grader a kernel assignment's child runs the worker's start-up again in its own process
    (worker.fresh_child); where it cannot open the GPU (here: none), the grader hears why, as its own
    failure and not the student's."""
    from autograder.sandbox.student import WorkerError
    monkeypatch.setenv("AUTOGRADER_KERNEL_DEVICE", "cuda")
    monkeypatch.setattr("autograder.sandbox.jail.gpu_device_files", lambda: [])
    monkeypatch.setattr("autograder.sandbox.jail.probe", lambda: "")   # (it refuses a GPU grader without one)
    with Worker(LIMITS) as worker:
        worker.start()
        with pytest.raises(WorkerError, match="the GPU could not be opened in the sandbox"):
            with StudentProcess(worker, [Cell("kernel", KERNEL)], LIMITS, "triton"):
                pass


def test_a_wrapper_swapped_and_put_back_is_seen(worker):
    """The interpreter's load replaced during the call and restored before it returns, through names no
    reader can check: the names are checked as the code runs (reach.py), and getattr does not hand
    Triton's interpreter to the submission at all."""
    swap = '''
def swap_and_back(x):
    import triton
    space = triton
    for part in ("run" + "time", "inter" + "preter"):
        space = getattr(space, part)
    builder = getattr(space, "Interpreter" + "Builder")
    counted = getattr(builder, "create_masked_load")
    setattr(builder, "create_masked_load", lambda self, *args: counted(self, *args))
    try:
        return double(x)
    finally:
        setattr(builder, "create_masked_load", counted)
'''
    with StudentProcess(worker, [Cell("kernel", KERNEL), Cell("swap", swap)], LIMITS, "triton") as process:
        with pytest.raises(StudentError, match="triton.runtime"):
            Student(process).call("swap_and_back", torch.ones(16), count=True)


# Every form of load and store of the pinned Triton's interpreter, counted where the kernel runs.
FORMS = '''
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def hinted_kernel(src, dst, n, BLOCK: tl.constexpr, HOW: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    if HOW == 0:      # other=, a cache modifier and an eviction policy on both
        x = tl.load(src + offsets, mask=inside, other=-1.0, cache_modifier=".cg", eviction_policy="evict_last")
        tl.store(dst + offsets, x * 2.0, mask=inside, cache_modifier=".wb", eviction_policy="evict_first")
    elif HOW == 1:    # volatile
        x = tl.load(src + offsets, mask=inside, volatile=True)
        tl.store(dst + offsets, x * 2.0, mask=inside)
    else:             # no mask at all: tl.load and tl.store of whole blocks
        tl.store(dst + offsets, tl.load(src + offsets, cache_modifier=".ca") * 2.0)


def hinted(x, how, block=16):
    out = torch.empty_like(x)
    hinted_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block, HOW=how)
    return out


@triton.jit
def described_kernel(src, dst, rows, cols, stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    source = tl.make_tensor_descriptor(src, shape=[rows, cols], strides=[stride, 1], block_shape=[BLOCK_R, BLOCK_C])
    target = tl.make_tensor_descriptor(dst, shape=[rows, cols], strides=[cols, 1], block_shape=[BLOCK_R, BLOCK_C])
    r, c = tl.program_id(0) * BLOCK_R, tl.program_id(1) * BLOCK_C
    target.store([r, c], source.load([r, c]) * 2.0)


def described(x, block_r=8, block_c=16):
    """2 x, by descriptors made in the kernel (x's rows may lie x.stride(0) elements apart)."""
    rows, cols = x.shape
    out = torch.empty(rows, cols, dtype=x.dtype)
    described_kernel[(triton.cdiv(rows, block_r), triton.cdiv(cols, block_c))](
        x, out, rows, cols, x.stride(0), BLOCK_R=block_r, BLOCK_C=block_c)
    return out


@triton.jit
def host_described_kernel(source, target, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r, c = tl.program_id(0) * BLOCK_R, tl.program_id(1) * BLOCK_C
    target.store([r, c], source.load([r, c]) * 2.0)


def host_described(x, block_r=8, block_c=16):
    """2 x, by descriptors made on the host (TensorDescriptor.from_tensor)."""
    out = torch.empty_like(x)
    host_described_kernel[(triton.cdiv(x.shape[0], block_r), triton.cdiv(x.shape[1], block_c))](
        TensorDescriptor.from_tensor(x, [block_r, block_c]), TensorDescriptor.from_tensor(out, [block_r, block_c]),
        BLOCK_R=block_r, BLOCK_C=block_c)
    return out


@triton.jit
def gathered_kernel(src, dst, index, rows, cols, N: tl.constexpr, BLOCK_C: tl.constexpr):
    source = tl.make_tensor_descriptor(src, shape=[rows, cols], strides=[cols, 1], block_shape=[1, BLOCK_C])
    target = tl.make_tensor_descriptor(dst, shape=[rows, cols], strides=[cols, 1], block_shape=[1, BLOCK_C])
    picked = tl.load(index + tl.arange(0, N))
    target.scatter(source.gather(picked, 0) * 2.0, picked, 0)


def gathered(x, index):
    """2 x at the rows `index` names (a descriptor's gather and scatter), zeros elsewhere."""
    out = torch.zeros_like(x)
    gathered_kernel[(1,)](x, out, index, x.shape[0], x.shape[1], N=index.numel(), BLOCK_C=x.shape[1])
    return out


@triton.jit
def atomics_kernel(dst, flags, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    inside = offsets < n
    tl.atomic_max(dst + offsets, 5.0, mask=inside)
    tl.atomic_min(dst + offsets, 7.0, mask=inside)
    tl.atomic_xchg(flags + offsets, 1, mask=inside)
    tl.atomic_cas(flags, 1, 2)
    seen = tl.atomic_load(flags + offsets, mask=inside)
    tl.atomic_store(flags + offsets, seen + 10, mask=inside)


def atomics(x, flags, n):
    atomics_kernel[(1,)](x, flags, n, BLOCK=32)
    return x, flags


@triton.jit
def block_pointer_kernel(src, dst, n, BLOCK: tl.constexpr):
    block = tl.make_block_ptr(src, shape=(n,), strides=(1,), offsets=(0,), block_shape=(BLOCK,), order=(0,))
    tl.store(dst + tl.arange(0, BLOCK), tl.load(block, boundary_check=(0,), padding_option="zero"))


def block_pointer(x):
    out = torch.empty(16)
    block_pointer_kernel[(1,)](x, out, x.numel(), BLOCK=16)
    return out


@triton.jit
def descriptor_atomic_kernel(dst, BLOCK: tl.constexpr):
    target = tl.make_tensor_descriptor(dst, shape=[BLOCK], strides=[1], block_shape=[BLOCK])
    target.atomic_add([0], tl.full([BLOCK], 1.0, tl.float32))


def descriptor_atomic(x):
    descriptor_atomic_kernel[(1,)](x, BLOCK=16)
    return x


def overlaunched(x, block=16):
    """2 x, with one program more than x needs: its load and store have every lane masked off."""
    out = torch.empty_like(x)
    hinted_kernel[(triton.cdiv(x.numel(), block) + 1,)](x, out, x.numel(), BLOCK=block, HOW=0)
    return out
'''


@pytest.fixture(scope="module")
def forms(worker):
    with StudentProcess(worker, [Cell("forms", FORMS)], LIMITS, "triton") as process:
        assert process.cell_reports[0].status == "ok", process.cell_reports
        yield Student(process)


def counted_call(student, name, *args):
    """(output, work) of a counted call whose counts stayed whole."""
    reply = student.call(name, *args, count=True)
    assert reply["work"].intact and reply["work"].interpreted, name
    return reply["output"], reply["work"]


@pytest.mark.parametrize("how", [0, 1, 2], ids=["other-cache-eviction", "volatile", "unmasked"])
def test_pointer_loads_and_stores_with_every_hint_are_counted(forms, how):
    x = torch.arange(48.0) if how == 2 else torch.arange(40.0)
    out, work = counted_call(forms, "hinted", x, how)
    assert torch.equal(out, 2 * x)
    assert work.addressed == work.distinct == x.numel() and work.idle_loads == 0
    assert work.output_stored == 1.0 and work.kernel_flops == 2 * 16 * work.programs


def test_a_tensor_descriptor_made_in_the_kernel_is_counted_to_its_bounds(forms):
    """Rows 40 elements apart, 36 wide, in tiles of 8 x 16: the tiles past the last row and column read
    only what lies inside the descriptor's shape (its bounds are the load's mask)."""
    x = torch.arange(800.0).reshape(20, 40)[:, :36]
    out, work = counted_call(forms, "described", protocol.Strided(x))
    assert torch.equal(out, 2 * x)
    assert work.addressed == work.distinct == 20 * 36 and work.idle_loads == 0
    assert work.output_stored == 1.0 and work.kernel_flops > 0 and work.foreign_tensors == 0


def test_a_tensor_descriptor_made_on_the_host_is_counted(forms):
    """TensorDescriptor.from_tensor: the launch's bounds include the tensors the descriptors describe (and
    a measured notebook may import it: the rest of triton.tools stays out of reach)."""
    assert reaches_into_internals("from triton.tools.tensor_descriptor import TensorDescriptor\n") is None
    assert reaches_into_internals("import triton.tools.disasm\n") is not None
    x = torch.arange(720.0).reshape(20, 36)
    out, work = counted_call(forms, "host_described", x)
    assert torch.equal(out, 2 * x)
    assert work.addressed == work.distinct == x.numel() and work.output_stored == 1.0
    assert work.foreign_tensors == 0 and work.launches == 1


def test_a_descriptors_gather_and_scatter_are_counted_and_carry_products(forms):
    x = torch.arange(256.0).reshape(16, 16)
    index = torch.tensor([1, 5, 2, 6, 9, 12, 14, 3], dtype=torch.int32)
    out, work = counted_call(forms, "gathered", x, index)
    want = torch.zeros_like(x)
    want[index.long()] = 2 * x[index.long()]
    assert torch.equal(out, want)
    assert work.addressed == work.distinct == index.numel() + 8 * 16   # the index, then eight rows
    assert work.kernel_flops == 2 * 8 * 16       # the products reach memory through the scatter's rows


def test_every_atomic_form_is_held_to_the_bounds_and_counted(forms):
    """atomic_max, atomic_min, atomic_xchg, atomic_cas, atomic_load and atomic_store: an atomic load reads
    (counted as a load), every atomic's lanes are writes (the call's outputs are theirs)."""
    (x, flags), work = counted_call(forms, "atomics", torch.full((32,), 6.0), torch.zeros(32, dtype=torch.int32), 20)
    assert torch.equal(x, torch.full((32,), 6.0))
    assert flags.tolist() == [12] + [11] * 19 + [0] * 12
    assert work.addressed == 20 and work.output_stored == 40 / 64
    with pytest.raises(StudentError, match="OutOfBounds"):
        forms.call("atomics", torch.zeros(10), torch.zeros(32, dtype=torch.int32), 20)


def test_a_tile_visited_wholly_outside_its_tensor_is_an_idle_load(forms):
    x = torch.arange(40.0)
    out, work = counted_call(forms, "overlaunched", x)
    assert torch.equal(out, 2 * x)
    assert work.idle_loads == 1 and work.addressed == 40 and work.programs == 4


@pytest.mark.parametrize("name,words", [("block_pointer", "Block pointers have been removed"),
                                        ("descriptor_atomic", "create_descriptor_reduce")])
def test_forms_the_pinned_triton_cannot_run_fail_with_their_reason(forms, name, words):
    """Block pointers are gone from Triton 3.9, and its interpreter has no descriptor atomics: the kernel
    fails with Triton's words, and the suites add what to use instead (TRITON_CRASHES)."""
    from autograder.suites.helpers.kernels import TRITON_CRASHES
    with pytest.raises(StudentError) as raised:
        forms.call(name, torch.zeros(16))
    assert words in raised.value.message
    said = f"{raised.value.kind}: {raised.value.message}"
    hint = next(hint for signs, hint in TRITON_CRASHES if any(sign in said for sign in signs))   # as crash_hint picks
    assert ("block pointers" if name == "block_pointer" else "descriptor's atomics") in hint


def test_the_interpreters_memory_operations_are_exactly_the_counted_ones():
    """Every function of the pinned interpreter that calls a memory function of its native module is one
    the wrappers count; the rest of the builder's memory operations go through them."""
    from triton.runtime import interpreter

    from autograder.sandbox.inside import kernels
    found = kernels.memory_operations(interpreter, interpreter._interpreter)
    assert sorted(found) == sorted(f"InterpreterBuilder.{name}" for name in kernels.COUNTED)
    assert kernels.routed_operations(interpreter.InterpreterBuilder) >= {
        "create_load", "create_store", "create_descriptor_load", "create_descriptor_store", "create_descriptor_gather",
        "create_descriptor_scatter", "create_atomic_load", "create_atomic_store", "create_atomic_poll"}


def test_an_operation_on_memory_the_count_does_not_know_is_refused():
    """Deny by default: a builder operation that reaches memory itself (here one added to the interpreter
    before the wrappers are installed, as a later Triton might) makes the kernel that uses it fail with
    Uncounted; one outside the builder stops the installation."""
    out = run_python('''
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, "autograder/sandbox/inside")
from triton.runtime import interpreter
def create_prefetch(self, ptrs):
    return interpreter._interpreter.load(ptrs.data, ptrs.data > 0, ptrs.data, None)
interpreter.InterpreterBuilder.create_prefetch = create_prefetch
import kernels
kernels.prepare()
try:
    interpreter.interpreter_builder.create_prefetch(None)
except kernels.Uncounted as error:
    print("refused:", error)
''')
    assert "refused: the kernel uses create_prefetch" in out
    out = run_python('''
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, "autograder/sandbox/inside")
from triton.runtime import interpreter
def peek(ptrs):
    return interpreter._interpreter.load(ptrs, ptrs, ptrs, None)
peek.__module__ = interpreter.__name__
interpreter.peek = peek
import kernels
try:
    kernels.prepare()
except kernels.Uncounted as error:
    print("stopped:", error)
''')
    assert "stopped: Triton's interpreter reaches memory in peek" in out


def test_the_counters_say_which_modules_of_the_sandbox_they_import():
    """kernels.py and counter.py run in the sandbox under their own names, where the import graph does
    not follow them: each says in DEPENDS which of its neighbours it imports, and says all of them."""
    import ast

    inside = ROOT / "autograder" / "sandbox" / "inside"
    neighbours = {path.stem for path in inside.glob("*.py")} - {"__init__"}
    for name in ("kernels", "counter"):
        tree = ast.parse((inside / f"{name}.py").read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        declared = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                        and any(getattr(target, "id", "") == "DEPENDS" for target in node.targets))
        assert set(declared) == imported & neighbours, name
