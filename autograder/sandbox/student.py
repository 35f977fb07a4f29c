"""The grader's handle on student code: a warm worker in the sandbox, and one child per submission.

`Worker` starts the sandboxed warm worker once (it imports torch and friends, then waits) and asks
it to fork a fresh child for every submission.  `StudentProcess` is one submission's child: it
carries requests and replies on a pair of pipes, and nothing else.

Every request has a deadline, and a submission has a total time budget.  A call that misses its
deadline gets the child killed; the next request forks a fresh child (the notebook is loaded
again, minus cells that hung), and later calls to the function that hung fail at once.  Once the
budget is spent, every remaining request fails at once.  So an infinite loop costs the tests of
the function that loops, and grading a submission takes bounded time.

Every reply is checked against the shape its request expects before anything uses it (replies.py);
a malformed reply costs that request, never the grader.
"""

import contextlib
import dataclasses
import json
import logging
import os
import secrets
import select
import socket
import time
from dataclasses import dataclass

from autograder.sandbox import memory, replies
from autograder.course import Limits
from autograder.submission import Cell  # noqa: F401  (what StudentProcess runs)
from autograder.sandbox import cgroup, jail
from autograder.sandbox.inside import protocol

START_TIMEOUT = 120  # seconds for the warm worker to import torch (a cold disk is slow)
CONTROL_TIMEOUT = 30
KERNELS_TIMEOUT = 120  # the first fork of a kernel assignment may import Triton in the warm worker first
log = logging.getLogger(__name__)
START_SECONDS = 60  # a child on the CUDA device starts afresh (worker.fresh_child): imports, CUDA, Triton
READY_SECONDS = 10  # a child forked from the warm worker answers at once
CHILD_TASKS = 64   # threads a child may run (pids.max of its cgroup); 1 during a counted call


class StudentFailure(Exception):
    """Something on the student side went wrong; the message is written for the student."""


class StudentError(StudentFailure):
    """The student's code raised an exception."""

    def __init__(self, kind, message, traceback):
        self.kind, self.message, self.traceback = kind, message, traceback
        super().__init__(f"{kind}: {message}" if message else kind)


class StudentTimeout(StudentFailure):
    pass


class StudentCrash(StudentFailure):
    pass


class WorkerError(Exception):
    """The warm worker could not be started or stopped answering (the grader's problem)."""


@dataclass
class CellReport:
    label: str
    status: str  # ok | syntax | error | timeout
    message: str = ""
    traceback: str = ""
    defines: tuple = ()  # names the cell defines (Cell.defines): what is missing if it failed


