"""Per-student variants: each student graded on their own numbers, named when they answer another's;
the numbers reproducible from the secret and the id alone; the secret private, and in no file that
leaves the course by any delivery path (the release, a student kit, Gradescope's zip, variant.json).
"""

import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder import variants
from autograder.suites import test_by_hand, test_cache_budget
from autograder.variants import SECRET_ENV, Variants
from tests.conftest import run_grader
from tests.notebooks import COURSE, make_submission, solution_answers

BASICS, LATENT = COURSE.assignment("attention_basics"), COURSE.assignment("latent_attention")
VARIANT_EXERCISES = [(a.id, e.id) for a in COURSE.assignments for e in a.exercises if e.variant]


def numbers(assignment, student):
    return Variants.of(COURSE).draw(assignment, assignment.notebooks[0], student)


def by_hand_written_out(student):
    """by_hand as a student who worked out `student`'s numbers writes it: numbers, not code."""
    mine = numbers(BASICS, student)
    scores = test_by_hand.scores_of(mine)
    weights = test_by_hand.softmax(scores)
    context = test_by_hand.weighted(weights, mine["values"])
    rounded = {name: [round(x, 2) for x in part] for name, part in
               (("scores", scores), ("weights", weights), ("context", context))}
    return f"by_hand = {rounded!r}\n"


def cache_budget_written_out(student):
    mine = numbers(LATENT, student)
    counts = {kind: test_cache_budget.fitting(mine, test_cache_budget.per_token(mine, kind))
              for kind in test_cache_budget.KINDS}
    return f"cache_budget = {counts!r}\n"


def test_the_course_has_variant_exercises_in_three_assignments():
    """course.yml's variant exercises: at least three, of different kinds (by hand, costs, a trained task)."""
    assert len({assignment for assignment, _ in VARIANT_EXERCISES}) >= 3, VARIANT_EXERCISES


def test_each_student_has_numbers_of_their_own_drawn_again_from_the_secret_and_the_id(tmp_path):
    one, other = Variants.of(COURSE), Variants.of(COURSE)
    notebook = BASICS.notebooks[0]
    assert one.draw(BASICS, notebook, "alice") == other.draw(BASICS, notebook, "alice")   # reproducible
    drawn = {json.dumps(one.draw(BASICS, notebook, f"student{i}")) for i in range(40)}
    assert len(drawn) == 40                       # every student their own
    assert one.default(BASICS, notebook) not in map(json.loads, drawn)   # the released numbers are nobody's
    assert one.seed(BASICS, notebook, "alice") != one.seed(LATENT, LATENT.notebooks[0], "alice")
    # Another secret gives other numbers: the id alone tells nobody a student's numbers.
    secret = tmp_path / "secret"
    secret.write_text("ab" * 32 + "\n")
    secret.chmod(0o600)
    os.environ[SECRET_ENV], kept = str(secret), os.environ[SECRET_ENV]
    try:
        assert Variants.of(COURSE).draw(BASICS, notebook, "alice") != one.draw(BASICS, notebook, "alice")
    finally:
        os.environ[SECRET_ENV] = kept


@pytest.fixture
def own_secret(tmp_path, monkeypatch):
    """A copy of the tests' secret (the same numbers), whose record of what left the machine is this test's
    alone: a test that hands numbers out never makes another test's students unknown."""
    secret = tmp_path / "secret" / "variant-secret"
    secret.parent.mkdir()
    secret.write_bytes(Path(os.environ[SECRET_ENV]).read_bytes())
    secret.chmod(0o600)
    monkeypatch.setenv(SECRET_ENV, str(secret))
    return secret


@pytest.fixture(scope="module")
def two_students(tmp_path_factory):
    """alice and bob hand in the same numbers, alice's, written out by hand; carol the reference code."""
    root = tmp_path_factory.mktemp("variants")
    basics, latent = solution_answers("attention_basics"), solution_answers("latent_attention")
    for student in ("alice", "bob"):
        make_submission("attention_basics", {**basics, "by_hand": by_hand_written_out("alice")},
                        root / "submitted" / student / "attention_basics")
        make_submission("latent_attention", {"cache_bytes": latent["cache_bytes"],   # the rest left as released
                                             "cache_budget": cache_budget_written_out("alice")},
                        root / "submitted" / student / "latent_attention")
    make_submission("attention_basics", basics, root / "submitted" / "carol" / "attention_basics")
    process = run_grader("grade-class", "--submitted", root / "submitted", "--out", root / "out",
                         "--db", f"sqlite:///{root / 'gradebook.db'}", timeout=900)
    assert process.returncode == 0, process.stderr
    return root


