"""A graded submission: its tests' scores by notebook, its totals and status, and its record on disk
(grade.json), from which every other output is made (render.py draws them).

A grader fault (`NotebookResult.fault`: the grader, not the student, failed on a notebook: its sandbox
died, the grading process stopped, a hidden check raised inside the grader) is no score: a faulted
submission's status is "grader fault", every output says so instead of giving a number, and the next
run grades it again (classrun.tasks.select_tasks)."""

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
    reason: str = ""                 # why nothing could be graded, if so (the student reads it)
    fault: str = ""                  # why the grader failed on it, for the instructor; "" when it did not
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
GRADER_FAULT = "grader fault"     # the status of a submission the grader failed on (grades.csv's, everywhere)

# What a student reads when grading failed for a reason only the instructor can act on; the
# reason itself (the fault) goes to the instructor (grades.csv, the console, grader.log).
GRADER_FAILED = "the grader could not run on it (no fault of your work); it will be graded again"
EARLIER_GRADER_FAILED = "the grader could not run; your instructor has been told"  # in records written before faults


def grader_failed(notebook, why):
    """A notebook the grader failed on (`why`, for the instructor): a fault, never a score."""
    result = not_graded(notebook, GRADER_FAILED)
    result.fault = why
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
        """For the instructor: why a notebook was not graded (the grader's fault named as one)."""
        return "; ".join(f"{nb.notebook}: " + (f"the grader failed: {nb.fault}" if nb.fault else nb.reason)
                         for nb in self.notebooks if nb.reason or nb.fault)

    @property
    def flags(self):
        return "; ".join(flag for nb in self.notebooks for flag in nb.flags)

    @property
    def faulted(self):
        """The grader failed on some notebook of it: it has no score, and is graded again."""
        return any(nb.fault for nb in self.notebooks)

    @property
    def fault(self):
        return "; ".join(f"{nb.notebook}: {nb.fault}" for nb in self.notebooks if nb.fault)

    @property
    def missing(self):
        """Nothing was handed in (as opposed to something that could not be graded)."""
        return bool(self.notebooks) and all(NOT_SUBMITTED in nb.reason for nb in self.notebooks)

    @property
    def status(self):
        if self.missing:
            return "not submitted"
        return GRADER_FAULT if self.faulted else "not graded" if self.reason else "graded"


# -- the record of a graded submission on disk (grade.json): what every other output is made from

def to_record(result, **extra):
    return {"student": result.student, "assignment": result.assignment,
            "execution_time": round(result.seconds, 3), "submitted_at": result.submitted_at,
            "seconds_late": result.seconds_late,
            "late_penalty": result.late_penalty, **extra,
            "notebooks": [{"notebook": nb.notebook, "reason": nb.reason, "fault": nb.fault, "notes": nb.notes,
                           "flags": nb.flags,
                           "load_seconds": round(nb.load_seconds, 3), "suite_seconds": round(nb.suite_seconds, 3),
                           "tests": [vars(test) for test in nb.tests]} for nb in result.notebooks]}


def _notes(notes):
    return notes if isinstance(notes, dict) else {}  # records before per-exercise notes held a list


def _fault(nb):
    """A stored notebook's fault; a record written before faults were kept said so in its reason and
    flags (its tests at 0), and is read as the fault it was."""
    if nb.get("fault") or nb.get("reason") != EARLIER_GRADER_FAILED:
        return nb.get("fault") or "", list(nb.get("flags") or [])
    said = [flag for flag in nb.get("flags") or [] if ": the grader failed: " in flag]
    rest = [flag for flag in nb.get("flags") or [] if flag not in said]
    return (said[0].split(": the grader failed: ", 1)[1] if said else "the grader failed"), rest


def from_record(record):
    result = SubmissionResult(record["student"], record["assignment"], seconds=record.get("execution_time", 0.0),
                              submitted_at=record.get("submitted_at", ""),
                              seconds_late=record.get("seconds_late", 0.0),
                              late_penalty=record.get("late_penalty", 0.0))
    for nb in record["notebooks"]:
        fault, flags = _fault(nb)
        result.notebooks.append(NotebookResult(nb["notebook"], [TestResult(**test) for test in nb["tests"]],
                                               reason=GRADER_FAILED if fault else nb.get("reason", ""), fault=fault,
                                               notes=_notes(nb.get("notes")), flags=flags,
                                               load_seconds=nb.get("load_seconds", 0.0),
                                               suite_seconds=nb.get("suite_seconds", 0.0)))
    return result
