"""A class's pending tasks graded: in this process, or in one warm grading process per job (forked from
this one, which primed what grading needs), each with a sandbox taken from a SandboxPool and telling this
process what it does (Event) while it saves each result on disk."""

import enum
import logging
import multiprocessing
import os
import signal

from autograder.classrun.publish import DISK, disk_problem
from autograder.classrun.sandboxes import SandboxPool
from autograder.classrun.tasks import costliest_first
from autograder.course import CourseError
from autograder.layout import Layout
from autograder.lifetime import die_with
from autograder.render import score_text
from autograder.results import SubmissionResult, grader_failed, not_graded

log = logging.getLogger("autograder")


class Event(enum.Enum):
    """What a grading process tells the process that runs the class."""
    STARTED = "started"   # it took this task
    GRADED = "graded"     # ... and saved its result
    FAILED = "failed"     # it stopped on an error of the grader's (the class run stops)
    EXITED = "exited"     # the queue said stop: it has nothing more to do


SUBMISSIONS_PER_JOB = 8  # below this many submissions per process, starting another costs more than it saves


def effective_jobs(jobs, pending):
    return max(1, min(jobs, len(pending) // SUBMISSIONS_PER_JOB))


def default_jobs():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def start_log(path):
    """grader.log: the grader's own events with their time (each submission graded, what failed and
    why); the libraries' chatter (alembic, SQLAlchemy, traitlets) from warnings up only."""
    logging.basicConfig(filename=path, level=logging.INFO, force=True,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    for name in ("alembic", "sqlalchemy", "traitlets", "nbgrader"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # A log line that cannot be written (its disk full) is dropped, not printed with a traceback on the
    # console: the run says what failed in one line of its own (disk_problem).
    logging.raiseExceptions = False


def prime(course, assignments):
    """Import what grading needs, the suites' modules among it, run the reference solutions and
    what the suites prepare (SuiteSession.prepare) once, here, so that every grading process forked
    from this one starts with them (this process never runs student code)."""
    import torch

    from autograder.grading import open_grader  # noqa: F401  (torch, pytest, nbformat)
    from autograder.harness.plugin import with_suites
    from autograder.reference import reference_namespace
    # One thread for the tensor maths done here, as in the grading processes (open_grader): OpenMP's
    # threads do not survive a fork, and a forked process that finds their team waits on it forever.
    torch.set_num_threads(1)
    # torch.broadcast_shapes (the harness's checks.broadcasts) imports torch's symbolic shapes on its first
    # call: a second of CPU in every grading process, and in a check server's first check of each, otherwise.
    torch.broadcast_shapes((1,), (1,))
    for assignment_id in assignments:
        assignment = course.assignment(assignment_id)
        for notebook in assignment.notebooks:
            reference_namespace(course.source_notebook(assignment, notebook))
    with_suites([e for a in assignments for e in course.assignment(a).exercises], lambda suites: suites.prepare())


def grade_pending(course, layout, pending, jobs, on_done, meanwhile=lambda: None, classmates=(), pool=None):
    """Grade the pending tasks, in effective_jobs(jobs) processes, with sandboxes taken from `pool` (an
    empty one where none is given: each sandbox started here); on_done(task) after each; meanwhile()
    once the grading has started (at once where nothing is pending); classmates: every student of the class."""
    jobs = effective_jobs(jobs, pending)
    if not pending:
        meanwhile()  # nothing to grade: no grading process, no sandbox
        return
    # The sandboxes start first: each imports torch (seconds) while this process imports its own.
    pool = SandboxPool() if pool is None else pool
    assignments = sorted({task.assignment for task in pending})
    sandboxes = []
    try:
        sandboxes += [pool.take_for(course, assignments) for _ in range(jobs)]
        if jobs == 1:
            meanwhile()
            _grade_tasks(course, layout, pending, lambda event, task: event is Event.GRADED and on_done(task),
                         assignments, sandboxes[0], classmates)
        else:
            _parallel(course, layout, pending, assignments, sandboxes, on_done, meanwhile, classmates)
    finally:
        for sandbox in sandboxes:
            sandbox.stop()


def _grade_tasks(course, layout, tasks, report, assignments, started, classmates=()):
    """Grade tasks (of the given assignments) one after another in this process, with the sandbox
    `started` for it; report(event, task) after each.  classmates: every student of the class (whose
    variants an answer may match)."""
    from autograder.grading import open_grader

    def body(grader):
        for task in tasks:
            report(Event.STARTED, task)
            assignment = course.assignment(task.assignment)
            if task.problem:
                result = SubmissionResult(task.student, task.assignment,
                                          [not_graded(nb.part(task.exercises), task.problem)
                                           for nb in assignment.notebooks])
            else:
                result = grader.grade_submission(assignment, task.folder, task.student, classmates=classmates,
                                                 exercises=task.exercises)
            layout.save(result, fingerprint=task.fingerprint, folder=str(task.folder))
            log.info("graded %s/%s: %s in %.1f s%s", task.student, task.assignment, score_text(result),
                     result.seconds, f" ({result.reason})" if result.reason else "")
            report(Event.GRADED, task)
    open_grader(course, body, assignments, started)


def _grading_process(course, out, tasks, events, assignments, sandboxes, index, classmates, parent):
    """The body of one grading process (forked: it has the course the class is graded by, loaded
    once, whatever file it came from, and sandboxes[index], started for it): pull tasks until the
    queue says stop.  It ends with `parent`, the run's process (die_with), and the sandboxes it
    starts end with it."""
    die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    for other, sandbox in enumerate(sandboxes):
        if other != index:
            sandbox.release()  # another grading process's: its sandbox's worker sees its socket close with that process
    layout = Layout(out, course.visibility())
    start_log(layout.log)
    try:
        _grade_tasks(course, layout, iter(tasks.get, None), lambda event, task: events.put((event, task)),
                     assignments, sandboxes[index], classmates)
    except BaseException as error:  # noqa: B902 - reported to the main process, which decides
        events.put((Event.FAILED, disk_problem(error, layout.out) or f"{type(error).__name__}: {error}"))
        raise SystemExit(1) from None
    events.put((Event.EXITED, None))


def _parallel(course, layout, pending, assignments, sandboxes, on_done, meanwhile, classmates):
    prime(course, assignments)
    context = multiprocessing.get_context("fork")
    tasks, events = context.Queue(), context.Queue()
    for task in costliest_first(course, pending):
        tasks.put(task)
    graders = [context.Process(target=_grading_process, daemon=True,
                               args=(course, str(layout.out), tasks, events, assignments, sandboxes, index, classmates,
                                     os.getpid()))
               for index in range(len(sandboxes))]
    for grader, sandbox in zip(graders, sandboxes):
        tasks.put(None)
        grader.start()
        sandbox.release()  # the grading process holds it now: its death closes its sandbox's socket
    meanwhile()  # while the grading processes start
    running = {}   # task key -> task: the tasks in flight
    remaining = {task.key for task in pending}
    exited = 0
    try:
        while remaining and exited < len(graders):
            try:
                event, payload = events.get(timeout=5)
            except Exception:  # queue.Empty: check that the grading processes still live
                if not any(grader.is_alive() for grader in graders):
                    break
                continue
            if event is Event.STARTED:
                running[payload.key] = payload
            elif event is Event.GRADED:
                running.pop(payload.key, None)
                remaining.discard(payload.key)
                on_done(payload)
            elif event is Event.FAILED:
                raise CourseError(payload if payload.startswith(DISK) else f"a grading process failed: {payload}")
            elif event is Event.EXITED:
                exited += 1
    finally:
        for grader in graders:
            if grader.is_alive():
                grader.terminate()
            grader.join(timeout=10)
    # A grading process that died mid-submission (its memory exhausted, say) leaves that submission a
    # grader fault, which this run grades once more and every later run again.
    for task in running.values():
        if task.key in remaining:
            lost = SubmissionResult(task.student, task.assignment,
                                    [grader_failed(nb.part(task.exercises), "the grading process stopped on this "
                                                   "submission") for nb in course.assignment(task.assignment).notebooks])
            layout.save(lost, fingerprint=task.fingerprint, folder=str(task.folder))
            remaining.discard(task.key)
            on_done(task)
