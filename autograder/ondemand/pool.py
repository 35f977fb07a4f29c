"""The check server's warm grading processes, and the fair queue in front of them.

The server's process primes what grading needs once (classrun.fanout.prime: the suites, the reference
solutions), then forks grading processes as a class run does, each handed a sandbox started for it
(jail.Started).  Each one opens a grader (grading.open_grader) and grades one posted notebook at a time
through the grader's front door, Grader.grade_submission, with the student's id (their variant
numbers) and the time of the check (what the feedback policy shows): exactly what make grade runs.

Checks wait in a FairQueue: one line per student, each at most PER_STUDENT long and the whole at most
the server's `queue`; a free grading process takes the next check of the waiting student whose checks
took the fewest grading seconds in the last hour (the server's count: server.Usage), so a student
whose checks cost much waits behind those who used little, and a student's flood costs that student.
A grading process that dies, or holds a check past its assignment's time budget and a margin, is
replaced (a new sandbox, a new fork) and the check it held is answered as a fault of the grader.

The pool tells the server's count of each student's checks (server.Usage) of every check's life: start(job)
once it is queued, spend(job) once the pool lets go of it (answered, failed, replaced, or dropped from the
queue because its student left), so that a check counts from the moment it is admitted until its grading
process is free, whatever its client does.
"""

import asyncio
import collections
import logging
import multiprocessing
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from autograder.grading import open_grader
from autograder.lifetime import die_with
from autograder.results import to_record
from autograder.sandbox.jail import Started

log = logging.getLogger("autograder")

PER_STUDENT = 2        # checks one student may have waiting (check() waits for each answer)
HUNG_MARGIN = 60.0     # seconds past the assignment's time budget after which a grading process is replaced
WATCH_EVERY = 5.0      # seconds between two looks for a grading process held too long (Pool.watch)
START_WAIT = 120.0     # seconds a grading process waits for its sandbox before saying it is ready anyway


def most_seconds(assignment):
    """The most seconds a check of `assignment` can hold a grading process: its time budget, the margin after
    which the process is replaced, and the time until the watch sees it (what a check in flight is charged)."""
    return assignment.limits.time_budget + HUNG_MARGIN + WATCH_EVERY


class Full(Exception):
    """The queue cannot take this check now: one line for the student."""


class GradingFault(Exception):
    """The grading process failed on this check (it is replaced)."""


@dataclass
class Job:
    student: str
    assignment: object      # course.Assignment
    notebook: object        # course.Notebook
    data: bytes             # the notebook file as posted
    now: datetime           # the time of the check
    future: asyncio.Future = None
    queued: float = field(default_factory=time.monotonic)
    seconds: float = None   # what it took of a grading process, from its start there to its answer

    def order(self):
        return {"student": self.student, "assignment": self.assignment.id, "notebook": self.notebook.name,
                "data": self.data, "now": self.now}


class FairQueue:
    """Checks waiting, in one line per student; take() serves first the student with the fewest grading seconds
    `spent` (student -> seconds of the last hour), then the fewest checks now grading, then the longest waiting."""

    def __init__(self, capacity, spent=lambda student: 0.0):
        self.capacity, self.spent = capacity, spent
        self.lines = {}   # student -> deque of Jobs, oldest first
        self.grading = collections.Counter()   # student -> their checks taken and not yet finished

    def __len__(self):
        return sum(len(line) for line in self.lines.values())

    def put(self, job):
        if len(self.lines.get(job.student, ())) >= PER_STUDENT:
            raise Full(f"you have {PER_STUDENT} checks waiting already; wait for their answers")
        if len(self) >= self.capacity:
            raise Full("the check server is busy with other students' checks")
        self.lines.setdefault(job.student, collections.deque()).append(job)

    def take(self):
        student = min(self.lines, key=lambda one: (self.spent(one), self.grading[one], self.lines[one][0].queued))
        job = self.lines[student].popleft()
        if not self.lines[student]:
            del self.lines[student]
        self.grading[student] += 1
        return job

    def remove(self, job):
        """Take a waiting check out of its line (its client left); False where it is not waiting."""
        line = self.lines.get(job.student)
        if line is None or job not in line:
            return False
        line.remove(job)
        if not line:
            del self.lines[job.student]
        return True

    def finished(self, job):
        """A check taken from the queue left its grading process (answered, failed, or its client gone)."""
        self.grading[job.student] -= 1
        if self.grading[job.student] <= 0:
            del self.grading[job.student]


def grade_posted(grader, course, order):
    """One posted notebook graded through the front door, in a folder of its own; its record (to_record)."""
    assignment = course.assignment(order["assignment"])
    notebook = next(nb for nb in assignment.notebooks if nb.name == order["notebook"])
    with tempfile.TemporaryDirectory(prefix="check-") as folder:
        path = Path(folder) / notebook.filename
        path.write_bytes(order["data"])
        result = grader.grade_submission(assignment, folder, order["student"], notebooks={notebook.name: path},
                                         exercises=tuple(exercise.id for exercise in notebook.exercises),
                                         now=order["now"])
    return to_record(result)


def _grading_process(course, assignments, sandbox, connection, others, parent):
    """The body of one grading process: grade what comes on `connection` until it closes.  It dies
    with `parent`, the server's process (lifetime.die_with, as a class run's grading processes do)."""
    signal.set_wakeup_fd(-1)   # the server's event loop's: a signal here must not reach it
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the server's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with(parent)
    for other in others:
        other.close()   # the other processes' pipes: theirs see an end when they end

    def body(grader):
        deadline = time.monotonic() + START_WAIT
        while not grader.worker.sandbox.ready() and time.monotonic() < deadline:
            time.sleep(0.05)   # ready once its sandbox has imported torch: a first check does not wait for it
        connection.send(("ready", None))
        while True:
            try:
                order = connection.recv()
            except EOFError:
                return
            try:
                connection.send(("graded", grade_posted(grader, course, order)))
            except Exception as error:   # the grader's fault: this check is answered 500, the next is graded
                log.exception("check of %s/%s failed", order.get("student"), order.get("notebook"))
                connection.send(("failed", f"{type(error).__name__}: {error}"))
    open_grader(course, body, assignments, sandbox)


