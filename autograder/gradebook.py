"""nbgrader's gradebook and autograded notebooks, written with nbgrader's own preprocessors.

`prepare` gives the gradebook each assignment's structure (nbgrader's SaveCells on the released
notebooks, and the due date).  `record` does for one graded submission what `nbgrader autograde`
does, except running the notebook: sanitise it (ClearOutput, DeduplicateIds, OverwriteKernelspec,
OverwriteCells, CheckCellMetadata), write the hidden suites' scores and feedback into its
autograded cells (nbgrader_hooks.annotate), then SaveAutoGrades and AssignLatePenalties, and save
it to nbgrader's autograded/<student>/<assignment>/ folder.  So formgrader lists the submission
as autograded with the same per-exercise scores as grades.csv, `generate_feedback` and `export`
work, and a manual score or comment set in formgrader survives every regrade (SaveAutoGrades
writes only the automatic score).
"""

import logging
import shutil
import warnings
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput, DeduplicateIds,
                                    OverwriteCells, OverwriteKernelspec, SaveAutoGrades, SaveCells)
from sqlalchemy.exc import SAWarning

from autograder.course import CourseError
from autograder.nbgrader_hooks import CourseLatePolicy, annotate

log = logging.getLogger("autograder")
SANITIZE = (ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata)


def utc_naive(moment):
    """nbgrader stores times as naive UTC."""
    return None if moment is None else moment.astimezone(timezone.utc).replace(tzinfo=None)


def _resources(db_url, assignment, notebook, student=None):
    return {"nbgrader": {"db_url": db_url, "assignment": assignment, "notebook": notebook, "student": student}}


def prepare(db_url, course, assignment_ids):
    """The structure of these assignments in the gradebook, as nbgrader's generate_assignment saves it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        for assignment_id in sorted(set(assignment_ids)):
            assignment = course.assignment(assignment_id)
            with Gradebook(db_url) as gradebook:
                gradebook.update_or_create_assignment(assignment.id, duedate=utc_naive(assignment.due))
            for notebook in assignment.notebooks:
                released = course.release_notebook(assignment, notebook)
                try:
                    SaveCells().preprocess(nbformat.read(released, as_version=4),
                                           _resources(db_url, assignment.id, notebook.name))
                except Exception as error:  # nbgrader refuses a changed notebook with submissions
                    raise CourseError(f"the gradebook refuses {assignment.id}/{notebook.filename}: "
                                      f"{str(error).splitlines()[0]}") from None


def _autograded_notebook(path, release, resources):
    """The submitted notebook sanitised as nbgrader does; the released one if it cannot be."""
    try:
        nb = nbformat.read(path, as_version=4)
        for step in SANITIZE:
            nb, _ = step().preprocess(nb, resources)
        return nb
    except Exception as error:  # a corrupt or hand-edited notebook: formgrader shows the release
        log.info("autograded copy of %s made from the release: %s", path, str(error).splitlines()[:1])
        nb = nbformat.read(release, as_version=4)
        nb, _ = ClearOutput().preprocess(nb, resources)
        return nb


def record(db_url, course, result, folder, autograded_root):
    """Record one graded submission in the gradebook and write its autograded notebooks."""
    assignment = course.assignment(result.assignment)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        with Gradebook(db_url) as gradebook:
            gradebook.update_or_create_student(result.student)
            stamp = datetime.fromisoformat(result.submitted_at) if result.submitted_at else None
            gradebook.update_or_create_submission(result.assignment, result.student,
                                                  **({"timestamp": utc_naive(stamp)} if stamp else {}))
        target = Path(autograded_root) / result.student / result.assignment
        target.mkdir(parents=True, exist_ok=True)
        for notebook_result in result.notebooks:
            notebook = next(nb for nb in assignment.notebooks if nb.name == notebook_result.notebook)
            resources = _resources(db_url, assignment.id, notebook.name, result.student)
            nb = _autograded_notebook(Path(folder) / notebook.filename,
                                      course.release_notebook(assignment, notebook), resources)
            annotate(nb, notebook_result)
            nb, _ = SaveAutoGrades().preprocess(nb, resources)
            nb, _ = AssignLatePenalties(plugin_class=CourseLatePolicy).preprocess(nb, resources)
            nbformat.write(nb, target / notebook.filename)
        # Like nbgrader autograde: the submission's other files (timestamp.txt, the exchange's
        # submission_secret.txt that release_feedback needs) go along.
        if Path(folder).is_dir():
            for path in Path(folder).iterdir():
                if path.is_file() and not path.is_symlink() and path.suffix != ".ipynb":
                    shutil.copyfile(path, target / path.name)
