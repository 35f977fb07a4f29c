"""Grade one submitted notebook: load it, run its code in its own process, run the hidden suites.

The steps, each small: read and merge the notebook (submission.py) -> start the student process
and run the cells (student.py) -> run the hidden pytest suites here, in the trusted process
(harness/plugin.py) -> apply course rules (from-scratch exercises) -> one result per test.
"""

import ast
import logging

from autograder.harness.plugin import SuitePlugin, run_suites
from autograder.reference import reference_namespace
from autograder.results import NotebookResult, TestResult, not_graded
from autograder.student import StudentFailure, StudentProcess
from autograder.submission import SubmissionError, load_program

log = logging.getLogger("autograder")

BUILTIN_ATTENTION = {"scaled_dot_product_attention", "multi_head_attention_forward",
                     "MultiheadAttention", "_scaled_dot_product_attention_math"}


def uses_builtin_attention(source):
    """True when the answer's own code refers to torch's built-in attention."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in BUILTIN_ATTENTION:
            return True
        if isinstance(node, ast.ImportFrom) and any(a.name in BUILTIN_ATTENTION for a in node.names):
            return True
    return False


def _cell_notes(process):
    notes = {}
    for report in process.cell_reports or []:
        if report.status == "ok":
            continue
        where = f"cell {report.label}" if not report.label.isdigit() else f"code cell #{report.label}"
        if report.status == "syntax":
            notes[report.label] = f"The {where} has a syntax error, so nothing in it was defined:\n{report.traceback.rstrip()}"
        elif report.status == "timeout":
            notes[report.label] = f"The {where} ran out of time and was stopped; what follows it in that cell was not run."
        else:
            notes[report.label] = f"The {where} raised an error while the notebook was run:\n{report.traceback.rstrip()}"
    return notes


def grade_notebook(course, assignment, notebook, path):
    exercises = list(notebook.exercises)
    instructor = course.release_notebook(assignment, notebook)
    try:
        program = load_program(path, instructor)
    except SubmissionError as error:
        return not_graded(notebook, str(error))

    process = StudentProcess(program.cells, assignment.limits)
    try:
        process.start()
    except StudentFailure as error:
        process.kill()
        return not_graded(notebook, f"the notebook could not be run: {error}")
    try:
        plugin = SuitePlugin(process, reference_namespace(course.source_notebook(assignment, notebook)),
                             {exercise.suite.resolve(): exercise for exercise in exercises})
        run_suites([exercise.suite for exercise in exercises], plugin)
    finally:
        process.close()
    for internal in plugin.internal_errors:
        log.error("grader error while grading %s:\n%s", path, internal)

    notes = _cell_notes(process)
    results = []
    for exercise in exercises:
        from_scratch_broken = exercise.from_scratch and (
            exercise.id in process.builtin_attention_users or uses_builtin_attention(program.answers.get(exercise.id, "")))
        note = notes.get(exercise.id)
        for test, points in exercise.points.items():
            outcome = plugin.outcomes.get((exercise.id, test))
            if from_scratch_broken:
                results.append(TestResult(exercise.id, test, 0.0, points,
                                          "No credit: this exercise must be written from scratch, but "
                                          "your code calls torch's built-in attention."))
            elif outcome is None:
                results.append(TestResult(exercise.id, test, 0.0, points, "This check did not run."))
            elif outcome.passed:
                results.append(TestResult(exercise.id, test, points, points))
            else:
                output = outcome.message + (f"\n\n{note}" if note else "")
                results.append(TestResult(exercise.id, test, 0.0, points, output))
    return NotebookResult(notebook.name, results, notes=list(notes.values()))
