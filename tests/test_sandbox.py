"""The student process: isolation, time limits, what crosses the pipe, and what one submission can
leave behind for the next one graded by the same warm worker (nothing)."""

import os
import subprocess
from pathlib import Path

import pytest
import torch

from autograder.harness.context import Student
from autograder.sandbox.student import Cell, Limits, StudentCrash, StudentError, StudentProcess, StudentTimeout, Worker
from tests import sandboxes
from tests.notebooks import ROOT

LIMITS = Limits(call_timeout=2, cell_timeout=2, time_budget=60, memory_mb=2048)


worker = sandboxes.warm_worker(LIMITS)


def submission(worker, *sources, **limits):
    return sandboxes.submission(worker, LIMITS, *sources, **limits)


def test_runs_as_nobody_without_capabilities_or_course_files(worker):
    probe = f"""
import os
def peek():
    status = open('/proc/self/status').read()
    caps = [line.split()[1] for line in status.splitlines() if line.startswith(('CapEff', 'CapPrm', 'CapBnd'))]
    paths = {[str(ROOT / 'course.yml'), str(ROOT / 'autograder' / 'suites'), str(ROOT / 'solutions'),
              '/etc/shadow', '/etc/passwd', '/root']!r}
    return os.getuid(), caps, [os.path.exists(path) for path in paths], os.listdir('/proc')
"""
    with submission(worker, probe) as student:
        uid, caps, exists, processes = student.call("peek")["output"]
    assert uid != 0
    assert caps[:2] == ["0000000000000000", "0000000000000000"]
    assert exists[:5] == [False] * 5
    assert len([p for p in processes if p.isdigit()]) <= 4  # its own PID namespace: bwrap, worker, child


def test_hanging_cell_is_stopped_and_the_rest_runs(worker):
    with submission(worker, "while True:\n    pass\n", "def f():\n    return 1\n") as student:
        assert [r.status for r in student.process.cell_reports] == ["timeout", "ok"]
        assert student.call("f")["output"] == 1


def test_hang_that_swallows_the_alarm_is_killed_and_charged_to_its_function(worker):
    stubborn = ("def stuck():\n    while True:\n        try:\n            while True:\n                pass\n"
                "        except BaseException:\n            pass\n\ndef fine():\n    return 2\n")
    with submission(worker, stubborn) as student:
        with pytest.raises(StudentTimeout):
            student.call("stuck")
        with pytest.raises(StudentTimeout):
            student.call("stuck")  # charged at once, without waiting again
        assert student.call("fine")["output"] == 2  # a fresh child serves the others


def test_exit_mid_call_is_a_crash_not_a_grader_failure(worker):
    with submission(worker, "import os\ndef bye():\n    os._exit(3)\n\ndef fine():\n    return 5\n") as student:
        with pytest.raises(StudentCrash):
            student.call("bye")
        assert student.call("fine")["output"] == 5


def test_tensor_subclasses_arrive_as_plain_tensors(worker):
    code = ("class Sneaky(torch.Tensor):\n    pass\n\n"
            "def make():\n    return torch.ones(3).as_subclass(Sneaky)\n")
    with submission(worker, code) as student:
        value = student.call("make")["output"]
        assert type(value) is torch.Tensor and torch.equal(value, torch.ones(3))


def test_unsupported_return_values_are_reported(worker):
    with submission(worker, "def f():\n    return object()\n") as student:
        with pytest.raises(StudentError, match="returned a value of type object"):
            student.call("f")


def test_time_budget_bounds_a_whole_submission(worker):
    slow = "import time\ntime.sleep(0.8)\n"
    cells = [slow] * 6 + ["def late():\n    return 1\n"]
    with submission(worker, *cells, time_budget=2) as student:
        statuses = [report.status for report in student.process.cell_reports]
        assert statuses[-1] == "timeout"  # never run: the budget was spent before it
        with pytest.raises(StudentTimeout, match="time budget"):
            student.call("late")


