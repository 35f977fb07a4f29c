"""What a graded submission becomes: Gradescope's results.json, a CSV row, feedback text."""

import html
import json
from dataclasses import dataclass, field

from autograder.files import write_atomic, write_csv
from autograder.pictures import Picture, png_base64

CSV_FIELDS = ["student", "assignment", "score", "max_score", "manual", "late_penalty", "final_score",
              "seconds_late", "status", "reason", "flags"]


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
    picture: dict = None  # pictures.Picture.to_dict(), drawn in the HTML feedback

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

    def sections(self):
        """One Section per exercise, in order: what every rendering of the feedback shows."""
        return [Section(exercise, sum(t.score for t in tests), sum(t.max_score for t in tests),
                        self.notes.get(exercise, ""), grouped(tests))
                for exercise, tests in self.by_exercise().items()]


@dataclass
class Section:
    """One exercise of a graded notebook as the feedback shows it (markdown, HTML, and the text of
    its check_<exercise> cell in nbgrader): its points, the note said once at its top, and its tests
    in groups (see `grouped`)."""
    exercise: str
    score: float
    max_score: float
    note: str
    groups: list

    @staticmethod
    def passed(group):
        return group[0].score >= group[0].max_score


def grouped(tests):
    """[(tests, output, picture)]: the tests in order, those in a row that failed with the same
    words and no picture together, so that the feedback says a thing once."""
    groups = []
    for test in tests:
        failed = test.score < test.max_score
        output, picture = (test.output, test.picture) if failed else ("", None)
        last = groups[-1] if groups else None
        if last and failed and output and picture is None and last[2] is None and last[1] == output:
            last[0].append(test)
        else:
            groups.append(([test], output, picture))
    return groups


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

    def summary(self):
        """The sentences under the score in every rendering of the feedback."""
        lines = []
        if self.manual:
            lines.append(f"Your instructor's grading by hand changes the score by {self.manual:+g} points, "
                         f"to {self.score + self.manual:g}.")
        if self.late_penalty:
            lines.append(f"Handed in {self.seconds_late / 3600:.1f} hours after the due date: the late policy "
                         f"takes {self.late_penalty:g} points, so the final score is {self.final_score:g}.")
        return lines

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

    def gradescope(self, visibility=None):
        """The shape Gradescope reads from results.json; visibility: exercise id -> when its
        tests are shown (default: visible)."""
        visibility = visibility or {}
        exercises = list(dict.fromkeys(test.exercise for test in self.tests))   # in the notebook's order
        seen = {}

        def number(test):  # "exercise.test", both counted from 1, as Gradescope orders and shows them
            seen[test.exercise] = seen.get(test.exercise, 0) + 1
            return f"{exercises.index(test.exercise) + 1}.{seen[test.exercise]}"
        return {
            "score": round(self.final_score, 4),
            "max_score": round(self.max_score, 4),
            "execution_time": round(self.seconds, 3),
            "output": self.reason or "\n\n".join(
                [f"{self.final_score:g} / {self.max_score:g} points"
                 + (f" ({self.late_penalty:g} taken for lateness)" if self.late_penalty else "")]
                + [f"{exercise}: {note}" for notebook in self.notebooks for exercise, note in notebook.notes.items()]),
            "output_format": "md",
            "test_output_format": "md",
            "visibility": "visible",
            "stdout_visibility": "hidden",
            "tests": [{"name": test.name, "number": number(test), "tags": [test.exercise],
                       "score": round(test.score, 4), "max_score": test.max_score,
                       "status": "passed" if test.score >= test.max_score else "failed",
                       "output": test.output, "output_format": "md",
                       "visibility": visibility.get(test.exercise, "visible")}
                      for test in self.tests],
        }

    def csv_row(self):
        return {"student": self.student, "assignment": self.assignment, "score": f"{self.score:g}",
                "max_score": f"{self.max_score:g}", "manual": f"{self.manual:g}",
                "late_penalty": f"{self.late_penalty:g}",
                "final_score": f"{self.final_score:g}", "seconds_late": f"{self.seconds_late:.0f}",
                "status": self.status, "reason": self.reason, "flags": self.flags}

    def feedback(self):
        """Markdown for the student: what passed, what failed and why; no hidden code or values."""
        lines = [f"# Feedback: {self.assignment}", "",
                 f"**Score: {self.score:g} / {self.max_score:g}**", ""]
        for sentence in self.summary():
            lines += [sentence, ""]
        for notebook in self.notebooks:
            lines += [f"## {notebook.notebook}.ipynb ({notebook.score:g} / {notebook.max_score:g})", ""]
            if notebook.reason:
                lines += [f"Not graded: {notebook.reason}.", ""]
                continue
            for section in notebook.sections():
                lines += [f"### {section.exercise} ({section.score:g} / {section.max_score:g})", ""]
                if section.note:
                    lines += ["```", *section.note.splitlines(), "```", ""]
                for group, output, _ in section.groups:
                    mark = "passed" if section.passed(group) else "failed"
                    lines.append("- " + ", ".join(f"**{t.test}** ({t.score:g}/{t.max_score:g})" for t in group)
                                 + f" {mark}")
                    if output:
                        lines += ["", "  ```", *[f"  {line}" for line in output.splitlines()], "  ```"]
                lines.append("")
        return "\n".join(lines)

    def feedback_html(self):
        """The same feedback as one standalone HTML page, with the pictures inline."""
        esc = html.escape
        parts = [f"<h1>Feedback: {esc(self.assignment)}</h1>",
                 f"<p><strong>Score: {self.score:g} / {self.max_score:g}</strong></p>"]
        parts += [f"<p>{esc(sentence)}</p>" for sentence in self.summary()]
        for notebook in self.notebooks:
            parts.append(f"<h2>{esc(notebook.notebook)}.ipynb ({notebook.score:g} / {notebook.max_score:g})</h2>")
            if notebook.reason:
                parts.append(f"<p>Not graded: {esc(notebook.reason)}.</p>")
                continue
            for section in notebook.sections():
                parts.append(f"<h3>{esc(section.exercise)} ({section.score:g} / {section.max_score:g})</h3>")
                if section.note:
                    parts.append(f"<pre class='note'>{esc(section.note)}</pre>")
                parts.append("<ul>")
                for group, output, picture in section.groups:
                    passed = section.passed(group)
                    parts.append(f"<li class='{'passed' if passed else 'failed'}'>"
                                 + ", ".join(f"<strong>{esc(t.test)}</strong> ({t.score:g}/{t.max_score:g})" for t in group)
                                 + f" {'passed' if passed else 'failed'}")
                    if output:
                        parts.append(f"<pre>{esc(output)}</pre>")
                    picture = Picture.from_dict(picture) if picture else None
                    if picture is not None:
                        parts.append(f"<img alt='{esc(picture.title)}' src='data:image/png;base64,"
                                     f"{png_base64(picture)}'>")
                    parts.append("</li>")
                parts.append("</ul>")
        return FEEDBACK_PAGE.format(title=esc(f"Feedback: {self.assignment}"), body="\n".join(parts))


FEEDBACK_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }}
pre {{ background: #f6f6f6; padding: .5rem; white-space: pre-wrap; }}
pre.note {{ border-left: 4px solid #c33; }}
li.passed {{ color: #2a6; }} li.failed {{ color: #222; }}
img {{ max-width: 100%; display: block; margin: .5rem 0; }}
</style></head>
<body>
{body}
</body></html>
"""


def write_json(result, path, visibility=None):
    write_atomic(path, json.dumps(result.gradescope(visibility), indent=2))


def write_grades_csv(results, path):
    """grades.csv: one row per graded submission."""
    write_csv(path, CSV_FIELDS, [result.csv_row() for result in results])



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
