"""Grade submissions, one notebook at a time, as a list of small steps (like nbgrader's autograde):

  1. read the notebook and merge it with the instructor's release copy   (submission.py)
  2. check that it belongs to the assignment                             (submission.py)
  3. draw the student's variant, if the notebook has one                  (variants.py)
  4. fork a child of the warm worker and run the cells there             (student.py)
  5. run the hidden suites here, in the trusted process                  (harness/plugin.py)
  6. apply the course's rules (from-scratch exercises, code that reaches
     into torch internals or the guard)                                   (rules.py)
  7. score, as a pure function of what was observed                     (scoring.py)

A `Grader` lives in one process and stays warm: one sandboxed worker that has imported torch, the
suites collected once, the reference solutions loaded once.  `open_grader` builds one.
"""

import logging
import time
from pathlib import Path

import torch

from autograder import intake, lateness, rules
from autograder.schedule import now as time_of_grading
from autograder.harness.context import Student, released_cells
from autograder.harness.plugin import with_suites
from autograder.reference import reference_namespace
from autograder.results import NOT_SUBMITTED, SubmissionResult, grader_failed, not_graded
from autograder.scoring import late_penalty, score_notebook
from autograder.sandbox.jail import kernel_device
from autograder.sandbox.student import StudentFailure, StudentProcess, Worker, WorkerError
from autograder.submission import SubmissionError, check_belongs, course_notebook, load_program
from autograder.variants import FILENAME, UnknownStudent, Variants, notebook_has_variants

log = logging.getLogger("autograder")