def test_nothing_crosses_from_one_submission_to_the_next(worker):
    polluter = """
import os, sys, builtins, numpy
torch.allclose = lambda *a, **k: True
torch.Tensor.__eq__ = lambda *a: True
builtins.LEFT_BEHIND = 1
os.environ['LEFT_BEHIND'] = '1'
for where in ('.', '/', '/dev', '/tmp', '/dev/shm', '/sandbox'):
    try:
        with open(os.path.join(where, 'left_behind.txt'), 'w') as handle:
            handle.write('x')
    except OSError:
        pass
def hog():
    blocks = []
    while True:
        blocks.append(numpy.empty(1 << 30, dtype=numpy.uint8))
"""
    with submission(worker, polluter) as student:
        with pytest.raises((StudentError, StudentCrash)):
            student.call("hog")  # runs into the memory limit
    probe = """
import os, builtins
def look():
    files = [name for where in ('.', '/', '/dev', '/tmp', '/dev/shm') if os.path.isdir(where)
             for name in os.listdir(where) if 'left_behind' in name]
    return (torch.allclose(torch.zeros(2), torch.ones(2)), hasattr(builtins, 'LEFT_BEHIND'),
            os.environ.get('LEFT_BEHIND'), files)
"""
    with submission(worker, probe) as student:
        assert student.call("look")["output"] == (False, False, None, [])


def test_a_calls_memory_is_measured_from_outside_and_the_child_cannot_reset_it(worker):
    """The grader reads a call's peak memory through the host's /proc; the child may neither reset its
    own peak (clear_refs) nor make itself dumpable again to do so."""
    code = ("import ctypes\n"
            "def hold(megabytes):\n    x = torch.ones(megabytes << 18)\n    return float(x.sum())\n\n"
            "def hold_and_reset(megabytes):\n    x = torch.ones(megabytes << 18)\n    del x\n"
            "    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)\n"
            "    open('/proc/self/clear_refs', 'w').write('5')\n    return 0.0\n\n"
            "def dumpable():\n    return ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)\n")
    with submission(worker, code) as student:
        student.call("hold", 1)
        small, large = (student.call("hold", mb, measure_memory=True)["peak_memory"] for mb in (1, 96))
        assert small.os_peak and small.bytes < 16 << 20
        assert large.bytes >= 96 << 20
        assert student.call("dumpable")["output"] == -1  # refused by the seccomp filter
        with pytest.raises(StudentError, match="PermissionError"):
            student.call("hold_and_reset", 96, measure_memory=True)


def test_only_the_scratch_space_is_writable_and_shared_memory_is_capped(worker):
    """The sandbox's root and /dev are read-only; /dev/shm is a small tmpfs of its own; no anonymous
    memory file can be made (memfd_create)."""
    code = """
import errno, os
def try_write(path, megabytes=1):
    try:
        with open(path, 'wb') as handle:
            for _ in range(megabytes):
                handle.write(bytes(1 << 20))
        return 'written'
    except OSError as error:
        return errno.errorcode[error.errno]
def memfd():
    try:
        os.memfd_create('hidden')
        return 'made'
    except OSError as error:
        return errno.errorcode[error.errno]
"""
    with submission(worker, code) as student:
        assert student.call("try_write", "/planted")["output"] == "EROFS"
        assert student.call("try_write", "/dev/planted")["output"] == "EROFS"
        assert student.call("try_write", "/dev/shm/small")["output"] == "written"
        assert student.call("try_write", "/dev/shm/large", 100)["output"] == "ENOSPC"
        assert student.call("memfd")["output"] == "EPERM"


