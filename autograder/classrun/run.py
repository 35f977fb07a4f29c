"""Grade a whole class in nbgrader's layout: <submitted>/<student>/<assignment>/<notebook>.ipynb.

    find_submissions -> select (students, assignments, shard, what changed) -> grade in parallel
    (one warm grading process per job, results on disk as each submission is done) -> publish
    (grades.csv, the wide export and nbgrader's gradebook, always for every graded submission)

A submission whose notebooks, hidden suites, reference solutions, grader and course.yml are
unchanged since it was graded is not graded again unless forced; so after a crash or Ctrl-C the
same command grades only what is missing.  A submission the grader failed on (a fault, results.py)
is not done: a run grades it once more before it ends, and the next run grades it again.  A fault
that comes back with the same reason on unchanged work in the next run is set aside for the
instructor (`set_aside`): not graded again until the work changes or the run is forced, and said so.

One run owns an output folder at a time (`owning`: a lock with its pid), and nothing of a run outlives
it: its grading processes get SIGKILL when the process that runs the class dies (PR_SET_PDEATHSIG),
and each sandbox dies with the process that started it (bwrap's --die-with-parent).  So a run killed
at any moment leaves records, each whole, and the next run grades the rest, records in the gradebook
what the killed run saved but did not record (`is_recorded`), and publishes as a clean run would.
"""

import difflib
import enum
import errno
import fcntl
import fnmatch
import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from autograder.course import CourseError
from autograder.intake import SubmissionError, printable, submission_folders
from autograder.layout import Layout
from autograder.lifetime import die_with
from autograder.files import write_atomic, write_csv
from autograder.render import read_grades_csv, score_text, write_grades_csv
from autograder.results import NOT_SUBMITTED, SubmissionResult, from_record, grader_failed, not_graded
from autograder.submission import digest_files  # a fingerprint reads what the grader reads
from autograder.variants import Variants, has_variants

log = logging.getLogger("autograder")


class Event(enum.Enum):
    """What a grading process tells the process that runs the class."""
    STARTED = "started"   # it took this task
    GRADED = "graded"     # ... and saved its result
    FAILED = "failed"     # it stopped on an error of the grader's (the class run stops)
    EXITED = "exited"     # the queue said stop: it has nothing more to do


@dataclass(frozen=True)
class Task:
    student: str
    assignment: str
    folder: str
    fingerprint: str = ""
    problem: str = ""      # why the folder is not graded at all (a link, an odd name), or ""
    missing: bool = False  # the student handed in nothing for this assignment (others of the class did)
    exercises: tuple = ()  # the only exercises to grade (grade-class --exercise: an author's check), or () for all

    @property
    def key(self):
        return f"{self.student}/{self.assignment}"

    @property
    def handed_in(self):
        """Whether there is a submission folder to grade (not an assignment the student never handed in)."""
        return not self.missing and Path(self.folder).is_dir()


@dataclass(frozen=True)
class Stray:
    """Something under submitted/ that is no submission: shown at the end of the run."""
    path: str
    reason: str


def find_submissions(course, submitted, assignment_ids=None):
    """([(student, assignment, folder, problem, missing)], [Stray]) for the class under `submitted`, sorted.

    `problem` is "" for a folder to grade, or why it cannot be graded (a link, an odd name): such a
    submission gets a row with score 0 and the reason.  A student who handed in some assignments
    gets a row for each other one that the class handed in, saying it was not submitted (`missing`)."""
    known = {assignment.id for assignment in course.assignments}
    found, strays, misnamed = [], [], {}
    try:
        folders = submission_folders(submitted)
    except SubmissionError as error:
        raise CourseError(str(error)) from None
    for student, name, folder, problem in folders:
        where = f"{printable(student)}/{printable(name)}" if name else printable(student)
        if not name or (problem and name not in known):
            strays.append(Stray(where, problem))
        elif name not in known:
            guess = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.5)
            reason = "no such assignment in course.yml" + (f"; did you mean {guess[0]}?" if guess else "")
            strays.append(Stray(where, reason))
            misnamed.setdefault(student, []).append(f"{where} ({reason})")
        elif not assignment_ids or name in assignment_ids:
            found.append((student, course.assignment(name), folder, problem, False))
    students = sorted({entry[0] for entry in found} | set(misnamed))
    assignments = {entry[1].id: entry[1] for entry in found}
    if not assignments and misnamed:
        assignments = {a.id: a for a in course.assignments if not assignment_ids or a.id in assignment_ids}
    present = {(entry[0], entry[1].id) for entry in found}
    for student in students:
        for assignment_id, assignment in assignments.items():
            if (student, assignment_id) not in present:
                note = "; ".join(misnamed.get(student, []))
                found.append((student, assignment, Path(submitted) / student / assignment_id,
                              f"{NOT_SUBMITTED}; found {note} instead" if note else "", True))
    return sorted(found, key=lambda entry: (entry[0], entry[1].id)), strays


