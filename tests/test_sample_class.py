"""`make grade` on the sample class: expected scores, nbgrader's gradebook, CSV and feedback."""

import csv
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from tests.conftest import run_grader
from tests.notebooks import COURSE, ROOT
from tests.sample_class import STUDENTS, SUBMITTED, build

# (student, assignment) -> score; the maxima are 13 (scaled_attention), 6 (masks), 20 (multi_head).
EXPECTED = {
    ("ada_perfect", "scaled_attention"): 13, ("ada_perfect", "masks"): 6, ("ada_perfect", "multi_head"): 20,
    ("ben_untouched", "scaled_attention"): 0, ("ben_untouched", "masks"): 0, ("ben_untouched", "multi_head"): 0,
    ("cara_no_scaling", "scaled_attention"): 4, ("cara_no_scaling", "masks"): 6,
    ("cara_no_scaling", "multi_head"): 20,
    ("dev_wrong_axes", "scaled_attention"): 2, ("dev_wrong_axes", "masks"): 2, ("dev_wrong_axes", "multi_head"): 8,
    ("eli_three_d_only", "scaled_attention"): 1, ("eli_three_d_only", "masks"): 5,
    ("eli_three_d_only", "multi_head"): 20,
    ("fay_syntax_error", "scaled_attention"): 0, ("fay_syntax_error", "masks"): 6,
    ("fay_syntax_error", "multi_head"): 3,
    ("gus_infinite_loop", "scaled_attention"): 0, ("gus_infinite_loop", "masks"): 6,
    ("gus_infinite_loop", "multi_head"): 20,
    ("hal_corrupt", "scaled_attention"): 0, ("hal_corrupt", "masks"): 0, ("hal_corrupt", "multi_head"): 0,
    ("ivy_hostile", "scaled_attention"): 0, ("ivy_hostile", "masks"): 6, ("ivy_hostile", "multi_head"): 10,
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    out = tmp_path_factory.mktemp("grading")
    db = f"sqlite:///{out / 'gradebook.db'}"
    process = run_grader("grade-class", "--submitted", SUBMITTED, "--out", out, "--db", db)
    assert process.returncode == 0, process.stderr
    return out, db, process.stdout


def test_committed_sample_class_is_up_to_date(tmp_path):
    fresh = build(tmp_path / "submitted")
    committed = sorted(p.relative_to(SUBMITTED) for p in SUBMITTED.rglob("*.ipynb"))
    assert committed == sorted(p.relative_to(fresh) for p in fresh.rglob("*.ipynb"))
    for path in committed:
        assert (SUBMITTED / path).read_bytes() == (fresh / path).read_bytes(), \
            f"run `make sample-class`: {path} is stale"


def test_scores_are_as_expected(graded):
    out, _, _ = graded
    with open(out / "grades.csv") as handle:
        rows = {(row["student"], row["assignment"]): float(row["score"]) for row in csv.DictReader(handle)}
    assert rows == {key: float(value) for key, value in EXPECTED.items()}


def test_csv_gives_the_reason_for_submissions_that_could_not_be_graded(graded):
    out, _, _ = graded
    with open(out / "grades.csv") as handle:
        rows = {(row["student"], row["assignment"]): row for row in csv.DictReader(handle)}
    assert "empty" in rows["hal_corrupt", "masks"]["reason"]
    assert "not a readable notebook" in rows["hal_corrupt", "scaled_attention"]["reason"]
    assert "was not submitted" in rows["hal_corrupt", "multi_head"]["reason"]
    assert rows["ada_perfect", "masks"]["status"] == "graded"


def test_scores_land_in_nbgraders_gradebook(graded):
    _, db, _ = graded
    with Gradebook(db) as gradebook:
        for (student, assignment), score in EXPECTED.items():
            submission = gradebook.find_submission(assignment, student)
            assert submission.score == score
            assert submission.max_score == COURSE.assignment(assignment).max_score


def test_summary_table_lists_every_student(graded):
    _, _, stdout = graded
    for student in STUDENTS:
        assert student in stdout


def test_feedback_reveals_no_hidden_code_or_values(graded):
    out, _, _ = graded
    suites = [line.strip() for exercise in (e for a in COURSE.assignments for e in a.exercises)
              for line in exercise.suite.read_text().splitlines() if len(line.strip()) > 25]
    for path in (out / "feedback").rglob("feedback.md"):
        text = path.read_text()
        assert "def test_" not in text and "tensor(" not in text and "autograder/" not in text
        assert not [line for line in suites if line in text]
    cara = (out / "feedback" / "cara_no_scaling" / "scaled_attention" / "feedback.md").read_text()
    assert "without the 1/sqrt(d_k) scaling" in cara
