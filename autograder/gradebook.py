"""nbgrader's gradebook and autograded notebooks, written with nbgrader's own preprocessors.

`prepare` gives the gradebook each assignment's structure (nbgrader's SaveCells on the released
notebooks, and the due date).  `record` does for one graded submission what `nbgrader autograde`
does after running a notebook: the submission, without outputs and with the hidden suites' scores
and feedback in its autograded cells (nbgrader_form.annotate), goes to nbgrader's
autograded/<student>/<assignment>/ folder, and the gradebook gets the automatic scores (nbgrader's
determine_grade) and the late penalty (nbgrader's late-submission plugin), as SaveAutoGrades and
AssignLatePenalties would write them, in one session.  So formgrader lists the submission as
autograded with the same per-exercise scores as grades.csv, `generate_feedback` and `export`
work, and a manual score or comment set in formgrader survives every regrade of the same work.

A manual score belongs to the version of the work it was given to (`manual_scores.json` in the
grading folder pins it to a digest of the submission's notebooks).  When a resubmission changes the
work, the next publish holds it: taken out of the gradebook (formgrader shows the cell as needing a
manual grade; grades.csv, the feedback and `nbgrader export` give the automatic score), kept in the
pins, and listed to the instructor, who keeps it (`manual-score --keep`) or drops it (`--clear`).
"""

import hashlib
import json
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
from autograder.files import write_atomic
from autograder.intake import SubmissionError, read_file
from autograder.nbgrader_form import CourseLatePolicy, annotate
from autograder.submission import digest_files, read_notebook

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
                # A grader fault has no automatic score: formgrader shows the cell ungraded, needing a grade.
                grade.auto_score = None if result.faulted else utils.determine_grade(cell, log)[0]
                grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
        gradebook.db.commit()
        submitted = gradebook.find_submission_notebook(name, result.assignment, result.student)
        late = submission.total_seconds_late
        submitted.late_submission_penalty = (policy.late_submission_penalty(result.student, submitted.score, late)
                                             if late > 0 and not result.faulted else None)
    gradebook.db.commit()


# -- manual scores, each pinned to the version of the work it was given to ---------------------

PINS = "manual_scores.json"   # in the grading folder: {"student/assignment": {cell: pin}}


def _pins_path(out):
    return Path(out) / PINS


def _read_pins(out):
    try:
        pins = json.loads(_pins_path(out).read_text())
    except (OSError, ValueError):
        return {}
    return pins if isinstance(pins, dict) else {}


def work_of(layout, assignment, student):
    """The version of a graded submission's work: a digest of its notebooks, as the grader reads them, in
    the folder its record names; None where that folder is gone (nothing to compare with)."""
    record = layout.read_record(student, assignment.id) or {}
    folder = Path(record.get("folder") or "")
    if not record.get("folder") or not folder.is_dir():
        return None
    return digest_files(hashlib.sha256(), folder, [notebook.filename for notebook in assignment.notebooks]).hexdigest()[:16]


