"""What leaves the repository: workflows, the student kit, and Gradescope's autograder.zip."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from autograder.kits import KIT_FILES
from tests.conftest import run_grader
from tests.notebooks import COURSE, ROOT, make_submission, solution_answers

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml")) + [KIT_FILES / "student-autograde.yml"]
STUDENT_SIDE = [KIT_FILES / "student-autograde.yml"]


def actionlint():
    found = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    if not os.path.exists(found):
        pytest.fail("actionlint is not installed (requirements.txt pins it)")
    return found


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_workflow_passes_actionlint(workflow):
    process = subprocess.run([actionlint(), "-no-color", str(workflow)], capture_output=True, text=True)
    assert process.returncode == 0, process.stdout + process.stderr


@pytest.mark.parametrize("workflow", STUDENT_SIDE, ids=lambda path: path.name)
def test_student_workflow_never_names_hidden_files(workflow):
    text = workflow.read_text()
    assert "autograder/suites" not in text and "solutions/" not in text
    # The course is fetched outside the workspace and only results are uploaded.
    assert "$RUNNER_TEMP/course" in text and "upload-artifact" in text
    uploads = text.split("upload-artifact")[1]
    assert "course" not in uploads


def test_workflows_call_make_targets_that_exist():
    makefile = (ROOT / "Makefile").read_text()
    for workflow in WORKFLOWS:
        for line in workflow.read_text().splitlines():
            if "make " in line and "run:" in line:
                target = line.split("make ", 1)[1].split()[0]
                if target == "-C":
                    target = line.split("make ", 1)[1].split()[2]
                assert f"\n{target}:" in makefile, (workflow.name, target)


# -- the student kit ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kit") / "student-kit"
    process = run_grader("student-kit", "--out", folder)
    assert process.returncode == 0, process.stderr
    return folder


def test_student_kit_holds_no_hidden_suite_or_solution(kit):
    files = [path for path in kit.rglob("*") if path.is_file()]
    names = {str(path.relative_to(kit)) for path in files}
    assert not any(name.startswith("autograder") or "suites" in name or "solutions" in name for name in names)
    text = "\n".join(path.read_text(errors="replace") for path in files)
    for exercise in (e for a in COURSE.assignments for e in a.exercises):
        for test in exercise.points:
            assert test not in text
    # Each notebook holds none of its own solution (later notebooks carry earlier solutions in
    # read-only cells on purpose: assignments are released in order, after the due date).
    from tests.test_course import solution_lines
    for assignment in COURSE.assignments:
        for notebook in assignment.notebooks:
            released = (kit / assignment.id / notebook.filename).read_text()
            leaked = [line for line in solution_lines(COURSE.source_notebook(assignment, notebook))
                      if line in released and not line.startswith(("#", '"""'))]
            assert leaked == []
    with zipfile.ZipFile(kit.with_suffix(".zip")) as archive:
        assert sorted(archive.namelist()) == sorted(names)


def test_student_kit_has_notebooks_readme_requirements_and_workflow(kit):
    for assignment in COURSE.assignments:
        for notebook in assignment.notebooks:
            assert (kit / assignment.id / notebook.filename).is_file()
    assert "torch==2.13.0" in (kit / "requirements.txt").read_text()
    readme = (kit / "README.md").read_text()
    assert "not your grade" in readme and "2.13.0" in readme
    assert (kit / ".github" / "workflows" / "autograde.yml").is_file()