def test_the_kernel_charges_a_child_everything_it_holds(worker):
    """Each child is in a memory cgroup of its own (this machine, and CI, have one): its hard limit is
    the course's memory_mb, and a measured call is charged what the child holds at the call's worst
    moment, from before its first cell ran: a workspace made when a cell ran, memory given back before
    the call returns, files in the scratch space and in shared memory."""
    code = """
import numpy as np
WORKSPACE = torch.ones(64 << 18)  # 64 MiB, made and touched when the cell runs
def nothing():
    return 0.0
def given_back():
    x = torch.ones(64 << 18)
    del x
    return 0.0
def in_a_file(where):
    data = np.memmap(where, dtype=np.float32, mode='w+', shape=(32 << 18,))
    data[:] = 1.0
    return float(data[0])
"""
    with submission(worker, code) as student:
        group = student.process.group
        assert group is not None, worker.accounting_problem
        assert group.usage() < (1 << 40)
        limit = worker.accounting.file(group.name, "memory_limit").read_text()
        assert int(limit) == LIMITS.memory_mb << 20
        held = student.call("nothing", measure_memory=True)["peak_memory"]
        assert held.accounting == "cgroup" and held.held_before >= 64 << 20 and held.bytes >= 64 << 20
        assert student.call("given_back", measure_memory=True)["peak_memory"].bytes >= 128 << 20
        for where in ("/tmp/work/scores.bin", "/dev/shm/scores"):
            assert student.call("in_a_file", where, measure_memory=True)["peak_memory"].bytes >= (64 + 32) << 20


def test_the_worker_heap_is_in_huge_pages_and_a_child_allocates_in_small_ones(worker):
    """Where the machine gives transparent huge pages on request, the worker's heap takes them (a fork
    copies a 2 MiB page's one entry, not 512); a child takes none for its own allocations, so what its
    measured calls are charged is counted in 4 KiB pages on every machine."""
    code = ("def huge():\n"
            "    rollup = open('/proc/self/smaps_rollup').read().splitlines()\n"
            "    return [int(line.split()[1]) for line in rollup if line.startswith('AnonHugePages')][0]\n"
            "def disabled():\n"
            "    status = open('/proc/self/status').read().splitlines()\n"
            "    return [line.split()[1] for line in status if line.startswith('THP_enabled')]\n"
            "def allocate():\n"
            "    global HELD\n    HELD = torch.ones(64 << 18)\n    return 0.0\n")
    settings = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    offered = settings.exists() and "[never]" not in settings.read_text()
    with submission(worker, code) as student:
        assert student.call("disabled")["output"] in (["0"], [])   # [] : a kernel that does not say
        inherited = student.call("huge")["output"]
        student.call("allocate")
        assert student.call("huge")["output"] <= inherited, "64 MiB allocated in the child took huge pages"
    if offered:
        assert inherited >= 16 << 10, f"the worker's heap has {inherited} KiB in huge pages ({settings.read_text().strip()})"


def test_the_next_child_starts_after_the_last_is_gone_and_its_cgroup_is_removed(worker):
    """The grader does not wait while the worker reaps an ended child (Worker.end): the worker carries out
    its orders in turn, so the next child is forked once the last is gone and the scratch space emptied;
    the ended child's cgroups go as the next child is placed."""
    code = ("import os\n"
            "def plant():\n"
            "    open('/tmp/work/planted', 'w').write('x')\n    open('/dev/shm/planted', 'w').write('x')\n"
            "    return os.getpid()\n"
            "def look():\n"
            "    return [os.path.exists('/tmp/work/planted'), os.path.exists('/dev/shm/planted')]\n")
    with submission(worker, code) as student:
        assert student.call("look")["output"] == [False, False]
        student.call("plant")
        assert student.call("look")["output"] == [True, True]
        ended = student.process.group
    if ended is None:
        pytest.skip(f"no cgroups here: {worker.accounting_problem}")
    assert ended in worker.retired
    with submission(worker, code) as student:
        assert student.call("look")["output"] == [False, False], "the scratch space is emptied first"
        assert not any(folder.exists() for folder in ended.folders), "the ended child's cgroups are removed"
        assert ended not in worker.retired


