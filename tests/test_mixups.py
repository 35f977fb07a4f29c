"""Mix-ups a new instructor meets, each tried as they would meet it, each cheap (nothing is graded in a
sandbox here): a submission graded on another id's numbers, the single-notebook command without the
student, a secret replaced after numbers left, a manual score carried onto changed work, one student's
kit written over the class's, the README's table left behind by the authoring loop, a roster in git.
"""

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import replace

import pytest
from nbgrader.api import Gradebook

from autograder import gradebook, variants
from autograder.classrun.publish import publish
from autograder.__main__ import main
from autograder.cli.grading import held_lines
from autograder.kits import build_gradescope, build_student_kit
from autograder.layout import Layout
from autograder.results import GRADER_FAILED, NotebookResult, SubmissionResult, zero_results
from autograder.variants import KEY_FILE, UnknownStudent, Variants
from tests.notebooks import COURSE, ROOT, make_submission, solution_answers
from tests.test_customise import one_more_point
from tests.test_variants import ROSTER, own_secret  # noqa: F401 (a fixture)

BASICS, MASKS = COURSE.assignment("attention_basics"), COURSE.assignment("masks")


def hand_out_to_the_roster(tmp_path):
    (tmp_path / "roster.csv").write_text(ROSTER)
    assert main(["variants", "--roster", str(tmp_path / "roster.csv"), "--out", str(tmp_path / "variants"),
                 "--assignment", "attention_basics"]) == 0


def test_every_id_a_course_grades_by_is_mapped_through_the_one_roster(tmp_path, own_secret):
    """nbgrader's folder name, a push repository's owner, Gradescope's sid or email: one mapping, through
    the roster given to make variants; an id it does not know, or one naming two students, is refused."""
    hand_out_to_the_roster(tmp_path)
    mapping = Variants.of(COURSE)
    assert mapping.whose(["alice"]) == "alice"                        # a folder name, a repository's owner
    assert mapping.whose(["", "ALICE@example.edu"]) == "alice"         # Gradescope with an empty sid: the email
    assert mapping.whose(["1002", ""]) == "bob"                        # a numeric sid: the roster's sis_user_id
    with pytest.raises(UnknownStudent, match="'student' names no student of the roster recorded by make variants"):
        mapping.whose(["student"])
    with pytest.raises(UnknownStudent, match="names alice and bob"):
        mapping.whose(["1001", "bob@example.edu"])
    notebook = BASICS.notebooks[0]
    assert mapping.draw(BASICS, notebook, "1002") == mapping.numbers(BASICS, notebook, "bob")
    with pytest.raises(UnknownStudent):
        mapping.draw(BASICS, notebook, "erin@example.edu")


def test_a_gradescope_submitter_the_roster_does_not_know_is_a_grader_fault(tmp_path, own_secret):
    """The zip carries the roster's ids; a submitter it does not know gets no score on anybody's numbers:
    a grader fault (no results.json), and the instructor reads why in the hidden stdout."""
    hand_out_to_the_roster(tmp_path)
    build_gradescope(COURSE, BASICS, tmp_path / "autograder.zip")
    root = tmp_path / "gradescope"
    with zipfile.ZipFile(tmp_path / "autograder.zip") as archive:
        archive.extractall(root / "source")
        shipped = json.loads(archive.read(KEY_FILE))["students"]
    assert shipped == {"alice": {"email": "Alice@Example.edu", "sis_user_id": "1001"},
                       "bob": {"email": "bob@example.edu", "sis_user_id": "1002"}}   # ids only: no names
    make_submission("attention_basics", solution_answers("attention_basics"), root / "submission")
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"sid": "1005", "email": "erin@example.edu"}]}))
    process = subprocess.run([sys.executable, "-m", "autograder", "gradescope", "--assignment", "attention_basics",
                              "--submission", str(root / "submission"), "--results", str(root / "results.json")],
                             cwd=root / "source", capture_output=True, text=True, timeout=300,
                             env={**os.environ, variants.SECRET_ENV: str(tmp_path / "no-secret-on-gradescope")})
    assert process.returncode == 0, process.stderr
    assert "instructor: Gradescope's submitter: '1005' / 'erin@example.edu' names no student of the roster " \
           "shipped in autograder.zip" in process.stdout
    assert process.stdout.strip().splitlines()[-1].startswith("grader fault, no score: attention_basics: ")
    assert not (root / "results.json").exists()   # Gradescope's contract for a failed autograder: no score at all