def test_grade_repo_writes_a_summary_and_results_without_failing_on_wrong_answers(kit, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(kit, repo)
    make_submission("scaled_attention", {"sdpa": solution_answers("scaled_attention")["sdpa"].replace(
        "/ math.sqrt(d_k)", "")}, repo / "scaled_attention")
    for assignment in ("attention_basics", "masks", "multi_head", "heads_at_work", "kv_cache"):
        shutil.rmtree(repo / assignment)
    summary = tmp_path / "summary.md"
    process = run_grader("grade-repo", "--repo", repo, "--results", tmp_path / "results", "--summary", summary)
    assert process.returncode == 0, process.stderr
    text = summary.read_text()
    assert "| scaled_attention | sdpa |" in text and "/ 16 |" in text
    assert "without the 1/sqrt(d_k) scaling" in text
    result = json.loads((tmp_path / "results" / "scaled_attention" / "results.json").read_text())
    assert 0 < result["score"] < result["max_score"]


# -- Gradescope --------------------------------------------------------------------------------

HANGING = "def scaled_dot_product_attention(q, k, v, mask=None):\n    while True:\n        pass\n"
GRADESCOPE_FIELDS = {"score", "execution_time", "output", "stdout_visibility", "tests"}
TEST_FIELDS = {"name", "score", "max_score", "status", "output", "visibility"}


@pytest.fixture(scope="module")
def autograder_tree(tmp_path_factory):
    """autograder.zip unpacked the way Gradescope does: the zip's root becomes /autograder/source."""
    root = tmp_path_factory.mktemp("gradescope")
    process = run_grader("gradescope-zip", "--assignment", "scaled_attention", "--out", root / "autograder.zip")
    assert process.returncode == 0, process.stderr
    with zipfile.ZipFile(root / "autograder.zip") as archive:
        names = archive.namelist()
        archive.extractall(root / "source")
    assert "setup.sh" in names and "run_autograder" in names
    assert not any(name.startswith(("solutions/masks", "exercises/masks")) for name in names)
    for script in ("setup.sh", "run_autograder"):
        (root / "source" / script).chmod(0o755)
    # Shorter limits than the course's, so that the hanging submission costs seconds here.
    course_yml = root / "source" / "course.yml"
    course_yml.write_text(course_yml.read_text().replace("cell_timeout: 10", "cell_timeout: 3")
                          .replace("call_timeout: 5 ", "call_timeout: 2 "))
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    return root


def run_autograder(tree, submission_files, time_limit=300):
    submission = tree / "submission"
    shutil.rmtree(submission, ignore_errors=True)
    submission.mkdir()
    for name, data in submission_files.items():
        (submission / name).write_bytes(data)
    env = {**os.environ, "AUTOGRADER_ROOT": str(tree), "AUTOGRADER_PYTHON": sys.executable,
           "AUTOGRADER_TIME_LIMIT": str(time_limit)}
    process = subprocess.run([str(tree / "run_autograder")], env=env, capture_output=True, text=True, timeout=600)
    assert process.returncode == 0, process.stderr
    result = json.loads((tree / "results" / "results.json").read_text())
    assert {"score", "output", "stdout_visibility", "tests"} <= set(result)
    for test in result["tests"]:
        assert TEST_FIELDS <= set(test)
    return result


def notebook_bytes(tmp_path, answers):
    path = make_submission("scaled_attention", answers, tmp_path)[0]
    return path.read_bytes()


def test_gradescope_perfect_submission_whatever_its_name(autograder_tree, tmp_path):
    result = run_autograder(autograder_tree, {"Homework 2 (final).ipynb": notebook_bytes(
        tmp_path, solution_answers("scaled_attention"))})
    assert GRADESCOPE_FIELDS <= set(result)
    assert result["score"] == 16 and all(t["status"] == "passed" for t in result["tests"])


def test_gradescope_buggy_submission(autograder_tree, tmp_path):
    result = run_autograder(autograder_tree, {"scaled_attention.ipynb": notebook_bytes(
        tmp_path, {"sdpa": solution_answers("scaled_attention")["sdpa"].replace("/ math.sqrt(d_k)", "")})})
    assert 0 < result["score"] < 16
    assert any(t["status"] == "failed" and "scaling" in t["output"] for t in result["tests"])


def test_gradescope_hanging_submission(autograder_tree, tmp_path):
    result = run_autograder(autograder_tree, {"scaled_attention.ipynb": notebook_bytes(tmp_path, {"sdpa": HANGING})})
    assert result["score"] == 0 and any("did not finish" in t["output"] for t in result["tests"])


def test_gradescope_corrupt_and_missing_and_several_notebooks(autograder_tree, tmp_path):
    corrupt = run_autograder(autograder_tree, {"scaled_attention.ipynb": b'{"cells": ['})
    assert corrupt["score"] == 0 and "not a readable notebook" in corrupt["output"]
    missing = run_autograder(autograder_tree, {"notes.txt": b"hello"})
    assert missing["score"] == 0 and "no notebook" in missing["output"]
    good = notebook_bytes(tmp_path, solution_answers("scaled_attention"))
    several = run_autograder(autograder_tree, {"a.ipynb": good, "b.ipynb": good})
    assert several["score"] == 0 and "2 notebooks were submitted" in several["output"]


def test_gradescope_always_writes_a_result_even_when_the_grader_is_stopped(autograder_tree, tmp_path):
    result = run_autograder(autograder_tree, {"scaled_attention.ipynb": notebook_bytes(tmp_path, {"sdpa": HANGING})},
                            time_limit=2)
    assert result["score"] == 0 and "stopped before it could write a result" in result["output"]
