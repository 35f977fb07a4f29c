"""nbgrader's gradebook and autograded notebooks, written with nbgrader's own preprocessors.

`prepare` gives the gradebook each assignment's structure (nbgrader's SaveCells on the released
notebooks, and the due date).  `record` does for one graded submission what `nbgrader autograde`
does after running a notebook: the submission, without outputs and with the hidden suites' scores
and feedback in its autograded cells (nbgrader_form.annotate), goes to nbgrader's
autograded/<student>/<assignment>/ folder, and the gradebook gets the automatic scores (nbgrader's
determine_grade) and the late penalty (nbgrader's late-submission plugin), as SaveAutoGrades and
AssignLatePenalties would write them, in one session.  So formgrader lists the submission as
autograded with the same per-exercise scores as grades.csv, `generate_feedback` and `export`
work, and a manual score or comment set in formgrader survives every regrade.
"""

import logging
import warnings
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader import utils
from nbgrader.preprocessors import ClearOutput, SaveCells
from sqlalchemy.exc import SAWarning

from autograder.course import CourseError
from autograder.intake import SubmissionError, read_file
from autograder.nbgrader_form import CourseLatePolicy, annotate
from autograder.submission import read_notebook

log = logging.getLogger("autograder")

# The files of a submission folder that nbgrader's tools read, besides the notebooks.
COPIED_ALONG = ("timestamp.txt", "submission_secret.txt")


def utc_naive(moment):
    """nbgrader stores times as naive UTC."""
    return None if moment is None else moment.astimezone(timezone.utc).replace(tzinfo=None)


def exists(db_url):
    """Whether the gradebook is there to read (a database that is no SQLite file is taken to be)."""
    prefix = "sqlite:///"
    return not db_url.startswith(prefix) or Path(db_url[len(prefix):]).exists()


def _resources(db_url, assignment, notebook, student=None):  # what nbgrader's preprocessors read
    return {"nbgrader": {"db_url": db_url, "assignment": assignment, "notebook": notebook, "student": student}}


def _known(gradebook, assignment):
    """The gradebook already has every autograded cell of the assignment's notebooks."""
    try:
        for notebook in assignment.notebooks:
            cells = {cell.name for cell in gradebook.find_notebook(notebook.name, assignment.id).grade_cells}
            if cells != {exercise.check_cell for exercise in notebook.exercises}:
                return False
    except MissingEntry:
        return False
    return True


def prepare(db_url, course, assignment_ids, only_new=False):
    """The structure of these assignments in the gradebook, as nbgrader's generate_assignment saves
    it (with only_new, only for assignments the gradebook does not have yet)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        for assignment_id in sorted(set(assignment_ids)):
            assignment = course.assignment(assignment_id)
            with Gradebook(db_url) as gradebook:
                known = only_new and _known(gradebook, assignment)
                gradebook.update_or_create_assignment(assignment.id, duedate=utc_naive(assignment.due))
            if known:
                continue
            for notebook in assignment.notebooks:
                released = course.release_notebook(assignment, notebook)
                try:
                    SaveCells().preprocess(nbformat.read(released, as_version=4),
                                           _resources(db_url, assignment.id, notebook.name))
                except Exception as error:  # nbgrader refuses a changed notebook with submissions
                    raise CourseError(f"the gradebook refuses {assignment.id}/{notebook.filename}: "
                                      f"{str(error).splitlines()[0]}") from None


def _autograded_notebook(path, folder, release, graded):
    """The submitted notebook without its outputs; the released one when it was not graded (missing,
    unreadable, a link out of its folder, another assignment's notebook), so that the gradebook
    gets exactly the assignment's cells, each with the reason."""
    nb = None
    if graded:
        try:
            nb = read_notebook(path, folder)
        except SubmissionError as error:
            log.info("autograded copy of %s made from the release: %s", path, error)
    if nb is None:  # formgrader shows the release, with the reason in each exercise's cell
        nb = nbformat.read(release, as_version=4)
    nb, _ = ClearOutput().preprocess(nb, {})
    return nb


class Recorder:
    """Records graded submissions in one gradebook session, opened at the first record."""

    def __init__(self, db_url, course, autograded_root):
        self.db_url, self.course, self.autograded_root = db_url, course, Path(autograded_root)
        self.policy = CourseLatePolicy.for_course(course)  # the late policy of the course being graded
        self.gradebook = None

    def close(self):
        if self.gradebook is not None:
            self.gradebook.close()
            self.gradebook = None

    def record(self, result, folder):
        if self.gradebook is None:
            self.gradebook = Gradebook(self.db_url)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SAWarning)
            record(self.gradebook, self.course, result, folder, self.autograded_root, self.policy)


