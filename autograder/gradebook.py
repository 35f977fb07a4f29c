"""Record scores in nbgrader's gradebook through nbgrader's own API.

Each exercise is one autograded cell (check_<exercise id>) in nbgrader's model, worth the
exercise's points; so `nbgrader export` and formgrader see the same totals as the CSV.  Only the
automatic score is written: a manual score or comment an instructor set in formgrader stays.
"""

import contextlib
import warnings
from datetime import datetime, timezone

from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy.exc import SAWarning


def utc_naive(moment):
    """nbgrader stores times as naive UTC."""
    return None if moment is None else moment.astimezone(timezone.utc).replace(tzinfo=None)


def ensure_assignment(gradebook, assignment):
    """Create the assignment (with its due date), its notebooks and graded cells."""
    gradebook.update_or_create_assignment(assignment.id, duedate=utc_naive(assignment.due))
    for notebook in assignment.notebooks:
        gradebook.update_or_create_notebook(notebook.name, assignment.id)
        for exercise in notebook.exercises:
            gradebook.update_or_create_grade_cell(exercise.check_cell, notebook.name, assignment.id,
                                                  max_score=exercise.max_score, cell_type="code")


@contextlib.contextmanager
def opened(db_url, course):
    """The gradebook, with a function that records one SubmissionResult."""
    with warnings.catch_warnings(), Gradebook(db_url) as gradebook:
        # nbgrader's add_submission trips SQLAlchemy's autoflush warnings; they are harmless.
        warnings.simplefilter("ignore", SAWarning)
        ready = set()

        def record(result):
            if result.assignment not in ready:
                ensure_assignment(gradebook, course.assignment(result.assignment))
                ready.add(result.assignment)
            gradebook.update_or_create_student(result.student)
            try:
                submission = gradebook.find_submission(result.assignment, result.student)
            except MissingEntry:
                submission = gradebook.add_submission(result.assignment, result.student)
            if result.submitted_at:
                submission.timestamp = utc_naive(datetime.fromisoformat(result.submitted_at))
            per_cell = {}
            for notebook in result.notebooks:
                for test in notebook.tests:
                    key = (notebook.notebook, f"check_{test.exercise}")
                    per_cell[key] = per_cell.get(key, 0.0) + test.score
            for (notebook, cell), score in per_cell.items():
                grade = gradebook.find_grade(cell, notebook, result.assignment, result.student)
                grade.auto_score = score
            # nbgrader's late-penalty field, per notebook, so `nbgrader export` carries it.
            for notebook in result.notebooks:
                share = notebook.score / result.score if result.score else 0.0
                submitted = gradebook.find_submission_notebook(notebook.notebook, result.assignment, result.student)
                submitted.late_submission_penalty = round(result.late_penalty * share, 4) or None
            gradebook.db.commit()
        yield record


def record(db_url, course, results):
    with opened(db_url, course) as record_one:
        for result in results:
            record_one(result)