def set_manual_score(db_url, assignment, exercise, student, score, layout=None, keep=False):
    """Set (or, with score None, clear) the manual score of one exercise of one submission in nbgrader's
    gradebook, as formgrader's score box does: on the exercise's autograded cell (check_<id>), so
    formgrader, `nbgrader export` and the next publish show it, pinned to the work graded now (in
    `layout`).  With `keep`, the score held since the work changed is given back, pinned to the work of
    now.  Returns (automatic points, points, the manual score now).  CourseError (one line) when the
    gradebook has no such graded submission, or nothing is held to keep."""
    notebook = next(nb.name for nb in assignment.notebooks if exercise in nb.exercises)
    key, pins = f"{student}/{assignment.id}", _read_pins(layout.out) if layout else {}
    held = pins.get(key, {}).get(exercise.check_cell, {}).get("held")
    if keep and held is None:
        raise CourseError(f"{key} {exercise.id} has no manual score held for changed work: nothing to keep")
    score = held if keep else score
    with warnings.catch_warnings(), Gradebook(db_url) as gradebook:
        warnings.simplefilter("ignore", SAWarning)
        try:
            grade = gradebook.find_grade(exercise.check_cell, notebook, assignment.id, student)
        except MissingEntry:
            raise CourseError(f"the gradebook has no graded {assignment.id} of {student} (grade it first)") from None
        if score is not None and not 0 <= score <= exercise.max_score:
            raise CourseError(f"{exercise.id} is worth 0 to {exercise.max_score:g} points, not {score:g}")
        grade.manual_score = score
        grade.needs_manual_grade = False
        gradebook.db.commit()
        automatic = grade.auto_score or 0.0
    if layout is not None:
        cells = pins.setdefault(key, {})
        cells.pop(exercise.check_cell, None)
        if score is not None:
            cells[exercise.check_cell] = {"score": score, "work": work_of(layout, assignment, student)}
        write_atomic(_pins_path(layout.out), json.dumps({k: v for k, v in pins.items() if v}, indent=1, sort_keys=True))
    return automatic, exercise.max_score, score


def held_manual_scores(out):
    """(student, assignment, cell, score) of each manual score held because the work changed after it was
    given, from the grading folder `out`."""
    return [(*key.split("/", 1), cell, pin["held"]) for key, cells in sorted(_read_pins(out).items())
            for cell, pin in sorted(cells.items()) if "held" in pin]


def _pinned(grade, pin, work):
    """The pin of one manual score after a publish (None: no pin); a score given to another version of
    the work than `work` is held: taken out of the gradebook, which flags the cell for manual grading."""
    if grade.manual_score is None:   # cleared, or held earlier: only a held score's pin stays
        return pin if pin and "held" in pin else None
    if work is None:   # the work cannot be read again: the score stays as it is
        return pin
    if not pin or "held" in pin or pin.get("score") != grade.manual_score:   # new, or set again: this work's
        return {"score": grade.manual_score, "work": work}
    if pin.get("work") == work:
        return pin
    held = {"held": grade.manual_score, "work": pin.get("work")}   # the work changed since it was given
    grade.manual_score, grade.needs_manual_grade = None, True
    return held


def apply_manual_grading(db_url, results, course=None, layout=None):
    """Give each result what nbgrader's gradebook holds beyond the automatic points: the manual
    scores set in formgrader and the late penalty, so that grades.csv, the wide export, the
    feedback, `nbgrader export` and formgrader give one final score.  With the course and its grading
    folder (`layout`), a manual score given to another version of the work is held (module docstring)."""
    wanted = {(result.student, result.assignment): result for result in results}
    pins = _read_pins(layout.out) if layout else None
    before = json.dumps(pins, sort_keys=True)
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
                grades = [grade for notebook in submission.notebooks for grade in notebook.grades]
                if pins is not None:
                    _pin_submission(pins, grades, f"{result.student}/{assignment}",
                                    lambda: work_of(layout, course.assignment(assignment), result.student))
                result.manual = sum(grade.manual_score - (grade.auto_score or 0.0) for grade in grades
                                    if grade.manual_score is not None)
                result.late_penalty = submission.late_submission_penalty or 0.0
        gradebook.db.commit()
    if pins is not None and json.dumps(pins, sort_keys=True) != before:
        write_atomic(_pins_path(layout.out), json.dumps({k: v for k, v in pins.items() if v}, indent=1, sort_keys=True))
    return results


def _pin_submission(pins, grades, key, work):
    """Pin each of a submission's manual scores to its work (work(): its digest, read once when needed),
    holding those given to another version (_pinned); `pins` is changed in place."""
    cells, now = pins.get(key, {}), []
    for grade in grades:
        pin = cells.get(grade.name)
        if pin is None and grade.manual_score is None:
            continue
        if not now:
            now.append(work())
        pin = _pinned(grade, pin, now[0])
        cells.pop(grade.name, None)
        if pin:
            cells[grade.name] = pin
    if cells:
        pins[key] = cells
    else:
        pins.pop(key, None)
