"""A term of real use, end to end, on a temporary copy of the course: collect in nbgrader's layout
with timestamp.txt (odd hand-ins included), grade, a manual score in the gradebook, a resubmission
and its regrade, formgrader's Autograde button, feedback, exports to nbgrader's CSV and the LMSs,
a refused release and a typo fix released after submissions."""

import csv
import json
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from nbgrader.api import Gradebook

from tests.conftest import run_grader, run_in as run
from tests.notebooks import COURSE, ROOT, make_submission, solution_answers

pytestmark = pytest.mark.slow   # a whole term with nbgrader's own tools (minutes): make test-all and CI

DUE = "2026-11-01T23:59:00+00:00"
# What the tests below need of the course's points, from course.yml (an instructor may change them).
MASKS = COURSE.assignment("masks")
FULL = MASKS.max_score                                                     # masks' points
PADDING = MASKS.exercise("padding_mask").max_score
BY_HAND = FULL - PADDING + 3.5                                             # ada's score after 3.5 by hand
ODD = ("s_wrongnb", "s_empty", "s_corrupt")
CLASS = sorted(["ada", "bob", "cid", *ODD])
ON_TIME, TWO_DAYS_LATE = "2026-11-01 20:00:00.000000 UTC", "2026-11-03 12:00:00.000000 UTC"


def grader(course, *args, check=True):
    return run(course, "autograder", "--course", course / "course.yml", *args, check=check)


def scores(db, student, assignment="masks"):
    with Gradebook(db) as gradebook:
        submission = gradebook.find_submission(assignment, student)
        return {grade.name: (grade.auto_score, grade.manual_score) for nb in submission.notebooks
                for grade in nb.grades}, submission.late_submission_penalty