def exercise_tests(root, student, assignment, exercise):
    result = json.loads((root / "out" / "results" / student / assignment / "results.json").read_text())
    return {test["name"].split(": ", 1)[1]: test for test in result["tests"] if test["name"].startswith(exercise + ":")}


def test_two_students_each_graded_on_their_own_numbers_and_named_on_the_others(two_students):
    for assignment, exercise, lost in (("attention_basics", "by_hand", {"test_scores", "test_context"}),
                                       ("latent_attention", "cache_budget", {"test_tokens_that_fit"})):
        alice = exercise_tests(two_students, "alice", assignment, exercise)
        assert all(test["score"] == test["max_score"] for test in alice.values()), alice
        bob = exercise_tests(two_students, "bob", assignment, exercise)
        assert {name for name, test in bob.items() if test["score"] < test["max_score"]} == lost
        cause = {"by_hand": test_by_hand, "cache_budget": test_cache_budget}[exercise].CAUSES["other_variant"]
        for name in lost:
            assert bob[name]["score"] == 0, bob[name]
            assert "alice" not in bob[name]["output"]   # the student is not told whose numbers they are
        said = [name for name in sorted(lost) if cause in bob[name]["output"]]   # the cause is said once
        assert len(said) == 1 and all("The hint given above applies here too." in bob[name]["output"]
                                      for name in lost - set(said)), {name: bob[name]["output"] for name in lost}
    carol = exercise_tests(two_students, "carol", "attention_basics", "by_hand")
    assert all(test["score"] == test["max_score"] for test in carol.values())


def test_the_instructor_is_told_whose_variant_an_answer_holds(two_students):
    rows = {row.split(",")[0] + "/" + row.split(",")[1]: row
            for row in (two_students / "out" / "grades.csv").read_text().splitlines()[1:]}
    assert "by_hand: the answers are those of alice's variant" in rows["bob/attention_basics"]
    assert "cache_budget: the answers are those of alice's variant" in rows["bob/latent_attention"]
    assert "variant" not in rows["alice/attention_basics"] and "variant" not in rows["carol/attention_basics"]
    process = run_grader("report", "--out", two_students / "out")
    assert process.returncode == 0, process.stderr
    report = (two_students / "out" / "report" / "report.md").read_text()
    assert "bob / attention_basics: attention_basics.ipynb: by_hand: the answers are those of alice's variant" in report


def test_the_secret_is_made_once_private_and_outside_the_repository(tmp_path):
    secret = tmp_path / "config" / "variant-secret"
    env = {SECRET_ENV: str(secret)}
    made = run_grader("variant-secret", "--out", tmp_path / "grading", env=env)
    assert made.returncode == 0 and "Made the course's variant secret" in made.stdout, made.stderr
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(secret.read_text().strip()) == 64
    first = secret.read_text()
    assert run_grader("variant-secret", "--if-missing", env=env).returncode == 0 and secret.read_text() == first
    (tmp_path / "grading" / "results" / "alice").mkdir(parents=True)    # grades exist now
    refused = run_grader("variant-secret", "--out", tmp_path / "grading", env=env)
    assert refused.returncode == 2 and "grades exist" in refused.stderr and secret.read_text() == first
    forced = run_grader("variant-secret", "--out", tmp_path / "grading", "--force", env=env)
    assert forced.returncode == 0 and secret.read_text() != first
    secret.chmod(0o644)
    shared = run_grader("grade", "--assignment", "attention_basics", "--no-service", "--student", "alice",
                        COURSE.release_notebook(BASICS, BASICS.notebooks[0]), env=env)
    assert shared.returncode == 2
    assert shared.stderr.strip() == f"error: the variant secret {secret} can be read by others (mode 644): chmod 600 {secret}"
    inside = run_grader("variant-secret", env={SECRET_ENV: str(COURSE.root / "variant-secret")})
    assert inside.returncode == 2 and "inside the course repository" in inside.stderr
    assert not (COURSE.root / "variant-secret").exists()


def test_an_assignment_without_variants_needs_no_secret(tmp_path, monkeypatch):
    """Grading starts (grading.open_grader) only once the keys its assignments need are made: none for an
    assignment without variant exercises, so a course without them runs as it did without a secret."""
    monkeypatch.setenv(SECRET_ENV, str(tmp_path / "no-such-secret"))
    plain = [a for a in COURSE.assignments if not variants.has_variants(a)]
    assert plain and len(plain) < len(COURSE.assignments)
    Variants.of(COURSE).require_keys(plain)
    with pytest.raises(variants.CourseError, match="cannot read the variant secret .*no-such-secret: No such file"):
        Variants.of(COURSE).require_keys([BASICS])


def files_of(folder):
    return [path for path in Path(folder).rglob("*") if path.is_file()]


