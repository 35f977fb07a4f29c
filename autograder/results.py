"""What a graded submission becomes: Gradescope's results.json, a CSV row, feedback text."""

import csv
import json
from dataclasses import dataclass, field

CSV_FIELDS = ["student", "assignment", "score", "max_score", "status", "reason"]


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

    @property
    def name(self):
        return f"{self.exercise}: {self.test}"


@dataclass
class NotebookResult(Scored):
    notebook: str
    tests: list
    reason: str = ""                 # why nothing could be graded, if so
    notes: list = field(default_factory=list)  # remarks about cells (syntax errors, time-outs)


def zero_results(exercises, output):
    return [TestResult(ex.id, test, 0.0, points, output)
            for ex in exercises for test, points in ex.points.items()]


def not_graded(notebook, reason):
    """A notebook that could not be graded at all: every test scores 0 with the reason."""
    return NotebookResult(notebook.name, zero_results(notebook.exercises, f"Not graded: {reason}."),
                          reason=reason)


@dataclass
class SubmissionResult(Scored):
    student: str
    assignment: str
    notebooks: list = field(default_factory=list)  # NotebookResult
    seconds: float = 0.0

    @property
    def tests(self):
        return [test for notebook in self.notebooks for test in notebook.tests]

    @property
    def reason(self):
        return "; ".join(f"{nb.notebook}: {nb.reason}" for nb in self.notebooks if nb.reason)

    @property
    def status(self):
        return "not graded" if self.reason else "graded"

    def gradescope(self):
        """The shape Gradescope reads from results.json."""
        return {
            "score": round(self.score, 4),
            "max_score": round(self.max_score, 4),
            "output": self.reason or f"{self.score:g} / {self.max_score:g} points",
            "tests": [{"name": test.name, "score": round(test.score, 4), "max_score": test.max_score,
                       "output": test.output, "visibility": "visible"} for test in self.tests],
        }

    def csv_row(self):
        return {"student": self.student, "assignment": self.assignment, "score": f"{self.score:g}",
                "max_score": f"{self.max_score:g}", "status": self.status, "reason": self.reason}

    def feedback(self):
        """Markdown for the student: what passed, what failed and why; no hidden code or values."""
        lines = [f"# Feedback: {self.assignment}", "",
                 f"**Score: {self.score:g} / {self.max_score:g}**", ""]
        for notebook in self.notebooks:
            lines += [f"## {notebook.notebook}.ipynb ({notebook.score:g} / {notebook.max_score:g})", ""]
            if notebook.reason:
                lines += [f"Not graded: {notebook.reason}.", ""]
                continue
            for test in notebook.tests:
                mark = "passed" if test.score == test.max_score else "failed"
                lines.append(f"- **{test.name}** ({test.score:g}/{test.max_score:g}) {mark}")
                if test.output and test.score < test.max_score:
                    lines += ["", "  ```", *[f"  {line}" for line in test.output.splitlines()], "  ```"]
            lines.append("")
        return "\n".join(lines)


def write_json(result, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.gradescope(), indent=2))


def write_csv(results, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for result in results:
            writer.writerow(result.csv_row())