def record(gradebook, course, result, folder, autograded_root, policy):
    """Record one graded submission in the gradebook and write its autograded notebooks.

    What nbgrader's SaveAutoGrades and AssignLatePenalties do, in one gradebook session: each
    autograded cell's automatic score is nbgrader's determine_grade of the annotated cell (a
    manual score is left as it is), and the late penalty is nbgrader's plugin's.
    """
    assignment = course.assignment(result.assignment)
    if not Path(folder).is_dir() or Path(folder).is_symlink():
        return  # no folder at all: like nbgrader, no submission (export counts it as 0)
    target = Path(autograded_root) / result.student / result.assignment
    target.mkdir(parents=True, exist_ok=True)
    annotated = {}
    for notebook_result in result.notebooks:
        notebook = next(nb for nb in assignment.notebooks if nb.name == notebook_result.notebook)
        nb = annotate(_autograded_notebook(Path(folder) / notebook.filename, folder,
                                           course.release_notebook(assignment, notebook),
                                           graded=not notebook_result.reason), notebook_result)
        nbformat.write(nb, target / notebook.filename)
        annotated[notebook.name] = nb
    # Like nbgrader autograde: the submission's other files (timestamp.txt, the exchange's
    # submission_secret.txt that release_feedback needs) go along.
    for name in COPIED_ALONG:
        try:
            (target / name).write_bytes(read_file(Path(folder) / name, folder, 2**16))
        except SubmissionError:
            (target / name).unlink(missing_ok=True)

    gradebook.update_or_create_student(result.student)
    stamp = datetime.fromisoformat(result.submitted_at) if result.submitted_at else None
    submission = gradebook.update_or_create_submission(
        result.assignment, result.student, **({"timestamp": utc_naive(stamp)} if stamp else {}))
    for name, nb in annotated.items():
        for cell in nb.cells:
            if utils.is_grade(cell):
                grade = gradebook.find_grade(cell.metadata.nbgrader["grade_id"], name, result.assignment,
                                             result.student)
                grade.auto_score, _ = utils.determine_grade(cell, log)
                grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
        gradebook.db.commit()
        submitted = gradebook.find_submission_notebook(name, result.assignment, result.student)
        late = submission.total_seconds_late
        submitted.late_submission_penalty = (policy.late_submission_penalty(result.student, submitted.score, late)
                                             if late > 0 else None)
    gradebook.db.commit()


def set_manual_score(db_url, assignment, exercise, student, score):
    """Set (or, with score None, clear) the manual score of one exercise of one submission in nbgrader's
    gradebook, as formgrader's score box does: on the exercise's autograded cell (check_<id>), so
    formgrader, `nbgrader export` and the next publish show it.  Returns (automatic points, points).
    CourseError (one line) when the gradebook has no such graded submission."""
    notebook = next(nb.name for nb in assignment.notebooks if exercise in nb.exercises)
    with warnings.catch_warnings(), Gradebook(db_url) as gradebook:
        warnings.simplefilter("ignore", SAWarning)
        try:
            grade = gradebook.find_grade(exercise.check_cell, notebook, assignment.id, student)
        except MissingEntry:
            raise CourseError(f"the gradebook has no graded {assignment.id} of {student} (grade it first)") from None
        if score is not None and not 0 <= score <= exercise.max_score:
            raise CourseError(f"{exercise.id} is worth 0 to {exercise.max_score:g} points, not {score:g}")
        grade.manual_score = score
        gradebook.db.commit()
        return grade.auto_score or 0.0, exercise.max_score


def apply_manual_grading(db_url, results):
    """Give each result what nbgrader's gradebook holds beyond the automatic points: the manual
    scores set in formgrader and the late penalty, so that grades.csv, the wide export, the
    feedback, `nbgrader export` and formgrader give one final score."""
    wanted = {(result.student, result.assignment): result for result in results}
    with warnings.catch_warnings(), Gradebook(db_url) as gradebook:
        warnings.simplefilter("ignore", SAWarning)
        for assignment in sorted({key[1] for key in wanted}):
            try:
                submissions = gradebook.find_assignment(assignment).submissions
            except MissingEntry:
                continue
            for submission in submissions:
                result = wanted.get((submission.student.id, assignment))
                if result is None:
                    continue
                result.manual = sum(grade.manual_score - (grade.auto_score or 0.0) for notebook in submission.notebooks
                                    for grade in notebook.grades if grade.manual_score is not None)
                result.late_penalty = submission.late_submission_penalty or 0.0
    return results

