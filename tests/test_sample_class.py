"""`make grade` on the sample class: expected scores, nbgrader's gradebook, CSV, feedback, and shards
of it merged."""

import csv
import json
import re
import shutil
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook, MissingEntry

from autograder.scoring import NOT_COUNTED, NOT_RUN, SAME_AS_GATE
from tests.conftest import run_grader
from tests.notebooks import COURSE, ROOT
from tests.sample_class import ALL as ASSIGNMENTS, EXPECTED, LOST, STUDENTS, SUBMITTED, build

pytestmark = pytest.mark.slow   # the whole sample class graded and checked (minutes): make test-all and CI


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded as a course past one machine grades it: two shards at once (one process
    each), merged.  Every test below checks the merged result."""
    out = tmp_path_factory.mktemp("grading")
    shards = [out / f"shard-{k}" for k in (1, 2)]
    running = [subprocess.Popen([sys.executable, "-m", "autograder", "grade-class", "--submitted", SUBMITTED,
                                 "--out", shard, "--db", f"sqlite:///{shard / 'gradebook.db'}",
                                 "--autograded", shard / "autograded", "--jobs", "1", "--shard", f"{k}/2"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for k, shard in enumerate(shards, 1)]
    outputs = [process.communicate(timeout=900) for process in running]
    for process, (_, stderr) in zip(running, outputs):
        assert process.returncode == 0, stderr
        assert "Warning" not in stderr, stderr  # the course's own code warns about nothing while grading
    merged = out / "merged"
    db = f"sqlite:///{merged / 'gradebook.db'}"
    process = run_grader("merge", *shards, "--out", merged, "--db", db, "--autograded", merged / "autograded")
    assert process.returncode == 0, process.stderr
    return merged, db, "\n".join(stdout for stdout, _ in outputs), shards


def test_committed_sample_class_is_up_to_date(tmp_path):
    fresh = build(tmp_path / "submitted")
    committed = sorted(p.relative_to(SUBMITTED) for p in SUBMITTED.rglob("*.ipynb"))
    assert committed == sorted(p.relative_to(fresh) for p in fresh.rglob("*.ipynb"))
    for path in committed:
        assert (SUBMITTED / path).read_bytes() == (fresh / path).read_bytes(), \
            f"run `make sample-class`: {path} is stale"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_reference_answers_pass_every_hidden_test(graded, assignment):
    """ada_perfect hands in every assignment with the reference answers: every hidden test passes."""
    out, _, _, _ = graded
    result = json.loads((out / "results" / "ada_perfect" / assignment / "results.json").read_text())
    failed = [(test["name"], test["output"]) for test in result["tests"] if test["score"] != test["max_score"]]
    assert failed == []
    assert result["score"] == result["max_score"] == COURSE.assignment(assignment).max_score


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_untouched_release_gets_zero(graded, assignment):
    """ben_untouched hands in every released notebook as it is: nothing scores, each stub is named once,
    in its exercise's note, and its tests point there ("not run" when the stub raises as its cell runs,
    "not counted" or "see the note" when its gate names it)."""
    out, _, _, _ = graded
    result = json.loads((out / "results" / "ben_untouched" / assignment / "results.json").read_text())
    assert result["score"] == 0 and result["max_score"] > 0
    notes = {part.split(": ", 1)[0]: part for part in result["output"].split("\n\n")[1:]}
    for test in result["tests"]:
        exercise = test["name"].split(":")[0]
        # (once as the error raised; the traceback may also quote the cell's line that raises it)
        raised = [line for line in notes[exercise].splitlines() if "NotImplementedError" in line
                  and not line.strip().startswith("raise ")]
        assert len(raised) == 1, notes[exercise]
        assert test["output"].startswith((NOT_RUN, NOT_COUNTED, SAME_AS_GATE)), test


def test_scores_are_as_expected(graded):
    out, _, _, _ = graded
    with open(out / "grades.csv") as handle:
        rows = {(row["student"], row["assignment"]): float(row["score"]) for row in csv.DictReader(handle)}
    assert rows == {key: float(value) for key, value in EXPECTED.items()}


def test_each_student_loses_exactly_the_tests_of_their_mistakes(graded):
    """Per submission graded, the tests that earned less than their points are LOST's, no more, no fewer."""
    out, _, _, _ = graded
    for student, work in STUDENTS.items():
        for assignment, answers in work.items():
            if isinstance(answers, dict):
                result = json.loads((out / "results" / student / assignment / "results.json").read_text())
                lost = [test["name"] for test in result["tests"] if test["score"] < test["max_score"]]
                assert sorted(lost) == sorted(LOST.get((student, assignment), ())), (student, assignment)


def test_csv_gives_the_reason_for_submissions_that_could_not_be_graded(graded):
    out, _, _, _ = graded
    with open(out / "grades.csv") as handle:
        rows = {(row["student"], row["assignment"]): row for row in csv.DictReader(handle)}
    assert "empty" in rows["hal_corrupt", "masks"]["reason"]
    assert "not a readable notebook" in rows["hal_corrupt", "scaled_attention"]["reason"]
    assert "was not submitted" in rows["hal_corrupt", "multi_head"]["reason"]
    assert rows["ada_perfect", "masks"]["status"] == "graded"


def test_scores_land_in_nbgraders_gradebook(graded):
    out, db, _, _ = graded
    with Gradebook(db) as gradebook:
        for (student, assignment), score in EXPECTED.items():
            if not (SUBMITTED / student / assignment).is_dir():
                # Nothing handed in: as with nbgrader, no submission (nbgrader export counts it as 0).
                with pytest.raises(MissingEntry):
                    gradebook.find_submission(assignment, student)
                continue
            submission = gradebook.find_submission(assignment, student)
            assert submission.score == score
            assert submission.max_score == COURSE.assignment(assignment).max_score
            assert (out / "autograded" / student / assignment).is_dir()