def test_grading_a_folder_the_roster_does_not_know_is_a_grader_fault(tmp_path, own_secret):
    """grade-class's path: a submission whose folder names no student of the recorded roster is the
    grader's failure, said in its flags, before any of its code runs (no sandbox is needed to see it)."""
    from autograder.grading import Grader
    hand_out_to_the_roster(tmp_path)
    folder = tmp_path / "submitted" / "erin" / "attention_basics"
    path = make_submission("attention_basics", solution_answers("attention_basics"), folder)[0]
    notebook = BASICS.notebooks[0]
    result = Grader(COURSE, None, None, Variants.of(COURSE)).grade_notebook(BASICS, notebook, path, folder, "erin")
    assert result.reason == GRADER_FAILED and "'erin' names no student of the roster recorded by make variants" in \
        result.fault


def test_grading_one_notebook_asks_whose_it_is_when_an_exercise_has_variants(tmp_path, own_secret, capsys):
    notebook = str(COURSE.release_notebook(BASICS, BASICS.notebooks[0]))
    assert main(["grade", "--assignment", "attention_basics", "--no-service", notebook]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "say whose notebook it is with --student ID" in error
    hand_out_to_the_roster(tmp_path)
    capsys.readouterr()
    assert main(["grade", "--assignment", "attention_basics", "--no-service", "--student", "student", notebook]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "'student' names no student of the roster recorded by make variants" in error


def test_the_secret_is_refused_once_numbers_left_the_machine(tmp_path, own_secret, capsys):
    """Nothing handed out yet: replacing the secret changes nobody's numbers. Once variant.json files, a
    student's kit or a Gradescope zip left, it is refused in one line naming them, unless forced."""
    out = ["--out", str(tmp_path / "grading")]
    assert main(["variant-secret", *out]) == 0                        # nothing left yet
    hand_out_to_the_roster(tmp_path)
    build_student_kit(COURSE, tmp_path / "student-kit-alice", None, "alice")
    build_gradescope(COURSE, BASICS, tmp_path / "autograder.zip")
    record = variants.record_path(own_secret)
    assert (record.stat().st_mode & 0o777) == 0o600
    before = own_secret.read_bytes()
    capsys.readouterr()
    assert main(["variant-secret", *out]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and own_secret.read_bytes() == before
    for what in ("variant.json of attention_basics written to", "the student kit of alice", "Gradescope's zip of "
                 "attention_basics", "FORCE=1 replaces it knowingly"):
        assert what in error, what
    assert main(["variant-secret", *out, "--force"]) == 0
    assert own_secret.read_bytes() != before and not record.exists()


def graded_ada(tmp_path):
    """ada's masks graded in full (a record naming her folder, and the gradebook), without a sandbox."""
    folder = tmp_path / "submitted" / "ada" / "masks"
    make_submission("masks", solution_answers("masks"), folder)
    result = SubmissionResult("ada", "masks", [
        NotebookResult(nb.name, [replace(test, score=test.max_score) for test in zero_results(nb.exercises, "")])
        for nb in MASKS.notebooks])
    layout = Layout(tmp_path / "grading")
    layout.save(result, fingerprint="graded", folder=str(folder))
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    gradebook.prepare(db, COURSE, ["masks"])
    recorder = gradebook.Recorder(db, COURSE, tmp_path / "autograded")
    recorder.record(result, folder)
    recorder.close()
    return layout, db


def test_a_manual_score_given_to_one_version_of_the_work_is_held_when_it_changes(tmp_path):
    """A manual score counts for the work it was given to, through regrades of that work; on changed work
    it is held (not counted, out of the gradebook, listed to the instructor) until kept or dropped."""
    layout, db = graded_ada(tmp_path)
    full, padding = MASKS.max_score, MASKS.exercise("padding_mask").max_score

    def final():
        return next(r.final_score for r in publish(COURSE, layout, db) if r.student == "ada")

    def manual(*how):
        return main(["manual-score", "--assignment", "masks", "--student", "ada", "--exercise", "padding_mask",
                     *how, "--db", db, "--out", str(layout.out)])

    def resubmit(comment):
        answers = solution_answers("masks")
        make_submission("masks", {**answers, "padding_mask": answers["padding_mask"] + f"\n# {comment}\n"},
                        layout.out.parent / "submitted" / "ada" / "masks")

    assert manual("--score", "3.5") == 0
    assert final() == full - padding + 3.5 and final() == full - padding + 3.5   # the same work, published again
    resubmit("corrected")
    assert final() == full and gradebook.held_manual_scores(layout.out) == [("ada", "masks", "check_padding_mask", 3.5)]
    with Gradebook(db) as book:
        cell = book.find_grade("check_padding_mask", "masks", "masks", "ada")
        assert cell.manual_score is None and cell.needs_manual_grade   # formgrader flags it too
    told = held_lines(layout.out)
    assert len(told) == 2 and "ada/masks padding_mask: 3.5 by hand" in told[1] and "--keep | --clear" in told[1]
    assert final() == full                                            # held, run after run, until decided
    assert manual("--keep") == 0
    assert final() == full - padding + 3.5 and gradebook.held_manual_scores(layout.out) == []
    resubmit("corrected again")
    assert final() == full and manual("--clear") == 0
    assert final() == full and gradebook.held_manual_scores(layout.out) == [] and held_lines(layout.out) == []
    assert manual("--keep") == 2                                      # nothing held: nothing to keep


def test_one_students_kit_never_writes_over_the_class_kit(tmp_path, own_secret, capsys):
    assert main(["student-kit", "--out", str(tmp_path / "student-kit")]) == 0   # attention_basics is out by now
    class_zip = (tmp_path / "student-kit.zip").read_bytes()
    assert main(["student-kit", "--out", str(tmp_path / "student-kit"), "--student", "alice"]) == 0
    assert f"{tmp_path / 'student-kit-alice'}/ and {tmp_path / 'student-kit-alice.zip'}" in capsys.readouterr().out
    assert (tmp_path / "student-kit.zip").read_bytes() == class_zip
    assert not list((tmp_path / "student-kit").rglob("variant.json"))
    assert (tmp_path / "student-kit-alice" / "attention_basics" / "variant.json").is_file()
    assert main(["student-kit", "--out", str(tmp_path / "student-kit"), "--student", "../x"]) == 2
    assert "cannot name a student's kit" in capsys.readouterr().err


def test_the_authoring_loop_writes_the_readme_table_again(tmp_path):
    """A change to points in course.yml, as docs/authoring.md allows, leaves the README's table behind until
    the loop's `make check` writes it again (tests/test_docs.py checks that table)."""
    from autograder import readme
    from tests.check import write_readme_table
    for name in ("README.md", "course.yml"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    (tmp_path / "course.yml").write_text(one_more_point((tmp_path / "course.yml").read_text(), "padding_mask"))
    stale = (tmp_path / "README.md").read_text()
    assert readme.written(stale, (tmp_path / "course.yml").read_text()) != stale
    write_readme_table(tmp_path)
    fresh = (tmp_path / "README.md").read_text()
    assert readme.written(fresh, (tmp_path / "course.yml").read_text()) == fresh
    loop = (ROOT / "docs" / "authoring.md").read_text()
    assert "make check EXERCISE=" in loop and "the README's table" in loop


def test_files_with_students_personal_data_are_ignored_by_git():
    names = ["roster.csv", "roster-2027.csv", "class_roster.csv", "rosters/section-a.csv", "variants/ada/x/variant.json",
             "student-kit-ada/README.md", "student-kit-ada.zip"]
    listed = subprocess.run(["git", "check-ignore", *names], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert listed == names
    assert "roster" in (ROOT / "docs" / "instructor.md").read_text().split("git-ignored", 1)[0][-400:]
