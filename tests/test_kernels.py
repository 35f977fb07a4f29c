"""The kernel track's machinery: Triton's interpreter in the sandbox, what it counts of a call's
kernels, the loads and stores it stops, and tensors sent with their layout in memory."""

import pytest
import torch

from autograder.harness.context import Student
from autograder.rules import reaches_into_internals
from autograder.sandbox import protocol
from autograder.student import Cell, Limits, StudentError, StudentProcess, Worker

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
'''


@pytest.fixture(scope="module")
def worker():
    with Worker(LIMITS) as worker:
        worker.start()
        yield worker


@pytest.fixture(scope="module")
def student(worker):
    with StudentProcess(worker, [Cell("kernel", KERNEL)], LIMITS, "triton") as process:
        assert process.cell_reports[0].status == "ok", process.cell_reports
        yield Student(process)


def test_a_kernel_runs_in_the_interpreter_and_its_work_is_counted(student):
    x = torch.arange(40, dtype=torch.float32)
    reply = student.call("double", x, count_kernels=True, count_flops=True)
    assert torch.equal(reply["output"], 2 * x)
    tally = reply["kernels"]
    assert tally["interpreted"] and tally["intact"]
    assert (tally["launches"], tally["programs"]) == (1, 3)           # 40 elements in blocks of 16
    assert tally["addressed"] == 3 * 16                                # masked lanes of the last block included
    assert tally["flops"] == 2 * 3 * 16                                # the element-wise multiply, 2 per element
    assert reply["flops"] == 0 and reply["exponentials"] == 0         # torch did none of it


def test_a_load_past_the_end_stops_the_kernel_and_names_the_program(student):
    with pytest.raises(StudentError) as raised:
        student.call("double", torch.ones(40), False)
    assert "OutOfBounds" in raised.value.message and "program (2, 0, 0)" in raised.value.message
    assert "tl.load" in raised.value.message


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
        reply = Student(process).call("tamper", torch.ones(16), count_kernels=True)
    assert reply["kernels"]["intact"] is False


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


GPU_ANSWERS = {   # the reference and three catalogued mistakes: their grades on the GPU and in the interpreter
    "reference": None,
    "no_skip": ("flash_kernel", "the causal mask, but every key tile visited"),
    "other_zero": ("softmax_kernel", "the lanes past the row loaded as 0"),
    "no_none": ("kernel_autograd", "three gradients for four inputs (no None for causal)"),
}


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device here: triton_attention's grading on a GPU was not tried")
def test_the_gpu_grade_equals_the_interpreters(tmp_path):
    """On a machine with a CUDA device: the same submissions graded with the kernels compiled for it
    (AUTOGRADER_KERNEL_DEVICE=cuda, sandbox: none so the device files are reachable) and in Triton's
    interpreter get the same score on every test but the tile count, which only the interpreter can
    count (on the GPU its values are checked)."""
    import json
    import os
    import subprocess
    import sys

    from tests.catalogue import mistake
    from tests.notebooks import ROOT, make_submission, solution_answers

    course_yml = tmp_path / "course.yml"
    course_yml.write_text((ROOT / "course.yml").read_text().replace("sandbox: bwrap", "sandbox: none"))
    for name, entry in GPU_ANSWERS.items():
        answers = solution_answers("triton_attention")
        if entry:
            answers[entry[0]] = mistake(*entry)
        notebook, = make_submission("triton_attention", answers, tmp_path / name)
        scores = {}
        for device in ("cpu", "cuda"):
            out = tmp_path / f"{name}-{device}.json"
            env = {**os.environ, "AUTOGRADER_KERNEL_DEVICE": device}
            process = subprocess.run([sys.executable, "-m", "autograder", "--course", str(course_yml), "grade",
                                      "--assignment", "triton_attention", str(notebook), "--json", str(out)],
                                     cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            assert process.returncode == 0, process.stderr
            scores[device] = {test["name"]: test["score"] for test in json.loads(out.read_text())["tests"]
                              if test["name"] != "flash_kernel: test_causal_skips_tiles_above_the_diagonal"}
        assert scores["cpu"] == scores["cuda"], name
