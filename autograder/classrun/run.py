"""A class, from the submissions folder to the published grades: what grade-class (and each shard) runs.

    prepare_class (the output folder owned, the tasks chosen) -> grade_class (run: the pending tasks
    graded, and once more those the grader failed on; each recorded in nbgrader's gradebook as it is
    done) -> publish (grades.csv, the wide export), a shard marked finished"""

import fcntl
import json
import logging
import os
import sys
from dataclasses import dataclass

from autograder.classrun import fanout
from autograder.classrun.publish import disk_problem, is_recorded, mark_recorded, previous_scores, publish
from autograder.classrun.tasks import (check_selection, class_students, fault_on_this_work, faulted, find_submissions,
                                       read_class, select_tasks, set_aside, set_aside_tasks)
from autograder.course import CourseError
from autograder.files import write_atomic
from autograder.layout import Layout

log = logging.getLogger("autograder")


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
        """The submissions whose grader fault is set aside for the instructor (tasks.set_aside)."""
        return set_aside_tasks(self.layout, self.tasks)

    @property
    def graded(self):
        """The results of this run's submissions (the output folder may hold others)."""
        chosen = {(task.student, task.assignment) for task in self.tasks}
        return [result for result in self.results or [] if (result.student, result.assignment) in chosen]


def check_exercises(course, exercises, out, db_url):
    """CourseError where a run of chosen exercises (an author's check, as make check runs) would grade into
    the class's folder (`out` None: the default one) or name a gradebook other than the course's: its
    scores are parts of submissions, and it records nothing in a gradebook."""
    if exercises and out is None:
        raise CourseError("--exercise grades part of each submission (an author's check, as make check runs): "
                          "give it an --out folder of its own, not the class's grading folder")
    if exercises and db_url != course.gradebook_url:
        raise CourseError("--exercise records nothing in a gradebook (its scores are parts of submissions): "
                          "leave --db out")


def prepare_class(course, submitted, out, *, assignments=None, students=None, shard=None, force=False,
                  exercises=()):
    """The ClassRun of a class before grading: its output folder made, the submissions chosen (of
    them, only `exercises` when given).  A shard that holds none of the class's submissions is marked
    finished here (nothing to do: a ClassRun without tasks); CourseError when nothing at all is found.
    The submissions folder is read once."""
    exercises = tuple(exercises or ())
    submitted = check_selection(course, submitted, assignments, exercises)
    layout = Layout(out, course.visibility())
    lock = owning(layout)
    if shard:
        layout.shard_manifest.unlink(missing_ok=True)  # written again when this run has graded all of its shard
    folders = read_class(submitted)
    tasks, pending, strays = select_tasks(course, submitted, layout, assignments=assignments, students=students,
                                          shard=shard, force=force, exercises=exercises, folders=folders)
    if shard and tasks:   # what the shard holds, for a merge run without it (merge: each is a fault)
        write_atomic(layout.shard_plan, json.dumps({"shard": list(shard), "submissions": [t.key for t in tasks]}))
    if not tasks and shard and find_submissions(course, submitted, assignments, folders)[0]:
        layout.results.mkdir(parents=True, exist_ok=True)
        layout.finish_shard(shard, [])
    elif not tasks:
        raise CourseError(f"no submissions found under {submitted}/<student>/<assignment>/"
                          + (" for the given --student/--assignment/--shard" if students or assignments or shard
                             else ""))
    return ClassRun(layout, tasks, pending, strays, shard=shard, classmates=class_students(course, submitted, folders),
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


def run(course, layout, pending, jobs, on_done, meanwhile=lambda: None, classmates=(), pool=None):
    """Grade the pending tasks, and once more those the grader failed on (in sandboxes started afresh);
    on_done(task) after each; meanwhile() once the grading has started; classmates: every student of
    the class; pool: the SandboxPool the first grading takes its sandboxes from.  A fault that an
    earlier run left on the same work, with the same reason, is set aside instead of graded once more."""
    earlier = {task.key: fault_on_this_work(layout, task) for task in pending}
    fanout.grade_pending(course, layout, pending, jobs, on_done, meanwhile, classmates, pool=pool)
    repeated = {task.key for task in pending if earlier[task.key] and fault_on_this_work(layout, task) == earlier[task.key]}
    for task in pending:
        if task.key in repeated:
            log.warning("set aside %s: the same grader fault as the last run on unchanged work", task.key)
            set_aside(layout, task)
    again = [task for task in pending if task.key not in repeated and faulted(layout, task)]
    if again:
        log.warning("grading again what the grader failed on: %s", ", ".join(task.key for task in again))
        fanout.grade_pending(course, layout, again, jobs, on_done, classmates=classmates)


def grade_class(course, chosen, db_url, autograded, jobs, update, pool=None):
    """Grade what `chosen` (a ClassRun) holds pending, with sandboxes taken from `pool` where given,
    record each submission in nbgrader's gradebook as it is done, publish grades.csv and the wide
    export, and mark a shard finished; update(task, result) after each.  Ctrl-C stops it with what was
    graded saved (chosen.interrupted).  A run of chosen exercises (an author's check) records nothing
    in the gradebook: its scores are parts of submissions."""
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
            run(course, chosen.layout, chosen.pending, jobs, on_done, prepare, chosen.classmates, pool)
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