def changed_course(late_policy=None, due=None):
    """The repository's course.yml with this late policy and these due dates ({assignment: ISO
    time}), whatever the repository's own course.yml says of either."""
    raw = yaml.safe_load((ROOT / "course.yml").read_text())
    if late_policy is not None:
        raw["late_policy"] = late_policy
    for assignment in raw["assignments"]:
        if assignment["id"] in (due or {}):
            assignment["due"] = due[assignment["id"]]
    return yaml.safe_dump(raw, sort_keys=False)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("term") / "course"
    for name in ("solutions", "exercises", "autograder"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("nbgrader_config.py", "requirements.txt"):
        shutil.copy(ROOT / name, root / name)
    (root / "course.yml").write_text(changed_course(
        late_policy={"percent_per_day": 10, "grace_minutes": 15, "max_percent": 50}, due={"masks": DUE}))
    # release, then collect three students in nbgrader's layout
    answers = solution_answers("masks")
    broken = {**answers, "causal_mask": answers["causal_mask"].replace(".tril()", ".triu()")
              .replace("torch.tril(", "torch.triu(")}
    for student, chosen, stamp in (("ada", answers, ON_TIME), ("bob", broken, TWO_DAYS_LATE), ("cid", answers, ON_TIME)):
        folder = root / "submitted" / student / "masks"
        make_submission("masks", chosen, folder)
        (folder / "timestamp.txt").write_text(stamp)
        (folder / "submission_secret.txt").write_text(f"secret-of-{student}")  # as nbgrader collect leaves it
    # Three odd hand-ins: another assignment's notebook, an empty folder, a notebook that is no JSON.
    for student in ODD:
        folder = root / "submitted" / student / "masks"
        folder.mkdir(parents=True)
        (folder / "timestamp.txt").write_text(ON_TIME)
        (folder / "submission_secret.txt").write_text(f"secret-of-{student}")
    make_submission("scaled_attention", solution_answers("scaled_attention"), root / "submitted" / "s_wrongnb" / "masks")
    (root / "submitted" / "s_wrongnb" / "masks" / "scaled_attention.ipynb").rename(
        root / "submitted" / "s_wrongnb" / "masks" / "masks.ipynb")
    (root / "submitted" / "s_corrupt" / "masks" / "masks.ipynb").write_text('{"cells": [')
    grader(root, "grade-class", "--submitted", root / "submitted", "--out", root / "grading",
           "--db", f"sqlite:///{root / 'gradebook.db'}")
    return root


def test_the_demo_never_touches_the_course():
    """make grade without SUBMITTED grades the sample class into its own folder and gradebook."""
    plan = subprocess.run(["make", "-n", "grade"], cwd=ROOT, capture_output=True, text=True).stdout
    line = next(line for line in plan.splitlines() if "grade-class" in line)
    assert "--submitted sample_class/submitted" in line and "--out sample_class/graded" in line
    assert "sample_class/gradebook.db" in line
    plan = subprocess.run(["make", "-n", "grade", "SUBMITTED=submitted"], cwd=ROOT, capture_output=True, text=True).stdout
    line = next(line for line in plan.splitlines() if "grade-class" in line)
    assert "--out grading" in line and f"{ROOT}/gradebook.db" in line


def test_grading_writes_nbgraders_autograded_notebooks_and_gradebook(course):
    db = f"sqlite:///{course / 'gradebook.db'}"
    with open(course / "grading" / "grades.csv") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    for student in ("ada", "bob", "cid"):
        assert (course / "autograded" / student / "masks" / "masks.ipynb").is_file()
        per_cell, _ = scores(db, student)
        record = json.loads((course / "grading" / "results" / student / "masks" / "grade.json").read_text())
        expected = {}
        for test in record["notebooks"][0]["tests"]:
            expected[f"check_{test['exercise']}"] = expected.get(f"check_{test['exercise']}", 0) + test["score"]
        assert {cell: auto for cell, (auto, _) in per_cell.items()} == pytest.approx(expected)
        assert float(rows[student]["score"]) == pytest.approx(sum(expected.values()))
    assert float(rows["ada"]["late_penalty"]) == 0
    bob = rows["bob"]
    assert float(bob["late_penalty"]) == pytest.approx(0.2 * float(bob["score"]))  # 2 started days x 10 %
    _, penalty = scores(db, "bob")
    assert penalty == pytest.approx(float(bob["late_penalty"]))
    assert "late policy" in (course / "grading" / "feedback" / "bob" / "masks" / "feedback.md").read_text()


FORMGRADER = """
import json
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config
config = Config()
exec(open("nbgrader_config.py").read(), {"get_config": lambda: config, "__file__": "nbgrader_config.py"})
api = NbGraderAPI(coursedir=CourseDirectory(config=config, root="."), config=config)
print(json.dumps([{k: s[k] for k in ("student", "autograded", "score", "max_score", "needs_manual_grade")}
                  for s in api.get_submissions("masks")]))
"""


def test_formgrader_lists_every_submission_autograded_with_the_csv_scores(course):
    """What formgrader's Manage Submissions page asks nbgrader's API."""
    listed = json.loads(run(course, "-c", FORMGRADER, module=False).stdout.strip().splitlines()[-1])
    with open(course / "grading" / "grades.csv") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert sorted(entry["student"] for entry in listed) == CLASS
    for entry in listed:
        assert entry["autograded"] is True and entry["needs_manual_grade"] is False
        assert entry["score"] == pytest.approx(float(rows[entry["student"]]["score"]))
        assert entry["max_score"] == float(rows[entry["student"]]["max_score"])


def test_a_manual_score_is_in_the_final_scores_from_the_next_run_on(course):
    """A score changed by hand without a browser (manual-score writes it where formgrader's score box
    does); the next make grade grades nothing again (nothing was handed in) and reports the final
    score that changed, in its table too. A wrong exercise or score is one line and changes nothing."""
    db = f"sqlite:///{course / 'gradebook.db'}"
    wrong = grader(course, "manual-score", "--assignment", "masks", "--student", "ada", "--exercise", "softmax",
                   "--score", "1", "--db", db, check=False)
    assert wrong.returncode != 0 and wrong.stderr.count("\n") == 1 and "softmax is no exercise of masks" in wrong.stderr
    too_much = grader(course, "manual-score", "--assignment", "masks", "--student", "ada", "--exercise",
                      "padding_mask", "--score", "99", "--db", db, check=False)
    assert too_much.returncode != 0 and f"padding_mask is worth 0 to {PADDING:g} points, not 99" in too_much.stderr
    nobody = grader(course, "manual-score", "--assignment", "masks", "--student", "zed", "--exercise",
                    "padding_mask", "--score", "1", "--db", db, check=False)
    assert nobody.returncode != 0 and "the gradebook has no graded masks of zed" in nobody.stderr
    done = grader(course, "manual-score", "--assignment", "masks", "--student", "ada", "--exercise", "padding_mask",
                  "--score", "3.5", "--db", db)
    assert f"ada/masks padding_mask: automatic {PADDING:g} / {PADDING:g}, by hand set to 3.5." in done.stdout
    again = grader(course, "grade-class", "--submitted", course / "submitted", "--out", course / "grading",
                   "--db", db, "--table")
    assert again.stdout.startswith(f"Nothing to grade; {len(CLASS)} unchanged")
    assert f"ada/masks: {FULL:g} -> {BY_HAND:g}" in again.stdout
    per_cell, _ = scores(db, "ada")
    assert per_cell["check_padding_mask"] == (PADDING, 3.5)
    with open(course / "grading" / "grades.csv") as handle:
        assert sorted(row["student"] for row in csv.DictReader(handle)) == CLASS


def test_wide_export_has_one_row_per_student_with_penalties_applied(course):
    with open(course / "grading" / "grades_wide.csv") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    with open(course / "grading" / "grades.csv") as handle:
        final = {row["student"]: float(row["final_score"]) for row in csv.DictReader(handle)}
    assert set(rows) == set(CLASS)
    assert float(rows["bob"]["masks"]) == pytest.approx(final["bob"])
    assert final["bob"] < float(rows["ada"]["masks"])
    assert float(rows["ada"]["masks"]) == pytest.approx(final["ada"])  # her manual score included
    assert float(rows["cid"]["percent"]) == 100.0


def release_with(course, change):
    solution = course / "solutions" / "masks" / "masks.ipynb"
    original = solution.read_text()
    solution.write_text(change(original))
    try:
        return grader(course, "release", "--assignment", "masks", check=False)
    finally:
        solution.write_text(original)


def test_release_refuses_to_change_the_code_of_a_notebook_with_submissions(course):
    released = course / "exercises" / "masks" / "masks.ipynb"
    before = released.read_bytes()
    process = release_with(course, lambda text: text.replace('"import torch', '"import math\\nimport torch', 1))
    assert process.returncode == 2
    assert f"already has {len(CLASS)} submission(s)" in process.stderr and len(process.stderr.strip().splitlines()) == 1
    assert released.read_bytes() == before


def test_formgraders_autograde_button_gives_the_same_scores(course):
    db = f"sqlite:///{course / 'gradebook.db'}"
    before, penalty_before = scores(db, "bob")
    run(course, "nbgrader", "autograde", "masks", "--student", "bob", "--force")
    after, penalty_after = scores(db, "bob")
    assert after == before and penalty_after == pytest.approx(penalty_before)
    text = (course / "autograded" / "bob" / "masks" / "masks.ipynb").read_text()
    assert "Hidden tests of causal_mask" in text


def test_odd_hand_ins_are_complete_gradebook_entries_with_their_reason(course):
    db = f"sqlite:///{course / 'gradebook.db'}"
    with open(course / "grading" / "grades.csv") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    reasons = {"s_wrongnb": "it looks like scaled_attention", "s_empty": "masks.ipynb was not submitted",
               "s_corrupt": "not a readable notebook"}
    for student, reason in reasons.items():
        per_cell, _ = scores(db, student)
        assert set(per_cell) == {exercise.check_cell for exercise in MASKS.exercises}
        assert all(auto == 0 for auto, _ in per_cell.values()) and rows[student]["final_score"] == "0"
        assert reason in rows[student]["reason"]
        autograded = (course / "autograded" / student / "masks" / "masks.ipynb").read_text()
        assert reason in autograded  # formgrader shows the reason in each exercise's cell


def test_generate_and_release_feedback_carry_the_graders_feedback_only(course):
    process = run(course, "nbgrader", "generate_feedback", "masks")
    assert process.returncode == 0
    for student in CLASS:
        assert (course / "feedback" / student / "masks" / "masks.html").is_file(), student
    html = (course / "feedback" / "bob" / "masks" / "masks.html").read_text()
    assert "Hidden tests of causal_mask" in html and "upper triangle" in html
    suites = [line.strip() for path in (course / "autograder" / "suites").glob("*.py")
              for line in path.read_text().splitlines() if len(line.strip()) > 30]
    assert not [line for line in suites if line in html]
    exchange = course.parent / "exchange"
    exchange.mkdir()
    run(course, "nbgrader", "release_feedback", "masks", f"--Exchange.root={exchange}")
    assert list(exchange.rglob("*.html"))


def test_nbgrader_export_carries_scores_and_late_penalty(course):
    run(course, "nbgrader", "export", "--to", str(course / "export.csv"))
    with open(course / "export.csv") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert float(rows["bob"]["late_submission_penalty"]) > 0
    assert float(rows["ada"]["score"]) == float(rows["ada"]["max_score"]) - PADDING + 3.5  # the manual score


def test_every_output_gives_the_same_final_score_after_manual_grading(course):
    """After the manual score of ada (7 -> 3.5), her resubmission with a broken causal mask (the manual
    score held, then kept), a regrade, and bob's late penalty: grades.csv, the wide export, the feedback,
    results.json, nbgrader export and formgrader agree for every student."""
    db = f"sqlite:///{course / 'gradebook.db'}"
    answers = solution_answers("masks")
    make_submission("masks", {**answers, "causal_mask": answers["causal_mask"].replace(".tril()", ".triu()")
                              .replace("torch.tril(", "torch.triu(")}, course / "submitted" / "ada" / "masks")
    process = grader(course, "grade-class", "--submitted", course / "submitted", "--out", course / "grading",
                     "--db", db)
    assert process.stdout.startswith("1 submission(s) of 1 student(s) to grade") and f"ada/masks: {BY_HAND:g} -> " in process.stdout  # final scores
    # Her manual score was given to the work she changed: held (not counted) and listed, until kept.
    assert "ada/masks padding_mask: 3.5 by hand" in process.stdout and scores(db, "ada")[0]["check_padding_mask"][1] is None
    grader(course, "manual-score", "--assignment", "masks", "--student", "ada", "--exercise", "padding_mask", "--keep",
           "--db", db, "--out", course / "grading")
    kept = grader(course, "grade-class", "--submitted", course / "submitted", "--out", course / "grading", "--db", db)
    assert "Manual scores given to an earlier version" not in kept.stdout
    run(course, "nbgrader", "export", "--to", str(course / "export-final.csv"))
    with open(course / "export-final.csv") as handle:
        export = {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)}  # net of penalty
    listed = {entry["student"]: entry["score"] for entry in
              json.loads(run(course, "-c", FORMGRADER, module=False).stdout.strip().splitlines()[-1])}
    with open(course / "grading" / "grades.csv") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    with open(course / "grading" / "grades_wide.csv") as handle:
        wide = {row["student"]: float(row["masks"]) for row in csv.DictReader(handle)}
    for student in ("ada", "bob", "cid"):
        final = float(rows[student]["final_score"])
        _, penalty = scores(db, student)
        results = json.loads((course / "grading" / "results" / student / "masks" / "results.json").read_text())
        assert export[student] == pytest.approx(final) and wide[student] == pytest.approx(final)
        assert listed[student] - (penalty or 0) == pytest.approx(final) and results["score"] == pytest.approx(final)
    by_hand = 3.5 - PADDING   # what the manual score of 3.5 changes
    assert float(rows["ada"]["manual"]) == by_hand and float(rows["ada"]["final_score"]) < BY_HAND
    feedback = (course / "grading" / "feedback" / "ada" / "masks" / "feedback.md").read_text()
    assert (f"**Score: {rows['ada']['final_score']} / {FULL:g} (automatic {rows['ada']['score']}, by hand "
            f"{by_hand:+g})**") in feedback
    assert "changes the automatic score of" in feedback and f"by {by_hand:+g} points" in feedback