def in_shard(task, shard):
    """shard = (k, n), 1-based: a deterministic 1/n of the submissions, by a hash of their key."""
    if shard is None:
        return True
    k, n = shard
    return int(hashlib.sha256(task.key.encode()).hexdigest(), 16) % n == k - 1


def _hash_files(digest, paths):
    for path in paths:
        digest.update(str(path).encode())
        try:
            digest.update(Path(path).read_bytes())
        except OSError:
            digest.update(b"<missing>")


def grading_files(course, assignments):
    """The files grading the assignments reads besides the submissions: the grader's code (the suites
    among it), course.yml, and each notebook's solution and release."""
    package = Path(__file__).resolve().parent
    files = sorted(package.rglob("*.py")) + [course.root / "course.yml"]
    for assignment in assignments:
        for notebook in assignment.notebooks:
            files += [course.source_notebook(assignment, notebook), course.release_notebook(assignment, notebook)]
    return files


def course_fingerprint(course, assignment):
    """What grading an assignment depends on, besides the submission itself."""
    digest = hashlib.sha256()
    _hash_files(digest, grading_files(course, [assignment]))
    if has_variants(assignment):   # a new secret gives every student new numbers: all is graded again
        digest.update(hashlib.sha256(Variants.of(course).key(assignment.id)).digest())
    return digest.hexdigest()


def fingerprint(course_part, assignment, folder, problem=""):
    """What a submission's grade depends on: the course's part, and its files as the grader reads them."""
    digest = hashlib.sha256(course_part.encode() + problem.encode())
    if not problem:
        digest_files(digest, folder, [notebook.filename for notebook in assignment.notebooks] + ["timestamp.txt"])
    return digest.hexdigest()[:32]


def class_students(course, submitted):
    """Every student of the class under `submitted`, whatever they handed in."""
    return tuple(sorted({student for student, *_ in find_submissions(course, submitted)[0]}))


def select_tasks(course, submitted, layout, *, assignments=None, students=None, shard=None, force=False,
                 exercises=()):
    """All tasks selected by the filters, those among them that need grading, and the strays.
    exercises: the only exercises to grade, or () for all (a part grades again as a whole, and back)."""
    parts = {}
    tasks = []
    found, strays = find_submissions(course, submitted, assignments)
    for student, assignment, folder, problem, missing in found:
        if students and not any(fnmatch.fnmatchcase(student, pattern) for pattern in students):
            continue
        if assignment.id not in parts:
            parts[assignment.id] = course_fingerprint(course, assignment) + " ".join(sorted(exercises))
        task = Task(student, assignment.id, str(folder),
                    fingerprint(parts[assignment.id], assignment, folder, problem), problem, missing, tuple(exercises))
        if in_shard(task, shard):
            tasks.append(task)
    pending = [task for task in tasks if force or not done(layout, task)]
    return tasks, pending, strays


def done(layout, task):
    """Whether the task's stored record stands: graded as the task is now, and not a grader fault
    (unless set aside: the same fault on this work in two runs)."""
    record = layout.read_record(task.student, task.assignment)
    return (record is not None and record.get("fingerprint") == task.fingerprint
            and (bool(record.get("set_aside")) or not faulted(layout, task)))


SET_ASIDE = (" (set aside: the same fault on unchanged work in two runs; not graded again until the work "
             "changes, or make grade FORCE=1 / --force)")


def fault_on_this_work(layout, task):
    """The grader fault the stored record holds for the task's work as it is now (its fingerprint), or ""."""
    record = layout.read_record(task.student, task.assignment)
    if record is None or record.get("fingerprint") != task.fingerprint:
        return ""
    try:
        return record.get("set_aside") or from_record(record).fault
    except (KeyError, TypeError, ValueError, AttributeError):
        return ""


def set_aside(layout, task):
    """Mark the task's fault set aside for the instructor: its record stands (done) and its reason says so
    (grades.csv, the console), until the work changes or a forced run grades it again."""
    record = layout.read_record(task.student, task.assignment)
    result = from_record(record)
    fault = result.fault
    for notebook in result.notebooks:
        if notebook.fault:
            notebook.fault += SET_ASIDE
    layout.save(result, fingerprint=record["fingerprint"], folder=record.get("folder", task.folder), set_aside=fault)


