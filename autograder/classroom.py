"""Grade a whole class in nbgrader's layout: <submitted>/<student>/<assignment>/<notebook>.ipynb."""

import logging
import time
from pathlib import Path

from autograder.grading import grade_notebook
from autograder.results import SubmissionResult, not_graded

log = logging.getLogger("autograder")


def grade_submission(course, assignment, folder, student="student"):
    """Grade every notebook of an assignment found in `folder`."""
    started = time.monotonic()
    result = SubmissionResult(student, assignment.id)
    for notebook in assignment.notebooks:
        path = Path(folder) / notebook.filename
        if not path.exists():
            result.notebooks.append(not_graded(notebook, f"{notebook.filename} was not submitted"))
            continue
        result.notebooks.append(grade_notebook(course, assignment, notebook, path))
    result.seconds = time.monotonic() - started
    return result


def find_submissions(course, submitted, assignment_ids=None):
    """(student, assignment, folder) for every submission folder, sorted."""
    known = {assignment.id for assignment in course.assignments}
    found = []
    for student_dir in sorted(Path(submitted).iterdir()):
        if not student_dir.is_dir() or student_dir.name.startswith("."):
            continue
        for folder in sorted(student_dir.iterdir()):
            if not folder.is_dir():
                continue
            if folder.name not in known:
                log.warning("skipping %s: %s is not an assignment in course.yml", folder, folder.name)
                continue
            if assignment_ids and folder.name not in assignment_ids:
                continue
            found.append((student_dir.name, course.assignment(folder.name), folder))
    # A student who submitted some assignments but not another gets a row saying so.
    students = sorted({student for student, _, _ in found})
    assignments = {assignment.id: assignment for _, assignment, _ in found}
    present = {(student, assignment.id) for student, assignment, _ in found}
    for student in students:
        for assignment_id, assignment in assignments.items():
            if (student, assignment_id) not in present:
                found.append((student, assignment, Path(submitted) / student / assignment_id))
    return sorted(found, key=lambda entry: (entry[0], entry[1].id))


def summary_table(results):
    rows = [("student", "assignment", "score", "status", "seconds")]
    for result in results:
        rows.append((result.student, result.assignment, f"{result.score:g} / {result.max_score:g}",
                     result.reason or "graded", f"{result.seconds:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[4])
        if index == 0:
            lines.append("-" * (sum(widths) + 2 * len(widths) + 7))
    return "\n".join(lines)
