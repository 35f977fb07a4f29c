"""Where grading writes, in one place.

    <out>/grades.csv                               one row per student and assignment (the whole class)
    <out>/grades_wide.csv                          one row per student, a column per assignment
    <out>/grader.log                               internal errors, for the instructor only
    <out>/results/<student>/<assignment>/grade.json     the record every other output is made from
    <out>/results/<student>/<assignment>/results.json   Gradescope's format
    <out>/feedback/<student>/<assignment>/feedback.md   what the student reads
    <out>/feedback/<student>/<assignment>/feedback.html the same, with pictures of attention weights
    <out>/report/                                  make report's item analysis
    <out>/shard.json                               a --shard K/N run that finished: which shard, and its submissions
    <out>/shard-plan.json                          a --shard K/N run that started: which shard, and its submissions
    <out>/grading.lock                             held by the run that grades into <out>, with its pid
    <out>/results/<student>/<assignment>/recorded.json  which grade.json the gradebook holds (and which gradebook)
"""

import json
from pathlib import Path

from autograder.files import write_atomic
from autograder import render
from autograder.results import from_record, to_record


class Layout:
    def __init__(self, out, visibility=None):
        self.out = Path(out)
        self.visibility = visibility  # exercise id -> Gradescope visibility (course.visibility())
        self.grades_csv = self.out / "grades.csv"
        self.wide_csv = self.out / "grades_wide.csv"
        self.log = self.out / "grader.log"
        self.report = self.out / "report"
        self.results = self.out / "results"
        self.feedback_root = self.out / "feedback"
        self.shard_manifest = self.out / "shard.json"
        self.shard_plan = self.out / "shard-plan.json"
        self.lock = self.out / "grading.lock"

    def record_path(self, student, assignment):
        return self.results / student / assignment / "grade.json"

    def recorded(self, student, assignment):
        return self.results / student / assignment / "recorded.json"

    def results_json(self, student, assignment):
        return self.results / student / assignment / "results.json"

    def feedback(self, student, assignment):
        return self.feedback_root / student / assignment / "feedback.md"

    def feedback_html(self, student, assignment):
        return self.feedback_root / student / assignment / "feedback.html"

    def save(self, result, **extra):
        """Write one graded submission; the record goes last, so it marks a complete write."""
        self.save_feedback(result)
        write_atomic(self.record_path(result.student, result.assignment),
                     json.dumps(to_record(result, **extra), indent=1))

    def save_feedback(self, result):
        """Everything made from a result for the student: results.json and the feedback pages."""
        render.write_gradescope(result, self.results_json(result.student, result.assignment), self.visibility)
        write_atomic(self.feedback(result.student, result.assignment), render.markdown(result))
        write_atomic(self.feedback_html(result.student, result.assignment), render.html_page(result))

    def read_record(self, student, assignment):
        """The stored record of a submission as a dict, or None."""
        try:
            return json.loads(self.record_path(student, assignment).read_text())
        except (OSError, ValueError):
            return None

    def graded_one(self, student, assignment):
        record = self.read_record(student, assignment)
        return None if record is None else from_record(record)

    def records(self):
        """Every complete record under results/, sorted by student and assignment."""
        found = []
        for path in sorted(self.results.glob("*/*/grade.json")):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue  # a record cut short by a crash: that submission is graded again
        return found

    def finish_shard(self, shard, keys):
        """Mark a --shard K/N run as finished, with the submissions (student/assignment) it holds."""
        k, n = shard
        write_atomic(self.shard_manifest, json.dumps({"shard": [k, n], "submissions": sorted(keys)}, indent=1))

    def finished_shard(self):
        """(k, n, submissions) of a finished --shard run, or None (not finished, or not a shard)."""
        try:
            found = json.loads(self.shard_manifest.read_text())
            k, n = found["shard"]
            return int(k), int(n), list(found["submissions"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def graded(self):
        """SubmissionResult for every stored record."""
        return [from_record(record) for record in self.records()]