def set_aside_tasks(layout, tasks):
    """The tasks whose stored fault is set aside for the instructor."""
    return [task for task in tasks if fault_on_this_work(layout, task)
            and (layout.read_record(task.student, task.assignment) or {}).get("set_aside")]


# -- grading: in this process, or one warm grading process per job ----------------------------

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
    for assignment_id in assignments:
        assignment = course.assignment(assignment_id)
        for notebook in assignment.notebooks:
            reference_namespace(course.source_notebook(assignment, notebook))
    with_suites([e for a in assignments for e in course.assignment(a).exercises], lambda suites: suites.prepare())


def costliest_first(course, tasks):
    """The tasks in the order the grading processes take them: the submissions of the assignments whose
    checks cost most first (kernels run in Triton's interpreter, then measured tests, then exercises),
    so that a run ends on short submissions and its grading processes finish together."""
    def cost(task):
        assignment = course.assignment(task.assignment)
        return (bool(assignment.kernels), sum(len(exercise.measured) for exercise in assignment.exercises),
                len(assignment.exercises))
    return sorted(tasks, key=cost, reverse=True)   # stable: in the order given within an assignment


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


SUBMISSIONS_PER_JOB = 8  # below this many submissions per process, starting another costs more than it saves


def effective_jobs(jobs, pending):
    return max(1, min(jobs, len(pending) // SUBMISSIONS_PER_JOB))


def faulted(layout, task):
    """Whether the task's stored record is a grader fault (a record that cannot be read counts as one)."""
    record = layout.read_record(task.student, task.assignment)
    try:
        return record is not None and from_record(record).faulted
    except (KeyError, TypeError, ValueError, AttributeError):
        return True


def run(course, layout, pending, jobs, on_done, meanwhile=lambda: None, classmates=()):
    """Grade the pending tasks, and once more those the grader failed on (in sandboxes started afresh);
    on_done(task) after each; meanwhile() once the grading has started; classmates: every student of
    the class.  A fault that an earlier run left on the same work, with the same reason, is set aside
    instead of graded once more."""
    earlier = {task.key: fault_on_this_work(layout, task) for task in pending}
    _run(course, layout, pending, jobs, on_done, meanwhile, classmates)
    repeated = {task.key for task in pending if earlier[task.key] and fault_on_this_work(layout, task) == earlier[task.key]}
    for task in pending:
        if task.key in repeated:
            log.warning("set aside %s: the same grader fault as the last run on unchanged work", task.key)
            set_aside(layout, task)
    again = [task for task in pending if task.key not in repeated and faulted(layout, task)]
    if again:
        log.warning("grading again what the grader failed on: %s", ", ".join(task.key for task in again))
        _run(course, layout, again, jobs, on_done, classmates=classmates)


def _run(course, layout, pending, jobs, on_done, meanwhile=lambda: None, classmates=()):
    jobs = effective_jobs(jobs, pending)
    if not pending:
        meanwhile()  # nothing to grade: no grading process, no sandbox
        return
    # The sandboxes start first: each imports torch (seconds) while this process imports its own.
    from autograder.sandbox.jail import Started
    assignments = sorted({task.assignment for task in pending})
    graded = [course.assignment(assignment) for assignment in assignments]
    warm, kernels = course.uses_compiler_stack(*graded), course.kernel_kind(*graded)
    sandboxes = []
    try:
        sandboxes += [Started.take(course.limits.sandboxed, warm, kernels) for _ in range(jobs)]
        if jobs == 1:
            meanwhile()
            _grade_tasks(course, layout, pending, lambda event, task: event is Event.GRADED and on_done(task),
                         assignments, sandboxes[0], classmates)
        else:
            _parallel(course, layout, pending, assignments, sandboxes, on_done, meanwhile, classmates)
    finally:
        for sandbox in sandboxes:
            sandbox.stop()


# -- a class, from the folder to the published grades: what grade-class (and each shard) runs ------

@dataclass
class ClassRun:
    """One grading of a class: what was chosen, what it gave.  grade-class prints it."""
    layout: Layout
    tasks: list                 # every submission chosen (students x assignments, in this shard)
    pending: list               # those that need grading (new or changed, or all with force)
    strays: list                # what under submitted/ is no <student>/<assignment>/ folder
    shard: tuple = None
    classmates: tuple = ()      # every student of the class, whatever the filters and the shard
    before: dict = None         # the scores before this run, by (student, assignment)
    exercises: tuple = ()       # the only exercises graded (an author's check: no gradebook), or () for all
    results: list = None        # every graded submission in the output folder, after the run
    interrupted: bool = False
    lock: object = None         # the open lock file while this run owns the output folder (owning)

    @property
    def to_grade(self):
        return [task for task in self.pending if task.handed_in]

    @property
    def unchanged(self):
        return sum(1 for task in self.tasks if task.handed_in) - len(self.to_grade)

    @property
    def set_aside(self):
        """The submissions whose grader fault is set aside for the instructor (set_aside)."""
        return set_aside_tasks(self.layout, self.tasks)

    @property
    def graded(self):
        """The results of this run's submissions (the output folder may hold others)."""
        chosen = {(task.student, task.assignment) for task in self.tasks}
        return [result for result in self.results or [] if (result.student, result.assignment) in chosen]


def check_selection(course, submitted, assignments=None, exercises=()):
    """The submissions folder as a Path; CourseError when it is missing or an assignment or exercise id
    is unknown (an unknown id is an error, not an empty run)."""
    submitted = Path(submitted)
    if not submitted.is_dir():
        raise CourseError(f"no submissions folder at {submitted}")
    for assignment in assignments or []:
        course.assignment(assignment)
    known = {exercise.id for assignment in course.assignments for exercise in assignment.exercises
             if not assignments or assignment.id in assignments}
    for exercise in exercises:
        if exercise not in known:
            raise CourseError(f"no exercise {exercise!r} in {', '.join(assignments) if assignments else 'the course'}")
    return submitted


def prepare_class(course, submitted, out, *, assignments=None, students=None, shard=None, force=False,
                  exercises=()):
    """The ClassRun of a class before grading: its output folder made, the submissions chosen (of
    them, only `exercises` when given).  A shard that holds none of the class's submissions is marked
    finished here (nothing to do: a ClassRun without tasks); CourseError when nothing at all is found."""
    exercises = tuple(exercises or ())
    submitted = check_selection(course, submitted, assignments, exercises)
    layout = Layout(out, course.visibility())
    lock = owning(layout)
    if shard:
        layout.shard_manifest.unlink(missing_ok=True)  # written again when this run has graded all of its shard
    tasks, pending, strays = select_tasks(course, submitted, layout, assignments=assignments, students=students,
                                          shard=shard, force=force, exercises=exercises)
    if shard and tasks:   # what the shard holds, for a merge run without it (merge: each is a fault)
        write_atomic(layout.shard_plan, json.dumps({"shard": list(shard), "submissions": [t.key for t in tasks]}))
    if not tasks and shard and find_submissions(course, submitted, assignments)[0]:
        layout.results.mkdir(parents=True, exist_ok=True)
        layout.finish_shard(shard, [])
    elif not tasks:
        raise CourseError(f"no submissions found under {submitted}/<student>/<assignment>/"
                          + (" for the given --student/--assignment/--shard" if students or assignments or shard
                             else ""))
    return ClassRun(layout, tasks, pending, strays, shard=shard, classmates=class_students(course, submitted),
                    before=previous_scores(layout), exercises=exercises, lock=lock)


def owning(layout):
    """Make the output folder and hold it for this run: an exclusive lock (flock) on its grading.lock,
    which names this process's pid; the open file, released when it is closed or this process and the
    grading processes it forked are gone, however they end.  CourseError, naming the owner, when
    another run holds it."""
    layout.out.mkdir(parents=True, exist_ok=True)
    handle = open(layout.lock, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "unknown"
        handle.close()
        raise CourseError(f"another grading run (pid {owner}) is grading into {layout.out}: wait for it to end, "
                          f"or stop it (kill {owner}) and run this again") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


# -- the gradebook holds what each record says: recorded.json beside grade.json says which version

def _record_digest(layout, student, assignment):
    try:
        return hashlib.sha256(layout.record_path(student, assignment).read_bytes()).hexdigest()
    except OSError:
        return None


def mark_recorded(layout, student, assignment, db_url):
    write_atomic(layout.recorded(student, assignment),
                 json.dumps({"db": db_url, "record": _record_digest(layout, student, assignment)}))


def is_recorded(layout, student, assignment, db_url):
    """Whether `db_url`'s gradebook holds the submission's grade.json as it is now."""
    try:
        marker = json.loads(layout.recorded(student, assignment).read_text())
    except (OSError, ValueError):
        return False
    return marker == {"db": db_url, "record": _record_digest(layout, student, assignment)}


DISK = "cannot write to"   # how disk_problem's line starts


def disk_problem(error, out):
    """One line for an output folder that cannot take more (its disk or quota full), else None."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"{DISK} {out}: {os.strerror(error.errno)}. What was saved before is kept whole and nothing was "
                "scored for it: free space there and run the same command again")
    return None


def grade_class(course, chosen, db_url, autograded, jobs, update):
    """Grade what `chosen` (a ClassRun) holds pending, record each submission in nbgrader's gradebook as it is done,
    publish grades.csv and the wide export, and mark a shard finished; update(task, result) after
    each.  Ctrl-C stops it with what was graded saved (chosen.interrupted).  A run of chosen exercises
    (an author's check) records nothing in the gradebook: its scores are parts of submissions."""
    recorder = None
    db_url = None if chosen.exercises else db_url

    def prepare():  # once the sandboxes are starting: nbgrader's import and the gradebook's tables
        nonlocal recorder
        if db_url is None:
            return
        from autograder import gradebook
        gradebook.prepare(db_url, course, {task.assignment for task in chosen.tasks}, only_new=True)
        recorder = gradebook.Recorder(db_url, course, autograded)
        pending = {task.key for task in chosen.pending}
        for task in chosen.tasks:   # what an earlier run saved and was stopped before it recorded
            if task.key not in pending and not is_recorded(chosen.layout, task.student, task.assignment, db_url):
                record(task)

    def record(task):
        result = chosen.layout.graded_one(task.student, task.assignment)
        try:
            if recorder is not None and result is not None:
                recorder.record(result, task.folder)
                mark_recorded(chosen.layout, task.student, task.assignment, db_url)
        except Exception:  # the grade is on disk; the next run records it
            log.exception("could not record %s in the gradebook", task.key)
            print(f"warning: {task.key} is graded but not in the gradebook (see {chosen.layout.log})", file=sys.stderr)
        return result

    def on_done(task):
        update(task, record(task))
    try:
        try:
            run(course, chosen.layout, chosen.pending, jobs, on_done, prepare, chosen.classmates)
        except KeyboardInterrupt:
            chosen.interrupted = True
        finally:
            update.close()
            if recorder is not None:
                recorder.close()
            chosen.results = publish(course, chosen.layout, db_url)
    except OSError as error:
        problem = disk_problem(error, chosen.layout.out)
        if problem is None:
            raise
        raise CourseError(problem) from None
    finally:
        if chosen.lock is not None:
            chosen.lock.close()
    recorded = {(result.student, result.assignment) for result in chosen.results}
    if chosen.shard and not chosen.interrupted and all((t.student, t.assignment) in recorded for t in chosen.tasks):
        chosen.layout.finish_shard(chosen.shard, [task.key for task in chosen.tasks])
    return chosen


# -- publishing: everything below is made from the records on disk ----------------------------

def wide_rows(course, results):
    """One row per student: a column per assignment (late penalties applied), total and percentage."""
    assignments = [a for a in course.assignments if any(r.assignment == a.id for r in results)]
    scores = {(r.student, r.assignment): None if r.faulted else r.final_score for r in results}
    possible = sum(a.max_score for a in assignments)
    rows = []
    for student in sorted({r.student for r in results}):
        row = {"student": student}
        mine = [scores.get((student, assignment.id), 0.0) for assignment in assignments]
        for assignment, score in zip(assignments, mine):
            row[assignment.id] = "" if score is None else f"{score:g}"   # a grader fault: no score yet
        total = None if None in mine else sum(mine)
        row["total"] = "" if total is None else f"{total:g}"
        row["max_total"] = f"{possible:g}"
        row["percent"] = "" if total is None else f"{100 * total / possible:.1f}" if possible else "0.0"
        rows.append(row)
    return rows, ["student", *[a.id for a in assignments], "total", "max_total", "percent"]


def publish(course, layout, db_url=None):
    """grades.csv and grades_wide.csv for every graded submission in `layout`, with the manual
    scores and late penalties of nbgrader's gradebook when given; the feedback of a submission
    graded by hand says so."""
    results = layout.graded()
    if db_url:
        from autograder.gradebook import apply_manual_grading
        apply_manual_grading(db_url, results, course, layout)   # a manual score of changed work is held
        for result in results:
            if result.manual:
                layout.save_feedback(result)
    write_grades_csv(results, layout.grades_csv)
    rows, fields = wide_rows(course, results)
    write_csv(layout.wide_csv, fields, rows)
    return results


def started_shard(shard):
    """(k, n, submissions) of a --shard run that started but did not finish (its job failed, was
    cancelled, lost its node), from its shard-plan.json; None where there is none."""
    try:
        plan = json.loads(shard.shard_plan.read_text())
        k, n = plan["shard"]
        return int(k), int(n), [str(key) for key in plan["submissions"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_shards(shards):
    """({submission key: the shard Layout that holds it}, the shards that did not finish) for the output
    folders of one --shard K/N run, all N of them, each finished or at least started (a shard whose
    job failed); CourseError with a one-line reason otherwise (a folder that is no shard, shards of
    different runs, a shard missing or given twice, a submission in two)."""
    found, unfinished = {}, []
    for shard in shards:
        finished = shard.finished_shard() or started_shard(shard)
        if finished is None:
            raise CourseError(f"{shard.out} is not a finished shard (no {shard.shard_manifest.name}): run its "
                              "grade-class --shard K/N again (it grades only what is missing)")
        k, n, keys = finished
        if shard.finished_shard() is None:
            unfinished.append(shard)
            keys = list(keys)
        unrecorded = [key for key in keys if shard.read_record(*key.split("/", 1)) is None]
        if unrecorded and shard not in unfinished:
            raise CourseError(f"{shard.out}: shard {k}/{n} lists {unrecorded[0]} but holds no grade for it; "
                              "run its grade-class --shard again")
        if (k, n) in found:
            raise CourseError(f"shard {k}/{n} given twice ({found[k, n][0].out} and {shard.out})")
        found[k, n] = (shard, keys)
    splits = sorted({n for _, n in found})
    if len(splits) != 1:
        raise CourseError(f"the folders hold shards of different splits ({', '.join(f'{k}/{n}' for k, n in sorted(found))}): "
                          "merge the shards of one run")
    n = splits[0]
    absent = [str(k) for k in range(1, n + 1) if (k, n) not in found]
    if absent:
        raise CourseError(f"shard{'s' if len(absent) > 1 else ''} {', '.join(absent)} of {n} missing: "
                          f"merge all {n} shards of the run")
    owner = {}
    for shard, keys in found.values():
        for key in keys:
            if key in owner:
                raise CourseError(f"{key} is in two shards ({owner[key].out} and {shard.out}): merge the shards of one run")
            owner[key] = shard
    return owner, unfinished


def merge(course, folders, out, db_url, autograded):
    """The output folders of one grade-class --shard K/N run (all N) combined into `out`: each
    submission's results and feedback, the gradebook, grades.csv and the wide export, as one run of
    the whole class writes them.  Refused, with the reason, unless check_shards accepts the folders.
    A shard that did not finish gives what it graded; each of its other submissions is a grader
    fault (no score: the same grade-slurm run again grades it).  Returns (results, the shards that
    did not finish)."""
    from autograder import gradebook

    owner, unfinished = check_shards([Layout(folder) for folder in folders])
    layout = Layout(out, course.visibility())
    for key, shard in owner.items():
        for tree in (shard.results, shard.feedback_root):
            if (tree / key).is_dir():
                shutil.copytree(tree / key, layout.out / tree.name / key, dirs_exist_ok=True)
        student, assignment = key.split("/", 1)
        if shard in unfinished and shard.read_record(student, assignment) is None:
            why = f"its shard ({shard.out}) did not finish: run the same grading again"
            layout.save(SubmissionResult(student, assignment, [grader_failed(nb, why) for nb in
                                                               course.assignment(assignment).notebooks]))
    results = [result for result in layout.graded() if f"{result.student}/{result.assignment}" in owner]
    gradebook.prepare(db_url, course, {result.assignment for result in results})
    recorder = gradebook.Recorder(db_url, course, autograded)
    try:
        for result in results:
            folder = (layout.read_record(result.student, result.assignment) or {}).get("folder", "")
            recorder.record(result, folder or "/nonexistent")
            mark_recorded(layout, result.student, result.assignment, db_url)
    finally:
        recorder.close()
    return publish(course, layout, db_url), unfinished


def previous_scores(layout):
    """(student, assignment) -> final score, as the last grades.csv gave them (None for a grader fault)."""
    try:
        return {(row["student"], row["assignment"]): float(row["final_score"]) if row["final_score"] else None
                for row in read_grades_csv(layout.grades_csv)}
    except (OSError, ValueError):
        return {}


def default_jobs():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