def test_lms_imports_carry_the_final_scores_for_the_roster_and_everyone_graded(course, tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("student,name,email,sis_user_id,sis_login_id,section\n"
                      'ada,"Lovelace, Ada",ada@example.org,1001,alovelace,A\n'
                      'bob,"Babbage, Bob",bob@example.org,1002,bbabbage,B\n'
                      'dan,"Dahl, Dan",dan@example.org,1003,ddahl,B\n')
    process = grader(course, "export-lms", "--out", course / "grading", "--roster", roster,
                     "--db", f"sqlite:///{course / 'gradebook.db'}")
    assert "Graded but not in" in process.stdout and "cid" in process.stdout
    with open(course / "grading" / "grades.csv") as handle:
        final = {row["student"]: row["final_score"] for row in csv.DictReader(handle)}
    with open(course / "grading" / "canvas.csv") as handle:
        canvas = list(csv.reader(handle))
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    column = canvas[0].index("Masks")  # the assignment's title in course.yml
    assert canvas[1][0] == "Points Possible" and canvas[1][column] == f"{FULL:g}"
    rows = {row[3]: row for row in canvas[2:]}
    assert rows["alovelace"][:5] == ["Lovelace, Ada", "", "1001", "alovelace", "A"]
    assert rows["alovelace"][column] == final["ada"] and rows["bbabbage"][column] == final["bob"]
    assert rows["ddahl"][column] == "0" and rows["cid"][column] == final["cid"]  # enrolled, none; graded, unknown
    with open(course / "grading" / "moodle.csv") as handle:
        moodle = {row["Username"]: row for row in csv.DictReader(handle)}
    assert moodle["alovelace"]["ID number"] == "1001" and moodle["alovelace"]["Email address"] == "ada@example.org"
    assert moodle["alovelace"]["Masks"] == final["ada"] and moodle["ddahl"]["Masks"] == "0"


def test_release_takes_a_typo_fix_after_submissions_and_says_what_changed(course):
    # Last in the term: the release changes, so every submission would be graded again after it.
    released = course / "exercises" / "masks" / "masks.ipynb"
    process = release_with(course, lambda text: text.replace("Masks: deciding who may look at whom",
                                                             "Masks: deciding who may look at whom (revised)", 1)
                           .replace('"import torch', '"import torch  # tensors', 1))
    assert process.returncode == 0, process.stderr
    assert "masks: released masks.ipynb (masks.ipynb: 2 cell(s) changed in markdown or comments only" in process.stdout
    assert "(revised)" in released.read_text()


def test_a_course_given_with_course_grades_with_its_own_late_policy(tmp_path):
    """grade-class --course <a copy whose late policy differs>, run from this repository: the late
    penalty in the gradebook is the copy's policy's, and grades.csv, the wide export, the feedback
    and nbgrader's export agree with it (the gradebook's plugin once read the default course.yml)."""
    copy = tmp_path / "other"
    copy.mkdir()
    (copy / "course.yml").write_text(changed_course(
        late_policy={"percent_per_day": 25, "grace_minutes": 0, "max_percent": 100}))
    for name in ("solutions", "exercises"):
        (copy / name).symlink_to(ROOT / name)
    due = COURSE.assignment("masks").due
    folder = tmp_path / "submitted" / "late_lea" / "masks"
    make_submission("masks", solution_answers("masks"), folder)
    (folder / "timestamp.txt").write_text(f"{due + timedelta(days=1, hours=2):%Y-%m-%d %H:%M:%S.%f} UTC")
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    process = run_grader("--course", copy / "course.yml", "grade-class", "--submitted", tmp_path / "submitted",
                         "--out", tmp_path / "out", "--db", db, "--autograded", tmp_path / "autograded")
    assert process.returncode == 0, process.stderr
    with open(tmp_path / "out" / "grades.csv") as handle:
        row, = csv.DictReader(handle)
    assert float(row["late_penalty"]) == pytest.approx(0.5 * float(row["score"]))   # two started days x 25 %
    with Gradebook(db) as gradebook:
        assert gradebook.find_submission("masks", "late_lea").late_submission_penalty == \
            pytest.approx(float(row["late_penalty"]))
    with open(tmp_path / "out" / "grades_wide.csv") as handle:
        assert float(next(csv.DictReader(handle))["masks"]) == pytest.approx(float(row["final_score"]))
    assert "late policy" in (tmp_path / "out" / "feedback" / "late_lea" / "masks" / "feedback.md").read_text()
    export = subprocess.run([str(Path(sys.executable).parent / "nbgrader"), "export", "--to", str(tmp_path / "export.csv"),
                             f"--CourseDirectory.db_url={db}"], cwd=tmp_path, capture_output=True, text=True)
    assert export.returncode == 0, export.stderr
    with open(tmp_path / "export.csv") as handle:
        exported, = [r for r in csv.DictReader(handle) if r["student_id"] == "late_lea"]
    assert float(exported["late_submission_penalty"]) == pytest.approx(float(row["late_penalty"]))