@dataclass
class Slot:
    process: multiprocessing.Process
    connection: object
    sandbox: Started
    ready: bool = False
    job: Job = None
    since: float = 0.0


class Pool:
    """`jobs` grading processes for the given assignments and the queue in front of them; use within a
    running asyncio loop (tornado's): submit() returns a future of the graded record."""

    def __init__(self, course, assignments, jobs, capacity, usage):
        self.course, self.assignments, self.jobs = course, list(assignments), jobs
        chosen = [course.assignment(assignment) for assignment in self.assignments]
        self.warm, self.kernel_kind = course.uses_dynamo(*chosen), course.kernel_kind(*chosen)
        self.usage = usage   # server.Usage: spent(student), start(job) as a check is queued, spend(job) as it ends
        self.queue = FairQueue(capacity, usage.spent)
        self.context = multiprocessing.get_context("fork")
        self.slots = []
        self.seconds = collections.deque(maxlen=20)   # the last checks' grading seconds (for Retry-After)
        self.all_ready = asyncio.Event()   # every grading process has said it is ready, once

    def start(self):
        for _ in range(self.jobs):
            self.slots.append(self._spawn())

    def _spawn(self):
        sandbox = Started(self.course.limits.sandboxed, self.warm, self.kernel_kind)
        ours, theirs = self.context.Pipe()
        process = self.context.Process(target=_grading_process, daemon=True,
                                       args=(self.course, self.assignments, sandbox, theirs,
                                             [slot.connection for slot in self.slots], os.getpid()))
        process.start()
        sandbox.release()   # the grading process holds it now
        theirs.close()
        slot = Slot(process, ours, sandbox)
        asyncio.get_running_loop().add_reader(ours.fileno(), self._readable, slot)
        return slot

    def submit(self, job):
        job.future = asyncio.get_running_loop().create_future()
        self.queue.put(job)   # Full goes to the caller
        self.usage.start(job)
        self._dispatch()
        return job.future

    def withdraw(self, job):
        """A check whose client left: out of the queue at once where it waits (it took no seconds), its answer
        no longer awaited where it grades (its grading process goes on, and its seconds count)."""
        if job.future is None or job.future.done():
            return
        job.future.cancel()
        if self.queue.remove(job):
            job.seconds = 0.0
            self.usage.spend(job)

    def retry_after(self):
        """Seconds after which a refused check may find room: a check's grading time over the grading processes
        (a full queue has room once the next check is taken from it)."""
        typical = sum(self.seconds) / len(self.seconds) if self.seconds else 5.0
        return max(1, round(typical / max(1, self.jobs)))

    def _dispatch(self):
        for slot in list(self.slots):
            while slot.ready and slot.job is None and self.queue.lines:
                job = self.queue.take()
                if job.future.done():   # answered already: nothing waits for it
                    self.queue.finished(job)
                    job.seconds = 0.0
                    self.usage.spend(job)
                    continue
                slot.job, slot.since = job, time.monotonic()
                try:
                    slot.connection.send(job.order())
                except OSError:
                    self._replace(slot, "its grading process could not be reached")

    def _readable(self, slot):
        try:
            kind, payload = slot.connection.recv()
        except (EOFError, OSError, ValueError):
            self._replace(slot, "its grading process stopped")
            return
        if kind == "ready":
            slot.ready = True
            if all(other.ready for other in self.slots) and len(self.slots) == self.jobs:
                self.all_ready.set()
        elif slot.job is not None:
            job = self._finish(slot)
            self.seconds.append(job.seconds)
            if not job.future.done():
                if kind == "graded":
                    job.future.set_result(payload)
                else:
                    job.future.set_exception(GradingFault(payload))
        self._dispatch()

    def watch(self):
        """Replace a grading process that holds a check past its time budget and a margin (called now and then)."""
        for slot in list(self.slots):
            if slot.job is not None and time.monotonic() - slot.since > most_seconds(slot.job.assignment) - WATCH_EVERY:
                self._replace(slot, "its grading process did not answer in time")

    def _finish(self, slot):
        """The check `slot` held, its grading seconds counted, and the slot free."""
        job, slot.job = slot.job, None
        job.seconds = time.monotonic() - slot.since
        self.queue.finished(job)
        self.usage.spend(job)   # whether answered or not, and whether its client waited or left
        return job

    def _replace(self, slot, why):
        log.error("check server: %s; starting another", why)
        self._stop(slot)
        if slot.job is not None:
            job = self._finish(slot)
            if not job.future.done():
                job.future.set_exception(GradingFault(why))
        self.slots[self.slots.index(slot)] = self._spawn()
        self._dispatch()

    def _stop(self, slot):
        asyncio.get_running_loop().remove_reader(slot.connection.fileno())
        slot.connection.close()
        if slot.process.is_alive():
            slot.process.kill()
        slot.process.join(timeout=10)
        slot.sandbox.stop()

    def close(self):
        for slot in self.slots:
            self._stop(slot)
        self.slots = []
        for job in (job for line in self.queue.lines.values() for job in line):
            if not job.future.done():   # the server stops: nothing is counted any more
                job.future.set_exception(GradingFault("the check server stopped"))
