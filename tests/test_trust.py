"""What measures a student is decided on the grader's side from what it observed, never from what the
student's process says about itself: whose fault an error is, whether a call ran out of time, and the
memory a measured call is charged (the call runs where no other process of the submission is alive)."""

import contextlib

import pytest

from autograder.harness.context import Student
from autograder.sandbox.student import Cell, Limits, StudentError, StudentProcess, StudentTimeout, Worker

LIMITS = Limits(call_timeout=5, cell_timeout=5, time_budget=60, memory_mb=2048)


@pytest.fixture(scope="module")
def worker():
    with Worker(LIMITS) as worker:
        worker.start()
        yield worker


@contextlib.contextmanager
def submission(worker, *sources):
    cells = [Cell(str(i), "import torch\n" + source) for i, source in enumerate(sources)]
    with StudentProcess(worker, cells, LIMITS) as process:
        yield Student(process)


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