def holds(path, text):
    data = path.read_bytes()
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            return any(text.encode() in archive.read(name) for name in archive.namelist())
    return text.encode() in data


def test_the_secret_leaves_by_no_delivery_path(tmp_path, two_students, own_secret):
    """The release folder, the whole class's and one student's kit, Gradescope's zip, the variant.json files
    and what grading writes hold neither the secret nor, but for the zip, a key made from it."""
    secret = variants.read_secret(COURSE).decode()
    keys = {assignment.id: Variants.of(COURSE).key(assignment.id).hex() for assignment in COURSE.assignments
            if variants.has_variants(assignment)}
    kit = run_grader("student-kit", "--out", tmp_path / "kit", "--at", "2027-02-01T00:00:00Z")
    own = run_grader("student-kit", "--out", tmp_path / "kit", "--at", "2027-02-01T00:00:00Z", "--student", "alice")
    sent = run_grader("variants", "--submitted", two_students / "submitted", "--out", tmp_path / "variants",
                      "--assignment", "attention_basics", "--assignment", "latent_attention")
    zipped = run_grader("gradescope-zip", "--assignment", "attention_basics", "--out", tmp_path / "autograder.zip")
    for process in (kit, own, sent, zipped):
        assert process.returncode == 0, process.stderr
    assert sorted(p.relative_to(tmp_path / "variants").as_posix() for p in files_of(tmp_path / "variants")) == [
        f"{s}/{a}/variant.json" for s in ("alice", "bob", "carol") for a in ("attention_basics", "latent_attention")]
    mine = json.loads((tmp_path / "kit-alice" / "attention_basics" / "variant.json").read_text())
    assert mine == json.loads((tmp_path / "variants" / "alice" / "attention_basics" / "variant.json").read_text())
    assert mine["notebooks"]["attention_basics"] == numbers(BASICS, "alice")
    assert not (tmp_path / "kit" / "attention_basics" / "variant.json").exists()   # the class's kit: nobody's numbers
    with zipfile.ZipFile(tmp_path / "autograder.zip") as archive:
        shipped = json.loads(archive.read(variants.KEY_FILE))
        assert shipped == {"assignment": "attention_basics", "key": keys["attention_basics"],   # and the class's ids
                           "students": {"alice": {}, "bob": {}, "carol": {}}}
        assert (archive.getinfo(variants.KEY_FILE).external_attr >> 16) & 0o777 == 0o600
    released = [*files_of(COURSE.root / "exercises"), *files_of(tmp_path / "kit"), tmp_path / "kit.zip",
                *files_of(tmp_path / "kit-alice"), tmp_path / "kit-alice.zip", tmp_path / "autograder.zip",
                *files_of(tmp_path / "variants"), *files_of(two_students / "out")]
    assert len(released) > 50
    for path in released:
        assert not holds(path, secret), path
        for assignment, key in keys.items():
            assert path == tmp_path / "autograder.zip" and assignment == "attention_basics" or not holds(path, key), path


ROSTER = ("student,name,email,sis_user_id\n"
          'alice,"Liddell, Alice",Alice@Example.edu,1001\n'
          'bob,"Builder, Bob",bob@example.edu,1002\n')


def test_gradescope_grades_the_submitter_of_the_metadata_with_the_zips_key_alone(tmp_path, own_secret):
    """Gradescope's sid or email is mapped through the roster given to make variants, shipped in the zip:
    alice by her email alone (an empty sid), bob by his numeric sid (the roster's sis_user_id)."""
    root = tmp_path / "autograder"
    (tmp_path / "roster.csv").write_text(ROSTER)
    handed = run_grader("variants", "--roster", tmp_path / "roster.csv", "--out", tmp_path / "variants",
                        "--assignment", "attention_basics")
    zipped = run_grader("gradescope-zip", "--assignment", "attention_basics", "--out", tmp_path / "autograder.zip")
    assert handed.returncode == 0 and zipped.returncode == 0, handed.stderr + zipped.stderr
    with zipfile.ZipFile(tmp_path / "autograder.zip") as archive:
        archive.extractall(root / "source")
    (root / "source" / "run_autograder").chmod(0o755)
    notebook = make_submission("attention_basics", {**solution_answers("attention_basics"),
                                                    "by_hand": by_hand_written_out("alice")}, tmp_path / "upload")[0]
    scores = {}
    for student, user in (("alice", {"sid": "", "email": "alice@example.edu"}), ("bob", {"sid": "1002", "email": ""})):
        (root / "submission").mkdir(exist_ok=True)
        (root / "submission" / notebook.name).write_bytes(notebook.read_bytes())
        (root / "submission_metadata.json").write_text(json.dumps({"users": [user]}))
        env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable,
               SECRET_ENV: str(tmp_path / "no-secret-on-gradescope")}
        process = subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True, text=True,
                                 timeout=600)
        assert process.returncode == 0, process.stderr
        result = json.loads((root / "results" / "results.json").read_text())
        scores[student] = {t["name"].split(": ", 1)[1]: t["score"] for t in result["tests"] if t["name"].startswith("by_hand:")}
    assert scores["alice"] == {"test_answer_format": 1, "test_scores": 3, "test_weights": 3, "test_context": 3}
    assert scores["bob"]["test_scores"] == 0 and scores["bob"]["test_context"] == 0 and scores["bob"]["test_weights"] == 3