def test_a_counted_call_runs_alone_and_its_count_cannot_be_switched_off(worker):
    """During a counted call the child may start no thread (its cgroup's pids.max is 1), a thread
    already running is reported, NumPy is refused, a counter taken off is reported, and work hidden
    from it counts nothing (the suites' lower bounds fail it; rules.py flags the code that does it)."""
    code = """
import threading, time
from torch.utils._python_dispatch import _disable_current_modes
def product(n):
    x = torch.ones(n, n)
    return float((x @ x).sum())
def in_a_thread(n):
    found = []
    thread = threading.Thread(target=lambda: found.append(product(n)))
    thread.start()
    thread.join()
    return found[0]
def hidden(n):
    with _disable_current_modes():
        return product(n)
def popped(n):
    from torch.utils._python_dispatch import _pop_mode
    _pop_mode()
    return product(n)
def through_numpy(n):
    return float((torch.ones(n, n).numpy() @ torch.ones(n, n).numpy()).sum())
def start_a_helper():
    threading.Thread(target=lambda: time.sleep(30), daemon=True).start()
    return 0.0
"""
    with submission(worker, code) as student:
        counted = student.call("product", 8, count=True)["work"]
        assert counted.torch_flops == 2 * 8 ** 3 and counted.intact and counted.other_threads == 0
        assert not counted.kernels and counted.launches == 0    # no kernels in this assignment
        with pytest.raises(StudentError, match="can't start new thread"):
            student.call("in_a_thread", 8, count=True)
        assert student.call("in_a_thread", 8)["output"] == 8 ** 3  # threads are fine outside counted calls
        assert student.call("hidden", 8, count=True)["work"].torch_flops == 0  # below any suite's lower bound
        assert not student.call("popped", 8, count=True)["work"].intact
        with pytest.raises(StudentError, match="NumPy"):
            student.call("through_numpy", 8, count=True)
        assert student.call("through_numpy", 8)["output"] == 8 ** 3
        student.call("start_a_helper")
        assert student.call("product", 8, count=True)["work"].other_threads == 1


def test_a_worker_started_before_the_fork_serves_the_grading_process_and_dies_with_it():
    """A class run starts each sandbox before torch is imported and hands it to a forked grading
    process (classrun.fanout): that process grades with it and can tell it died (a pidfd); when the
    grading process dies without a word, the worker sees its socket close and ends, and the process
    that started it reaps it."""
    import multiprocessing
    import os
    import signal
    from autograder.sandbox.jail import Started

    started = Started(LIMITS.sandboxed)
    answers = multiprocessing.get_context("fork").Queue()

    def grading_process():
        worker = Worker(LIMITS)
        worker.start(started)
        with StudentProcess(worker, [Cell("f", "def f():\n    return 42\n")], LIMITS) as process:
            answers.put((Student(process).call("f")["output"], worker.sandbox.exited()))
        answers.close()
        answers.join_thread()   # the answer is in the pipe (the queue's feeder thread has written it)
        os.kill(os.getpid(), signal.SIGKILL)   # dies without closing anything

    process = multiprocessing.get_context("fork").Process(target=grading_process)
    process.start()
    started.release()
    value, exited = answers.get(timeout=60)
    process.join(timeout=30)
    assert value == 42 and exited is False
    assert started.process.wait(timeout=30) is not None   # the worker ended once its grader was gone
    started.stop()


def test_a_grader_killed_before_its_close_leaves_nothing_a_later_one_trips_on(tmp_path):
    """A killed grader's cgroup folders stay behind and pids come round again: an accounting's name is never one
    used before, and what dead graders left beside it is removed (a live grader's folder is left alone)."""
    from autograder.sandbox import cgroup

    ended = subprocess.Popen(["true"])
    ended.wait()
    dead, alive = tmp_path / f"autograder-{ended.pid}-1", tmp_path / f"autograder-{os.getpid()}-1"
    for folder in (dead / "child-1", alive / "child-1"):
        folder.mkdir(parents=True)
    cgroup._sweep(tmp_path, "autograder")
    assert not dead.exists() and (alive / "child-1").exists()
    assert len({cgroup._own_name().split("-", 1)[0] for _ in range(3)}) == 1   # the process's own pid first
    assert len({cgroup._own_name() for _ in range(3)}) == 3