class Worker:
    """The warm worker: started once in the sandbox, forks one child per submission."""

    def __init__(self, limits, warm=False, kernel_kind=""):
        self.limits = limits
        self.warm = warm               # its children use torch's dynamo stack (jail.Started)
        self.kernel_kind = kernel_kind  # ... and kernels of this kind (course.yml's `kernels`), prepared at its start
        self.sandbox = None            # jail.Started: the sandbox's process, control socket and stderr
        self.ready = False
        self.accounting = None         # the children's cgroups (sandbox/cgroup.py), when the OS lets us
        self.retired = []              # cgroups of ended children, removed once the worker has reaped them
        self.accounting_problem = None  # else why not, in one line

    def open_accounting(self):
        """Make the grader's folder of child cgroups once; remember why not where it cannot be made."""
        if self.accounting is None and self.accounting_problem is None:
            try:
                self.accounting = cgroup.open_accounting()
            except cgroup.Unavailable as problem:
                self.accounting_problem = str(problem)
        return self.accounting

    def account(self, host):
        """Put the child (by its host pid) into a cgroup of its own (its memory limit, its threads);
        its ChildGroup, or None without accounting.  A child that cannot be placed is not run."""
        self.retired = [group for group in self.retired if not group.try_remove()]
        accounting = self.open_accounting()
        if accounting is None or host is None:
            return None
        try:
            return accounting.child(host, self.limits.memory_mb << 20, CHILD_TASKS)
        except OSError as error:
            raise WorkerError(f"the child could not be put in its cgroup ({error.strerror})") from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def process(self):
        return self.sandbox.process if self.sandbox is not None else None

    @property
    def control(self):
        return self.sandbox.control if self.sandbox is not None else None

    @property
    def log(self):
        return self.sandbox.log if self.sandbox is not None else None

    def start(self, started=None):
        """Start the worker (it imports torch while the caller goes on; the first order waits for
        it), or take over one already started (jail.Started); raise jail.SandboxUnavailable when
        the sandbox cannot be built here."""
        self.sandbox = started or jail.Started(self.limits.sandboxed, self.warm, self.kernel_kind)
        self.ready = False

    def _wait_ready(self):
        try:
            self._reply(START_TIMEOUT)
        except WorkerError as error:
            self.close()
            raise WorkerError(f"the sandboxed worker did not start: {error}") from None
        self.ready = True

    def _reply(self, timeout):
        if not select.select([self.control], [], [], timeout)[0]:
            raise WorkerError("no answer in time")
        data = self.control.recv(4096)
        if not data:
            self.log.seek(0)
            lines = self.log.read().decode(errors="replace").strip().splitlines()
            raise WorkerError(lines[-1] if lines else "it exited")
        try:
            reply = json.loads(data)
        except ValueError:
            raise WorkerError("an unreadable answer") from None
        if not isinstance(reply, dict):
            raise WorkerError("an unreadable answer")
        return reply

    def _order(self, order, fds=(), timeout=None):
        if self.process is None or self.sandbox.exited():
            self.close()
            self.start()
        if not self.ready:
            self._wait_ready()
        try:
            self._tell(order, fds)
            return self._reply(timeout or CONTROL_TIMEOUT)
        except (OSError, WorkerError):
            self.close()  # a worker that stopped answering is replaced on the next order
            raise WorkerError("the warm worker stopped answering") from None

    def _tell(self, order, fds=()):
        socket.send_fds(self.control, [json.dumps(order).encode()], list(fds))

    def fork(self, memory_mb, kernel_kind="", warm=False):
        """A fresh child for one submission; returns (pid, request fd, reply fd).  kernel_kind: what the
        assignment's kernels need imported first (course.yml's `kernels`, e.g. "triton"); warm: the
        child will use torch's dynamo stack, which the worker then imports first (once)."""
        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        order = {"op": "fork", "memory_mb": memory_mb}
        if kernel_kind:
            order["kernel_kind"] = kernel_kind
        if warm:
            order["warm"] = True
        timeout = KERNELS_TIMEOUT if kernel_kind else CONTROL_TIMEOUT
        try:
            reply = self._order(order, [requests_read, replies_write], timeout)
            if reply.get("scratch_left"):   # a child left files its wipe could not remove: a fresh sandbox
                self.close()
                reply = self._order(order, [requests_read, replies_write], timeout)
        except WorkerError:
            for fd in (requests_read, requests_write, replies_read, replies_write):
                os.close(fd)
            raise
        finally:
            if self.control is not None:
                os.close(requests_read)
                os.close(replies_write)
        if isinstance(reply.get("error"), str):
            raise WorkerError(reply["error"][:300])
        pid = reply.get("pid")
        if type(pid) is not int:
            raise WorkerError("the warm worker did not fork")
        return pid, requests_write, replies_read

    def host_pid(self, pid):
        """The host's pid of the child the worker calls `pid` (for reading its memory)."""
        return memory.host_pid(self.process.pid, pid) if self.process is not None else None

    def end(self, pid, group=None, wait=False):
        """Kill a child (if it still runs) and empty the scratch space for the next one; `group`, its
        cgroup, goes once the worker has reaped it.  The worker carries out its orders in turn, so the
        next child is forked after this one is gone and the scratch space emptied: the grader waits for
        that only with `wait` (a child on the GPU, whose memory there is waited for next)."""
        if group is not None:
            group.kill_members()   # what the child started, wherever it runs
            self.retired.append(group)
        try:
            if wait:
                self._order({"op": "end", "pid": pid})
            elif self.process is not None and not self.sandbox.exited():
                self._tell({"op": "end", "pid": pid, "quiet": True})   # answered by nothing
        except (OSError, WorkerError):
            pass  # the worker is replaced, and its children die with it

    def close(self):
        if self.sandbox is not None:
            self.sandbox.stop()
            self.sandbox = None
        for group in self.retired:
            group.remove()
        self.retired = []
        if self.accounting is not None:
            self.accounting.close()  # after the worker, whose children leave their cgroups as they die
            self.accounting = None