def test_a_students_copy_shows_their_own_numbers(tmp_path, own_secret):
    """The released notebook, run beside one student's variant.json, prints and checks that student's numbers."""
    process = run_grader("student-kit", "--out", tmp_path / "kit", "--at", "2027-02-01T00:00:00Z", "--student", "alice")
    assert process.returncode == 0, process.stderr
    import nbformat
    notebook = nbformat.read(tmp_path / "kit-alice" / "attention_basics" / "attention_basics.ipynb", as_version=4)
    cell = next(c for c in notebook.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "variant")
    shown = subprocess.run([sys.executable, "-c", cell.source], cwd=tmp_path / "kit-alice" / "attention_basics",
                           capture_output=True, text=True, timeout=60)
    mine = numbers(BASICS, "alice")
    assert shown.returncode == 0 and f"query:  {mine['query']}" in shown.stdout, shown.stderr
    elsewhere = subprocess.run([sys.executable, "-c", cell.source], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "nobody's numbers" in elsewhere.stdout, elsewhere.stderr


def test_every_catalogued_slip_shows_on_every_drawn_variant():
    """Each generator draws numbers on which the slips its suite names cannot pass for right answers, and
    never the released numbers (1000 draws each: any secret's students)."""
    import math
    import random

    from autograder.reference import reference_namespace
    from autograder.suites import test_pattern_floor

    def drawn(assignment_id, count=1000):
        assignment = COURSE.assignment(assignment_id)
        namespace = reference_namespace(COURSE.source_notebook(assignment, assignment.notebooks[0]))
        return namespace["DEFAULT_VARIANT"], [namespace["make_variant"](random.Random(seed)) for seed in range(count)]

    released, draws = drawn("attention_basics")
    b = test_by_hand
    for v in draws:
        assert v != released
        weights = b.softmax(b.scores_of(v))
        assert not b.near(weights, b.softmax(b.scores_of(v, scale=False)), b.WEIGHTS)
        assert not b.near(b.weighted(weights, v["values"]), b.weighted(weights, v["keys"]), b.CONTEXT)
        theirs = b.softmax(b.scores_of(released))
        assert not b.near(b.weighted(theirs, released["values"]), b.weighted(theirs, v["values"]), b.CONTEXT)
    released, draws = drawn("latent_attention")
    c = test_cache_budget
    for v in draws:
        assert v != released
        assert any(c.fitting(v, c.per_token(v, k)) != c.fitting(v, c.per_token(v, k), rounded=True) for k in c.KINDS)
        assert all(c.fitting(v, c.per_token(v, k)) != c.fitting(v, c.per_token(v, k), gib=10**9) for k in c.KINDS)
    released, draws = drawn("heads_at_work")
    p = test_pattern_floor
    for v in draws:
        assert v["period"] != released["period"]
        assert v["period"] != released["period"] - 1   # else the released answer (2) reads as the period slip
        first = v["period"] - 1
        assert not p.close((v["seq_len"] - first) / v["seq_len"] * math.log(v["vocab"]), p.floor_of(v))
        assert not p.close(p.floor_of(released), p.floor_of(v)) and not p.close(p.floor_of(released), p.floor_of(v, 2))


def test_a_new_secret_grades_the_assignments_with_variants_again(tmp_path, monkeypatch):
    """A submission is graded again when what its grade depends on changes: for an assignment with
    variants, the secret too (every student's numbers change with it); for one without, not."""
    from autograder.classrun.tasks import course_fingerprint
    masks = COURSE.assignment("masks")
    before = course_fingerprint(COURSE, BASICS), course_fingerprint(COURSE, masks)
    secret = tmp_path / "secret"
    secret.write_text("cd" * 32 + "\n")
    secret.chmod(0o600)
    monkeypatch.setenv(SECRET_ENV, str(secret))
    after = course_fingerprint(COURSE, BASICS), course_fingerprint(COURSE, masks)
    assert after[0] != before[0] and after[1] == before[1]