class Grader:
    def __init__(self, course, worker, suites, variants):
        self.course, self.worker, self.suites, self.variants = course, worker, suites, variants

    def grade_submission(self, assignment, folder, student="student", notebooks=None, classmates=(), exercises=(),
                         now=None):
        """Grade every notebook of an assignment found in `folder` (or the given paths in it), handed
        in by `student` (whose variant is drawn; classmates: the class, whose variants an answer may
        match); `exercises`: the ids of the only exercises to grade (an author's check), or () for all;
        `now`: the time of grading (an aware datetime; the clock's when None), which decides what the
        feedback may show (course.yml's feedback policy)."""
        started = time.monotonic()
        now = now or time_of_grading()
        result = SubmissionResult(student, assignment.id)
        parts = [(notebook, notebook.part(exercises)) for notebook in assignment.notebooks]
        parts = [(notebook, part) for notebook, part in parts if part.exercises or not exercises]
        try:
            handed_in = lateness.submitted_at(folder)
        except SubmissionError as error:  # a planted timestamp.txt: nothing of it is graded
            result.notebooks = [not_graded(part, str(error)) for _, part in parts]
            return result
        for notebook, part in parts:
            path = (notebooks or {}).get(notebook.name) or Path(folder) / notebook.filename
            if not intake.exists(path):
                result.notebooks.append(not_graded(part, f"{notebook.filename} was {NOT_SUBMITTED}"))
                continue
            result.notebooks.append(self.grade_notebook(assignment, notebook, path, folder, student, classmates,
                                                        exercises, now))
        result.submitted_at = handed_in.isoformat() if handed_in else ""
        result.seconds_late = lateness.seconds_late(assignment.due, handed_in)
        result.late_penalty = late_penalty(result.score, result.seconds_late, self.course.late_policy)
        result.seconds = time.monotonic() - started
        return result

    def grade_notebook(self, assignment, notebook, path, folder, student="student", classmates=(), exercises=(),
                       now=None):
        """exercises: the ids of the only exercises of the notebook to grade, or () for all."""
        part = notebook.part(exercises)
        try:
            return self._grade_notebook(assignment, notebook, path, folder, student, classmates, part,
                                        now or time_of_grading())
        except UnknownStudent as error:   # an id the class's roster does not know: graded on nobody's numbers
            return grader_failed(part, str(error))
        except WorkerError as error:
            log.error("worker failure while grading %s: %s", path, error)
            return grader_failed(part, f"its sandbox failed: {error}")
        except Exception as error:  # one submission never costs the run: the instructor gets the traceback
            log.exception("internal error while grading %s", path)
            return grader_failed(part, f"{type(error).__name__}: {error} (the traceback is in grader.log)"[:300])

    def _grade_notebook(self, assignment, notebook, path, folder, student_id, classmates, part, now):
        instructor = self.course.release_notebook(assignment, notebook)
        try:
            program = load_program(path, folder, instructor)                          # 1
            check_belongs(program, notebook, self.course)                             # 2
        except SubmissionError as error:
            return not_graded(part, str(error))
        reference = reference_namespace(self.course.source_notebook(assignment, notebook))
        variant, others, files = None, None, {}
        if notebook_has_variants(notebook):                                           # 3
            variant = self.variants.draw(assignment, notebook, student_id)
            others = lambda: self.variants.others(assignment, notebook, student_id, classmates)  # noqa: E731 (when asked)
            files = {FILENAME: self.variants.file_text(assignment, student_id)}
        process = StudentProcess(self.worker, program.cells, assignment.limits, assignment.kernel_kind,
                                 self.course.uses_dynamo(assignment), files)
        sandbox = self._live_sandbox()   # the one sandbox every call of this submission must run in
        try:
            try:
                process.start()                                                       # 4
            except StudentFailure as error:
                if self._sandbox_lost(sandbox):   # the child died with its sandbox, not of its own code
                    raise WorkerError("it died while the notebook's cells ran") from None
                return not_graded(part, f"the notebook could not be run: {error}")
            sandbox = sandbox or self.worker.sandbox   # started afresh for this submission
            loaded = time.monotonic()
            def as_student(running):
                return Student(running, [e.id for e in notebook.exercises if e.from_scratch],
                               device="cuda" if assignment.kernel_kind and kernel_device() == "cuda" else None,
                               variant=variant, others=others, values_shown=assignment.feedback_values_shown(now),
                               released=released_cells(course_notebook(instructor)))

            def course_answers():   # the solution notebook as a submission: whose an error inside the grader is
                answers = StudentProcess(self.worker, load_program(self.course.source_notebook(assignment, notebook),
                                                                   None, instructor).cells,
                                         assignment.limits, assignment.kernel_kind,
                                         self.course.uses_dynamo(assignment), files)
                answers.start()
                return as_student(answers)
            student = as_student(process)
            outcomes = self.suites.run(part.exercises, student, reference, course_answers)   # 5
            checked = time.monotonic()
        finally:
            process.close()
        if self._sandbox_lost(sandbox):   # a call it cut short was charged to the student as a crash
            raise WorkerError("it died while the hidden checks ran, and was started again")
        for internal in self.suites.internal_errors:
            log.error("grader error while grading %s:\n%s", path, internal)
        for charged in self.suites.charged:   # the course's own answers pass: the submission's reply raised it
            log.warning("a hidden check raised inside the grader on %s's reply alone (charged to it):\n%s",
                        path, charged)
        if self.suites.internal_errors:   # a check that failed inside the grader is no verdict on the work
            return grader_failed(part, f"{len(self.suites.internal_errors)} hidden check(s) raised inside the grader "
                                       "(the tracebacks are in grader.log)")
        flag = rules.internals_flag(program, part.exercises)
        broken = rules.broken_rules(part.exercises, student, flag)                    # 6
        result = score_notebook(part, outcomes, process.cell_reports, broken)        # 7
        charged = [f"{len(self.suites.charged)} hidden check(s) raised inside the grader on this submission's replies "
                   "alone (the course's answers pass them) and count as failed: the tracebacks are in grader.log"]
        result.flags = [f"{notebook.filename}: {line}" for line in ([flag] if flag else []) + student.flags
                        + (charged if self.suites.charged else [])]
        result.load_seconds, result.suite_seconds = loaded - process.started, checked - loaded
        return result


    def _live_sandbox(self):
        """The worker's sandbox if it is alive (None when it is to be started afresh)."""
        sandbox = self.worker.sandbox
        return sandbox if sandbox is not None and not sandbox.exited() else None

    def _sandbox_lost(self, sandbox):
        """Whether the worker's sandbox died during a submission: `sandbox`, the one it runs in, is no
        longer the worker's or has exited (None: the worker's current one has exited).  Its children
        die with it, and the grader sees the student's process stop as if the student's code had
        stopped it (and starts a sandbox again): what the death cut short is the grader's fault, never
        the student's."""
        current = self.worker.sandbox
        if sandbox is None:
            return current is None or current.exited()
        return current is not sandbox or sandbox.exited()


def grade_one(course, assignment, folder, student="student", notebooks=None, started=None):
    """One submission graded by a grader of its own, started for it and for its assignment's suites
    alone (or in `started`, a sandbox the grading service started ahead): what `grade`, Gradescope's
    runner and nbgrader's preprocessor do (a class is graded by classrun.run.grade_class, one warm grader
    per process)."""
    return open_grader(course, lambda grader: grader.grade_submission(assignment, folder, student, notebooks=notebooks),
                       assignments=[assignment.id], started=started)


def open_grader(course, body, assignments=None, started=None):
    """Start a warm worker (or take over `started`, a sandbox started earlier: jail.Started), collect
    the suites (of the given assignments, or the whole course) while it starts, and call body(grader)."""
    # One thread for the trusted side's own tensor maths: the machine's cores go to parallel grading
    # processes, and idle worker threads of several processes only compete for them.
    torch.set_num_threads(1)
    chosen = [assignment for assignment in course.assignments if assignments is None or assignment.id in assignments]
    variants = Variants.of(course)
    variants.require_keys(chosen)   # no secret, no grading of a notebook with variants: said before any work
    with Worker(course.limits, warm=course.uses_dynamo(*chosen), kernel_kind=course.kernel_kind(*chosen)) as worker:
        worker.start(started)
        exercises = [exercise for assignment in chosen for exercise in assignment.exercises]
        return with_suites(exercises, lambda suites: body(Grader(course, worker, suites, variants)))