class StudentProcess:
    """One submission's code, in a child of the warm worker; use as a context manager."""

    def __init__(self, worker, cells, limits=None, kernel_kind="", warm=False, files=None):
        self.worker = worker
        self.kernel_kind = kernel_kind  # course.yml's `kernels` of the assignment: imported before the child forks
        self.cells = list(cells)
        self.files = dict(files or {})  # name -> text, written beside the notebook before its cells run (variant.json)
        self.limits = limits or Limits()
        self.pid = self.requests = self.replies = None
        self.host_pid = None      # the host's pid of the child (its cgroup, its memory), found when it starts
        self.group = None         # the child's cgroup (sandbox/cgroup.py), or None without accounting
        self.held_at_start = 0    # what the child held in it before the submission's code ran
        self.threads_at_start = 1  # the child's threads then (on a GPU also CUDA's and autograd's own)
        self.cell_reports = None
        self.skip_cells = set()   # cells that hung: not run again after a restart
        self.hung = {}            # name -> message, for functions that hung once
        self.restarts = 0
        self.started = time.monotonic()
        self.deadline = self.started + self.limits.time_budget
        # Kernels compiled for the CUDA device: Triton runs its compiler as processes during a call, so
        # a counted call's child is not held to its threads (sandbox/inside/confine.py), though threads beyond
        # those it started with are still seen at the call's start and end; and the GPU memory of a
        # child is waited for after it ends.
        self.on_gpu = bool(kernel_kind) and jail.kernel_device() == "cuda"
        # Whether the worker should import torch's dynamo stack before the child is forked: the
        # assignment's tests count work (warm), or the code names an optimiser.  Only a hint: a child
        # whose code hides its optimiser imports the stack itself, in its own time.
        self.warm = warm or any("optim" in cell.source for cell in self.cells)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def seconds(self):
        return time.monotonic() - self.started

    def _budget_left(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise StudentTimeout(f"the submission used up its time budget of {self.limits.time_budget:g} s")
        return left

    # -- process life cycle ------------------------------------------------------------------
    def start(self):
        """Fork a child and run the notebook's cells; returns the per-cell reports."""
        while True:
            self._budget_left()
            self.pid, self.requests, self.replies = self.worker.fork(self.limits.memory_mb, self.kernel_kind,
                                                                     self.warm)
            try:
                self.host_pid = self.worker.host_pid(self.pid)
                self.group = self.worker.account(self.host_pid)
                self._wait_ready()
            except (WorkerError, OSError):
                self.kill()
                raise
            cells = [{"label": cell.label, "source": "" if i in self.skip_cells else cell.source}
                     for i, cell in enumerate(self.cells)]
            current = None
            try:
                self._send({"op": "run_cells", "cells": cells, "cell_timeout": self.limits.cell_timeout,
                            "files": self.files})
                deadline = min(self.deadline, time.monotonic() + self.limits.cell_timeout + 2)
                while True:
                    message = self._read(deadline)
                    event = replies.cell_event(message, len(cells))
                    if event is not None:
                        current = event
                        deadline = min(self.deadline, time.monotonic() + self.limits.cell_timeout + 2)
                        continue
                    reply = replies.run_cells(self._unwrap(message), len(cells))
                    break
            except (protocol.Timeout, EOFError, OSError, protocol.ProtocolError) as problem:
                self.kill()
                if time.monotonic() >= self.deadline:
                    self._mark_unrun()
                    return self.cell_reports
                if current is None or self.restarts >= self.limits.restarts:
                    raise StudentCrash(f"the notebook could not be loaded ({_describe(problem)})") from None
                self.restarts += 1
                self.skip_cells.add(current)
                continue
            self.cell_reports = self._reports(reply)
            # A cell that used up its time once is not run again if the process is restarted.
            self.skip_cells.update(i for i, report in enumerate(self.cell_reports)
                                   if report.status == "timeout")
            return self.cell_reports

    def _wait_ready(self):
        """Wait until the child serves, before any of the submission's code runs, and note what it then
        holds: its memory and its threads (on a GPU, CUDA's and autograd's own are started by then)."""
        self._send({"op": "ready"})
        try:
            reply = self._read(time.monotonic() + (START_SECONDS if self.on_gpu else READY_SECONDS))
            unavailable = replies.ready(self._unwrap(reply))
        except (protocol.Timeout, EOFError, protocol.ProtocolError, StudentFailure) as problem:
            raise WorkerError(f"the submission's process did not start ({_describe(problem)})") from None
        if unavailable:  # the child could not open its GPU (worker.child), before any student code ran
            raise WorkerError(unavailable)
        if self.group is not None:
            self.held_at_start = self.group.usage()
            self.threads_at_start = self.group.tasks()

    def _mark_unrun(self):
        """The budget ran out while loading: the child is gone and nothing it defined survives, so
        every cell is charged."""
        spent = f"not run: the submission used up its time budget of {self.limits.time_budget:g} s"
        self.cell_reports = [CellReport(cell.label, "timeout", spent, defines=cell.defines) for cell in self.cells]

    def _reports(self, results):
        reports = []
        for index, (cell, result) in enumerate(zip(self.cells, results)):
            if index in self.skip_cells:
                reports.append(CellReport(cell.label, "timeout", "ran out of time and was stopped",
                                          defines=cell.defines))
            else:
                reports.append(CellReport(cell.label, result["status"], result["message"],
                                          result["traceback"], cell.defines))
        return reports

    def kill(self):
        if self.pid is None:
            return
        for fd in (self.requests, self.replies):
            os.close(fd)
        self.worker.end(self.pid, self.group, wait=self.on_gpu)
        if self.on_gpu and self.host_pid is not None:
            held = memory.wait_gpu_released(self.host_pid)
            if held:
                log.warning("a submission's process still holds %s MiB on the GPU after it ended", held)
        self.pid = self.requests = self.replies = self.host_pid = self.group = None

    def close(self):
        if self.pid is not None:
            try:
                self._send({"op": "exit"})
            except OSError:
                pass
        self.kill()

    # -- requests ------------------------------------------------------------------------------
    def _send(self, message):
        """Each request carries a nonce of its own; the child's messages in answer must carry it back
        (_read).  The nonce is never written where the submission's code can read it: a reply that
        the submission writes itself on the reply pipe (a count of work it did not do) lacks it."""
        self.nonce = secrets.token_hex(16)
        protocol.write_message(self.requests, protocol.encode({**message, "nonce": self.nonce}))

    def _read(self, deadline):
        """The next message from the child, as an answer to the last request (replies.answering)."""
        return replies.answering(protocol.decode(protocol.read_message(self.replies, deadline)), self.nonce)

    @staticmethod
    def _unwrap(reply, seconds=None, timeout=None):
        """The reply's value, or the student's failure it reports.  Whose fault a failure is, is decided
        here from what the grader saw, never from a name the child chose: every error a child reports
        is the student's (the grader's own failures are a child that does not start or answer, and the
        one the child may state before any of the submission's code runs, _wait_ready); a reported
        time-out is one only when the grader's clock saw the call's time run out (seconds, timeout),
        else it is an exception of the student's that happens to be called Timeout."""
        value, error = replies.envelope(reply)
        if error is None:
            return value
        if error["type"] == "Timeout" and not error["traceback"] and (seconds is None or seconds >= timeout * 0.9):
            raise StudentTimeout("ran out of time")
        raise StudentError(error["type"], error["message"], error["traceback"])

    def request(self, key, message, check, measure_memory=False, fresh=False):
        """Send one request; `key` names what it exercises, so a hang is charged to it alone;
        `check` validates the reply's value (see replies.py).  fresh: the request runs in a fresh child
        that has only run the notebook's cells (_in_fresh_child), where nothing an earlier call left reaches it.

        With measure_memory the request runs in a fresh child, alone (_in_fresh_child), that runs the
        notebook's cells again and then makes this call, and the value also carries "peak_memory" (a memory.Peak, or None
        when it could not be read): with a cgroup, everything that child holds at the call's worst
        moment, from before the submission's first line ran (memory.py).  A counted request (a call
        with "count", a module with a step with "count") runs with the child held to one thread, and
        its value's "work" (a replies.Work) carries other_threads: threads that were already running
        beside it (work they do is not counted)."""
        if measure_memory or fresh:
            return self._in_fresh_child(key, message, check, measure_memory)
        return self._request(key, message, check)

    def _in_fresh_child(self, key, message, check, measure_memory=True):
        """The measured call runs in a child of its own, where no other process of the submission is
        alive: the child that ran its other calls is ended first, and the worker empties the scratch
        space once a submission has no child left, so nothing the submission made before (a file of
        precomputed scores in /tmp, say) is there to be used without being charged.  The fresh child
        runs the notebook's cells again and, after the call, serves the submission's later requests."""
        if key in self.hung:
            raise StudentTimeout(self.hung[key])
        self.kill()
        restarts, reports = self.restarts, self.cell_reports
        self.restarts = self.limits.restarts  # no second chance: a crash while loading is this call's
        try:
            self.start()
            return self._request(key, message, check, measure_memory)
        finally:
            self.restarts, self.cell_reports = restarts, reports

    def _measure(self):
        if self.group is not None:
            return memory.ChargedMemory(self.group, self.held_at_start)
        return memory.PeakMemory(self.host_pid)

    def _request(self, key, message, check, measure_memory=False):
        if key in self.hung:
            raise StudentTimeout(self.hung[key])
        timeout = min(self.limits.call_timeout, self._budget_left())
        if self.pid is None:
            if self.restarts >= self.limits.restarts:
                raise StudentCrash("the notebook's process stopped too often to go on")
            self.restarts += 1
            self.start()
            timeout = min(self.limits.call_timeout, self._budget_left())
        counted = bool(message.get("count") or any(step.get("count") for step in message.get("steps", ())))
        other_threads = None
        try:
            watch = counted and self.group is not None
            hold = watch and not self.on_gpu
            if watch:
                other_threads = self.group.tasks() - self.threads_at_start
            if hold:
                self.group.allow_tasks(self.threads_at_start)  # no new thread while the call is counted
            with self._measure() if measure_memory else contextlib.nullcontext() as measure:
                sent = time.monotonic()
                self._send({**message, "timeout": timeout})
                reply = self._read(time.monotonic() + timeout + 1)
                seconds = time.monotonic() - sent
            if hold:
                self.group.allow_tasks(CHILD_TASKS)
            elif watch:   # on a GPU: a thread started during the call and still running
                other_threads = max(other_threads, self.group.tasks() - self.threads_at_start)
        except protocol.Timeout:
            self.kill()
            if time.monotonic() >= self.deadline:
                raise StudentTimeout(f"the submission used up its time budget of "
                                     f"{self.limits.time_budget:g} s") from None
            self.hung[key] = f"{key} did not finish within {timeout:g} s (an infinite loop?)"
            raise StudentTimeout(self.hung[key]) from None
        except (EOFError, OSError):
            self.kill()
            raise StudentCrash(f"the process stopped while running {key} "
                               "(did the code call exit() or use too much memory?)") from None
        except protocol.ProtocolError as problem:   # its details are the student's process's (plugin.said_of)
            self.kill()
            log.warning("%s sent back something unreadable (%s)", key, problem)
            raise StudentCrash(f"{key} sent back something unreadable") from None
        try:
            value = check(self._unwrap(reply, seconds, timeout))
            if measure_memory:
                value["peak_memory"] = measure.peak
            if counted:
                if not isinstance(value.get("work"), replies.Work):
                    raise protocol.ProtocolError("a counted call's reply without its count of work")
                value["work"] = dataclasses.replace(value["work"], other_threads=other_threads)
            return value
        except StudentTimeout:
            self.hung[key] = f"{key} did not finish within {timeout:g} s (an infinite loop?)"
            raise StudentTimeout(self.hung[key]) from None
        except protocol.ProtocolError as problem:
            self.kill()  # a process that sends malformed replies is not trusted to go on
            log.warning("%s sent back something unreadable (%s)", key, problem)
            raise StudentCrash(f"{key} sent back something unreadable") from None


def _describe(problem):
    if isinstance(problem, protocol.Timeout):
        return "it did not finish in time"
    if isinstance(problem, EOFError):
        return "the process stopped"
    return str(problem)
