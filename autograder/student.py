"""The grader's handle on one submission's process: start it, load the notebook, make calls.

Every request has a deadline.  A call that misses it gets the process killed; the next request
starts a fresh process (the notebook is loaded again, minus cells that hung), and later calls to the
function that hung fail at once.  So an infinite loop costs the tests of the function that loops,
and grading a submission takes bounded time.
"""

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from autograder.sandbox import protocol

SANDBOX_DIR = Path(__file__).resolve().parent / "sandbox"


@dataclass
class Limits:
    cell_timeout: float = 30.0
    call_timeout: float = 10.0
    memory_mb: int = 4096
    restarts: int = 4
    sandbox: str = "auto"  # "auto": bubblewrap when it works here; "bwrap"; "none"


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


@dataclass
class CellReport:
    label: str
    status: str  # ok | syntax | error | timeout | skipped
    message: str = ""
    traceback: str = ""


@dataclass
class Cell:
    label: str
    source: str


@functools.lru_cache(maxsize=None)
def bubblewrap_works():
    if not shutil.which("bwrap"):
        return False
    probe = subprocess.run(sandbox_prefix() + ["/bin/true"], capture_output=True, timeout=30)
    return probe.returncode == 0


def sandbox_prefix():
    """A bubblewrap command line that shows the student process only the Python installation and
    the worker: no course files, no other submissions, no network, a private /tmp."""
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp",
            "--setenv", "HOME", "/tmp", "--setenv", "MPLCONFIGDIR", "/tmp"]
    for top in ("/usr", "/bin", "/lib", "/lib64", "/etc"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for prefix in sorted({sys.base_prefix, sys.prefix, os.path.realpath(sys.prefix)}):
        if not prefix.startswith("/usr/"):
            args += ["--ro-bind", prefix, prefix]
    return args + ["--ro-bind", str(SANDBOX_DIR), "/sandbox"]


def worker_command(limits):
    if limits.sandbox == "bwrap" or (limits.sandbox == "auto" and bubblewrap_works()):
        return sandbox_prefix() + [sys.executable, "-E", "-s", "-B", "/sandbox/worker.py"]
    return [sys.executable, "-E", "-s", "-B", str(SANDBOX_DIR / "worker.py")]


def _apply_limits(memory_mb):
    def apply():
        memory = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
    return apply


class StudentProcess:
    """One submission's code, running in its own process; use as a context manager."""

    def __init__(self, cells, limits=None):
        self.cells = list(cells)
        self.limits = limits or Limits()
        self.process = None
        self.cell_reports = None
        self.skip_cells = set()   # cells that hung: not run again after a restart
        self.hung = {}            # name -> message, for functions that hung once
        self.restarts = 0
        self.current = None                   # label of what is being graded (set by the suites)
        self.builtin_attention_users = set()  # labels under which torch's attention was called
        self.memo = {}                        # results the suites reuse within this submission

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    # -- process life cycle ------------------------------------------------------------------
    def _spawn(self):
        env = {"PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1",
               "PYTHONHASHSEED": "0", "HOME": "/tmp"}
        self.process = subprocess.Popen(
            worker_command(self.limits), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env, start_new_session=True,
            preexec_fn=_apply_limits(self.limits.memory_mb))

    def start(self):
        """Start the process and run the notebook's cells; returns the per-cell reports."""
        while True:
            self._spawn()
            cells = [{"label": cell.label, "source": "" if i in self.skip_cells else cell.source}
                     for i, cell in enumerate(self.cells)]
            self._send({"op": "load", "cells": cells, "cell_timeout": self.limits.cell_timeout})
            # Cells are allowed their time each, plus the start-up of Python and torch.
            deadline = time.monotonic() + 30 + self.limits.cell_timeout + 1
            current = None
            try:
                while True:
                    message = protocol.read_message(self.process.stdout.fileno(), deadline)
                    if isinstance(message, dict) and message.get("event") == "cell":
                        current = message["index"]
                        deadline = time.monotonic() + self.limits.cell_timeout + 2
                        continue
                    reply = self._unwrap(protocol.decode(message))
                    break
            except (protocol.Timeout, EOFError, protocol.ProtocolError) as problem:
                self.kill()
                if current is None or self.restarts >= self.limits.restarts:
                    raise StudentCrash(f"the notebook could not be loaded ({_describe(problem)})")
                self.restarts += 1
                self.skip_cells.add(current)
                continue
            self.cell_reports = self._reports(reply["cells"])
            # A cell that used up its time once is not run again if the process is restarted.
            self.skip_cells.update(i for i, report in enumerate(self.cell_reports)
                                   if report.status == "timeout")
            return self.cell_reports

    def _reports(self, results):
        reports = []
        for index, (cell, result) in enumerate(zip(self.cells, results)):
            if index in self.skip_cells:
                reports.append(CellReport(cell.label, "timeout", "ran out of time and was stopped"))
            else:
                reports.append(CellReport(cell.label, result["status"], result.get("message", ""),
                                          result.get("traceback", "")))
        return reports

    def kill(self):
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            stream.close()
        self.process = None

    def close(self):
        if self.process is not None and self.process.poll() is None:
            try:
                self._send({"op": "exit"})
            except OSError:
                pass
        self.kill()

    # -- requests ------------------------------------------------------------------------------
    def _send(self, message):
        protocol.write_message(self.process.stdin.fileno(), protocol.encode(message))

    @staticmethod
    def _unwrap(reply):
        if not isinstance(reply, dict) or "ok" not in reply:
            raise protocol.ProtocolError("malformed reply")
        if reply["ok"]:
            return reply["value"]
        error = reply.get("error") or {}
        if error.get("type") == "Timeout":
            raise StudentTimeout("ran out of time")
        raise StudentError(str(error.get("type", "Error")), str(error.get("message", "")),
                           str(error.get("traceback", "")))

    def request(self, key, message, timeout):
        """Send one request; `key` names what it exercises, so a hang is charged to it alone."""
        if key in self.hung:
            raise StudentTimeout(self.hung[key])
        if self.process is None:
            if self.restarts >= self.limits.restarts:
                raise StudentCrash("the notebook's process stopped too often to go on")
            self.restarts += 1
            self.start()
        self._send({**message, "timeout": timeout})
        try:
            reply = protocol.read_message(self.process.stdout.fileno(), time.monotonic() + timeout + 1)
        except protocol.Timeout:
            self.kill()
            self.hung[key] = f"{key} did not finish within {timeout:g} s (an infinite loop?)"
            raise StudentTimeout(self.hung[key]) from None
        except (EOFError, OSError):
            self.kill()
            raise StudentCrash(f"the process stopped while running {key} "
                               "(did the code call exit() or use too much memory?)") from None
        except protocol.ProtocolError as problem:
            self.kill()
            raise StudentCrash(f"{key} sent back something unreadable ({problem})") from None
        try:
            value = self._unwrap(protocol.decode(reply))
        except StudentTimeout:
            self.hung[key] = f"{key} did not finish within {timeout:g} s (an infinite loop?)"
            raise StudentTimeout(self.hung[key]) from None
        except protocol.ProtocolError as problem:
            raise StudentCrash(f"{key} sent back something unreadable ({problem})") from None
        if isinstance(value, dict) and value.get("used_builtin_attention"):
            self.builtin_attention_users.add(self.current)
        return value

    def names(self, names):
        return self.request("names", {"op": "names", "names": list(names)}, self.limits.call_timeout)

    def call(self, name, *args, grad=False, grad_outputs=(), seed=0, echo_args=False, **kwargs):
        return self.request(name, {"op": "call", "name": name, "args": list(args), "kwargs": kwargs,
                                   "grad": grad, "grad_outputs": list(grad_outputs), "seed": seed,
                                   "echo_args": echo_args},
                            self.limits.call_timeout)

    def module(self, cls, init_args=(), init_kwargs=None, *, steps=(), load=None, dtype=None,
               train=False, grad=False, grad_outputs=(), attributes=(), seed=0):
        message = {"op": "module", "cls": cls, "init_args": list(init_args),
                   "init_kwargs": dict(init_kwargs or {}), "steps": list(steps), "load": load,
                   "dtype": dtype, "train": train, "grad": grad, "grad_outputs": list(grad_outputs),
                   "attributes": list(attributes), "seed": seed}
        # A hang inside a notebook function that was handed the module is charged to that function.
        functions = [step["function"] for step in steps if step.get("function")]
        return self.request(functions[-1] if functions else cls, message, self.limits.call_timeout)


def _describe(problem):
    if isinstance(problem, protocol.Timeout):
        return "it did not finish in time"
    if isinstance(problem, EOFError):
        return "the process stopped"
    return str(problem)
