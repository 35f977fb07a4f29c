"""A graded submission: its tests' scores by notebook, its totals and status, and its record on disk
(grade.json), from which every other output is made (render.py draws them)."""

from dataclasses import dataclass, field


class Scored:
    """Totals over `self.tests`."""

    @property
    def score(self):
        return sum(test.score for test in self.tests)

    @property
    def max_score(self):
        return sum(test.max_score for test in self.tests)


@dataclass
class TestResult:
    exercise: str
    test: str
    score: float
    max_score: float
    output: str = ""
    picture: dict = None  # pictures.Picture.to_dict(), drawn in the HTML feedback and nbgrader's cells

    @property
    def name(self):
        return f"{self.exercise}: {self.test}"


@dataclass
class NotebookResult(Scored):
    notebook: str
    tests: list
    reason: str = ""                 # why nothing could be graded, if so
    notes: dict = field(default_factory=dict)  # exercise id -> the cells it needs that did not run
    flags: list = field(default_factory=list)  # for the instructor: code that broke a course rule
    load_seconds: float = 0.0        # forking the child and running the cells
    suite_seconds: float = 0.0       # the hidden checks

    def by_exercise(self):
        """exercise id -> its TestResults, in order."""
        grouped = {}
        for test in self.tests:
            grouped.setdefault(test.exercise, []).append(test)
        return grouped


def zero_results(exercises, output):
    return [TestResult(ex.id, test, 0.0, points, output)
            for ex in exercises for test, points in ex.points.items()]


def not_graded(notebook, reason):
    """A notebook that could not be graded at all: every test scores 0 with the reason."""
    return NotebookResult(notebook.name, zero_results(notebook.exercises, f"Not graded: {reason}."),
                          reason=reason)


NOT_SUBMITTED = "not submitted"   # in the reason of every notebook of a submission that is missing

# What a student reads when grading failed for a reason only the instructor can act on; the
# reason itself goes to the instructor (the result's flags, grades.csv, grader.log).
GRADER_FAILED = "the grader could not run; your instructor has been told"


def grader_failed(notebook, why):
    result = not_graded(notebook, GRADER_FAILED)
    result.flags = [f"{notebook.filename}: the grader failed: {why}"]
    return result


@dataclass
class SubmissionResult(Scored):
    student: str
    assignment: str
    notebooks: list = field(default_factory=list)  # NotebookResult
    seconds: float = 0.0
    submitted_at: str = ""         # ISO 8601, from nbgrader's timestamp.txt
    seconds_late: float = 0.0      # after the due date
    late_penalty: float = 0.0      # points taken away by the late policy
    manual: float = 0.0            # points changed by hand in formgrader (nbgrader's manual scores)

    @property
    def final_score(self):
        """The one number every output gives: automatic points, manual changes, late penalty."""
        return max(0.0, self.score + self.manual - self.late_penalty)

    @property
    def tests(self):
        return [test for notebook in self.notebooks for test in notebook.tests]

    @property
    def reason(self):
        return "; ".join(f"{nb.notebook}: {nb.reason}" for nb in self.notebooks if nb.reason)

    @property
    def flags(self):
        return "; ".join(flag for nb in self.notebooks for flag in nb.flags)

    @property
    def missing(self):
        """Nothing was handed in (as opposed to something that could not be graded)."""
        return bool(self.notebooks) and all(NOT_SUBMITTED in nb.reason for nb in self.notebooks)

    @property
    def status(self):
        return "not submitted" if self.missing else "not graded" if self.reason else "graded"


# -- the record of a graded submission on disk (grade.json): what every other output is made from

def to_record(result, **extra):
    return {"student": result.student, "assignment": result.assignment,
            "execution_time": round(result.seconds, 3), "submitted_at": result.submitted_at,
            "seconds_late": result.seconds_late,
            "late_penalty": result.late_penalty, **extra,
            "notebooks": [{"notebook": nb.notebook, "reason": nb.reason, "notes": nb.notes, "flags": nb.flags,
                           "load_seconds": round(nb.load_seconds, 3), "suite_seconds": round(nb.suite_seconds, 3),
                           "tests": [vars(test) for test in nb.tests]} for nb in result.notebooks]}


def _notes(notes):
    return notes if isinstance(notes, dict) else {}  # records before per-exercise notes held a list


def from_record(record):
    result = SubmissionResult(record["student"], record["assignment"], seconds=record.get("execution_time", 0.0),
                              submitted_at=record.get("submitted_at", ""),
                              seconds_late=record.get("seconds_late", 0.0),
                              late_penalty=record.get("late_penalty", 0.0))
    for nb in record["notebooks"]:
        result.notebooks.append(NotebookResult(nb["notebook"], [TestResult(**test) for test in nb["tests"]],
                                               reason=nb.get("reason", ""), notes=_notes(nb.get("notes")),
                                               flags=list(nb.get("flags") or []),
                                               load_seconds=nb.get("load_seconds", 0.0),
                                               suite_seconds=nb.get("suite_seconds", 0.0)))
    return result