def test_summary_table_lists_every_student(graded):
    _, _, stdout, _ = graded
    for student in STUDENTS:
        assert student in stdout


def test_feedback_reveals_no_hidden_code_or_values(graded):
    out, _, _, _ = graded
    suites = [line.strip() for exercise in (e for a in COURSE.assignments for e in a.exercises)
              for line in exercise.suite.read_text().splitlines() if len(line.strip()) > 25]
    for path in [*(out / "feedback").rglob("feedback.md"), *(out / "feedback").rglob("feedback.html")]:
        text = re.sub(r"src='data:image/png;base64,[^']*'", "", path.read_text())
        assert "def test_" not in text and "tensor(" not in text and "autograder/" not in text
        assert not [line for line in suites if line in text]
    cara = (out / "feedback" / "cara_no_scaling" / "scaled_attention" / "feedback.md").read_text()
    assert "without the 1/sqrt(d_k) scaling" in cara


# Appended to a copy of a feedback page: once everything has loaded, record how many images did.
IMAGE_PROBE = """<script>window.addEventListener("load", () => {
  const images = [...document.images];
  const loaded = images.filter(image => image.complete && image.naturalWidth > 0).length;
  document.body.setAttribute("data-images", loaded + "/" + images.length);
});</script>"""


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(not chromium(), reason="headless Chromium is not installed (Debian package chromium)")
def test_html_feedback_of_a_masking_mistake_shows_its_pictures_in_a_browser(graded, tmp_path):
    out, _, _, _ = graded
    page = (out / "feedback" / "kim_mask_bugs" / "masks" / "feedback.html").read_text()
    assert "your attention weights" not in page  # the pictures are images, not text
    probe = tmp_path / "feedback.html"
    probe.write_text(page.replace("</body>", IMAGE_PROBE + "</body>"))
    browser = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                              "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=180)
    counts = re.search(r'data-images="(\d+)/(\d+)"', browser.stdout)
    assert counts, browser.stderr[-2000:]
    loaded, total = map(int, counts.groups())
    assert total >= 1 and loaded == total


def test_report_gives_pass_rates_and_flags_tests(graded):
    out, _, _, _ = graded
    process = run_grader("report", "--out", out)
    assert process.returncode == 0, process.stderr
    report = out / "report"
    assert (report / "scores.png").read_bytes().startswith(b"\x89PNG")
    with open(report / "item_analysis.csv") as handle:
        rows = {(row["assignment"], row["test"]): row for row in csv.DictReader(handle)}
    # every hidden test of every graded assignment has a pass rate, over graded submissions only
    for assignment in COURSE.assignments:
        for exercise in assignment.exercises:
            for test in exercise.points:
                assert (assignment.id, f"{exercise.id}: {test}") in rows
    sdpa_scaling = rows["scaled_attention", "sdpa: test_matches_torch_attention"]
    graded_count = sum(1 for (student, a), s in EXPECTED.items() if a == "scaled_attention"
                       and student not in ("hal_corrupt", "jon_unstable", "kim_mask_bugs",
                                           "lea_direct_attention", "max_flash_slips", "noor_rope_layout",
                                           "omar_latent_cache", "pia_pruning_slips"))
    assert int(sdpa_scaling["submissions"]) == graded_count
    assert int(sdpa_scaling["passed"]) == 1  # only ada's attention matches torch's
    text = (report / "report.md").read_text()
    assert "Nobody passed" in text and "Everybody passed" in text
    # the integrity report: the class's named mistakes, the tampering flags, the similar pairs
    assert "| 1 of 16 | attention without the 1/sqrt(d_k) scaling |" in text
    assert "ivy_hostile / scaled_attention: scaled_attention.ipynb: cell sdpa" in text
    page = (report / "integrity.html").read_text()
    assert "<mark>" in page and "The class's mistakes" in page
    with open(report / "integrity.csv") as handle:
        pairs = list(csv.DictReader(handle))
    assert pairs and all(float(pair["score"]) >= 0.6 for pair in pairs)


def test_report_without_grading_is_a_one_line_error(tmp_path):
    process = run_grader("report", "--out", tmp_path)
    assert process.returncode == 2
    assert process.stderr.strip().startswith("error:") and len(process.stderr.strip().splitlines()) == 1


# -- past one machine: the shards behind the fixture ------------------------------------------

def test_each_submission_is_graded_in_exactly_one_shard(graded):
    merged, _, stdout, shards = graded
    counts = [int(count) for count in re.findall(r"(\d+) submission\(s\) of \d+ student\(s\) to grade", stdout)]
    with open(merged / "grades.csv") as handle:
        graded_rows = [row for row in csv.DictReader(handle) if row["status"] != "not submitted"]
    found = [sorted((row["student"], row["assignment"]) for row in csv.DictReader(open(shard / "grades.csv"))
                    if row["status"] != "not submitted") for shard in shards]
    assert len(counts) == 2 and all(counts) and all(found)
    assert not set(found[0]) & set(found[1])
    assert sorted(found[0] + found[1]) == sorted((row["student"], row["assignment"]) for row in graded_rows)
    feedback = sorted(path.relative_to(merged) for path in (merged / "feedback").rglob("*.md"))
    assert feedback == sorted(path.relative_to(shard) for shard in shards for path in (shard / "feedback").rglob("*.md"))
    for path in feedback:
        shard = next(shard for shard in shards if (shard / path).exists())
        assert (merged / path).read_text() == (shard / path).read_text()
