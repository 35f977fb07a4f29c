"""What leaves the repository: workflows, the student kit, and Gradescope's autograder.zip."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta, timezone
from pathlib import Path

import pytest

from autograder.intake import SubmissionError
from autograder.kits import KIT_FILES
from tests.conftest import run_grader
from tests.gradescope_locks import LOCKS, PYTHONS, error_of, pip_for, torch_pin
from tests.notebooks import COURSE, ROOT, make_submission, solution_answers

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml")) + [KIT_FILES / "self-check.yml"]


def actionlint():
    found = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")
    if not os.path.exists(found):
        pytest.fail("actionlint is not installed (requirements.txt pins it)")
    return found


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_workflow_passes_actionlint(workflow):
    process = subprocess.run([actionlint(), "-no-color", str(workflow)], capture_output=True, text=True)
    assert process.returncode == 0, process.stdout + process.stderr


def test_no_workflow_a_student_holds_names_a_secret_or_the_course():
    text = (KIT_FILES / "self-check.yml").read_text()
    assert "secrets." not in text and "autograder" not in text and "solutions" not in text


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

def moment(when):
    """An ISO time the kit command takes."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# The moments of the term the tests below build the kit at, from course.yml's schedule.
AFTER_THE_TERM = moment(max(a.due or a.release for a in COURSE.assignments) + timedelta(days=1))
RELEASED = [a for a in COURSE.assignments if a.release]
# just after the second assignment's release, and just after the third's (past the first ones' due dates)
SECOND, THIRD = (moment(RELEASED[k].release + timedelta(hours=1)) for k in (1, 2))


def build_kit(folder, when, course_yml=None):
    return run_grader(*(["--course", course_yml] if course_yml else []), "student-kit", "--out", folder, "--at", when)


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kit") / "student-kit"
    process = build_kit(folder, AFTER_THE_TERM)
    assert process.returncode == 0, process.stderr
    return folder


def kit_assignments(folder):
    return sorted(path.name for path in folder.iterdir() if path.is_dir() and not path.name.startswith("."))


@pytest.mark.parametrize("when,expected", [
    (SECOND, sorted(a.id for a in RELEASED[:2])),   # the second assignment just released
    (THIRD, sorted(a.id for a in RELEASED[:3])),    # the third, past the first ones' due dates
])
def test_the_kit_holds_only_what_is_released(tmp_path, when, expected):
    process = build_kit(tmp_path / "kit", when)
    assert process.returncode == 0, process.stderr
    assert kit_assignments(tmp_path / "kit") == expected
    assert "triton" not in (tmp_path / "kit" / "requirements.txt").read_text()  # only with the kernel track
    with zipfile.ZipFile(tmp_path / "kit.zip") as archive:
        assert sorted({name.split("/")[0] for name in archive.namelist() if "/" in name} - {".github"}) == expected


def test_the_kit_refuses_a_notebook_that_carries_a_solution_not_yet_due(tmp_path):
    """masks hands out a working scaled_dot_product_attention: released with it before sdpa is due,
    the kit is refused, with one line, and nothing is written."""
    course_yml = ROOT / "course.yml.test-released"
    try:
        course_yml.write_text((ROOT / "course.yml").read_text().replace(
            "\nassignments:\n", "\nreleased: [attention_basics, scaled_attention, masks]\n\nassignments:\n", 1))
        process = build_kit(tmp_path / "kit", SECOND, course_yml)
    finally:
        course_yml.unlink()
    assert process.returncode == 2 and len(process.stderr.strip().splitlines()) == 1
    assert "exercises/masks/masks.ipynb carries the solution of sdpa (scaled_attention" in process.stderr
    assert not (tmp_path / "kit").exists()


def test_no_assignment_carries_a_solution_before_its_due_date():
    from autograder.schedule import order_problems
    assert order_problems(COURSE) == []
    early = dataclasses.replace(COURSE, assignments=[
        dataclasses.replace(a, release=COURSE.assignment("scaled_attention").release) if a.id == "masks" else a
        for a in COURSE.assignments])
    due = COURSE.assignment("scaled_attention").due.astimezone(timezone.utc)
    assert [line.split(" carries ")[1].split(" in cell")[0] for line in order_problems(early)] == \
        [f"sdpa of scaled_attention (due: {due:%Y-%m-%d %H:%M} UTC)"]


def readme_commands(kit_folder):
    """The commands of the kit README's set-up block, each without its comment."""
    text = (kit_folder / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_kits_readme_commands_work_from_a_fresh_unzip(kit, tmp_path):
    """As a student follows the README, in the unzipped kit: the set-up line is the one shown (its
    install is this course's own .venv here, linked in), then the self-check line. A stub fails with
    its reason and exit status 1; a notebook whose visible checks all pass exits 0; an assert with
    no message still gives its line; the kernel prints nothing of its own."""
    with zipfile.ZipFile(kit.with_suffix(".zip")) as archive:
        archive.extractall(tmp_path / "unzipped")
    repo = tmp_path / "unzipped"
    setup, _, check = readme_commands(repo)
    assert setup == "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt"
    assert check == ".venv/bin/python self_check.py"
    (repo / ".venv").symlink_to(ROOT / ".venv")
    make_submission("attention_basics", {"softmax": solution_answers("attention_basics")["softmax"]},
                    repo / "attention_basics")
    notebook = repo / "attention_basics" / "attention_basics.ipynb"
    data = json.loads(notebook.read_text())
    checks = [cell for cell in data["cells"] if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
              == "check_softmax"]
    original = checks[0]["source"]
    data["cells"].insert(data["cells"].index(checks[0]) + 1, {**checks[0], "id": "check-again", "source": original})
    checks[0]["source"] = "assert softmax(np.zeros(3)).sum() == 2\n"   # an assert with no message
    notebook.write_text(json.dumps(data))

    def self_check(*args):
        return subprocess.run(["bash", "-c", " ".join([check, *args])], cwd=repo, capture_output=True, text=True,
                              timeout=300, env={**os.environ, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")})
    process = self_check("attention_basics")
    assert process.returncode == 1 and process.stderr == ""
    summary = (tmp_path / "summary.md").read_text()
    assert "| check_softmax | fails: AssertionError at `assert softmax(np.zeros(3)).sum() == 2` |" in summary
    assert "| attention_basics/attention_basics.ipynb | check_softmax | passes |" in summary   # the real check
    assert "| check_numpy_attention | fails: NotImplementedError: an exercise this cell checks is still the stub |" \
        in summary
    checked = len(COURSE.assignment("attention_basics").exercises)   # one visible check each, and the copy above
    assert f"1 of {checked + 1} visible checks pass." in process.stdout
    make_submission("attention_basics", solution_answers("attention_basics"), repo / "attention_basics")
    process = self_check("attention_basics")
    assert process.returncode == 0 and f"{checked} of {checked} visible checks pass." in process.stdout, process.stdout
    assert "no notebook found" in self_check("no_such_folder").stderr


def test_the_kits_readme_gives_each_assignments_due_date_and_points(kit):
    readme = (kit / "README.md").read_text()
    for assignment in COURSE.assignments:
        assert f"| `{assignment.id}/` | {assignment.title} | {assignment.due:%Y-%m-%d %H:%M} UTC | " \
               f"{assignment.max_score:g} |" in readme


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
    requirements = (kit / "requirements.txt").read_text().splitlines()
    assert "torch==2.13.0" in requirements
    assert 'triton==3.9.0; sys_platform == "linux"' in requirements   # the kernel track is in this kit
    readme = (kit / "README.md").read_text()
    assert '`triton_attention` needs `triton==3.9.0; sys_platform == "linux"`' in readme and "Linux only" in readme
    assert "not your grade" in readme and "2.13.0" in readme
    assert (kit / ".github" / "workflows" / "self-check.yml").is_file() and (kit / "self_check.py").is_file()


def test_the_kit_takes_torchs_cpu_build_and_carries_the_ai_policy(kit, tmp_path):
    """requirements.txt names course.yml's index of CPU wheels first (pip prefers its 2.13.0+cpu to
    PyPI's CUDA build), the README says how to take the CUDA build instead; AGENTS.md and CLAUDE.md are
    course.yml's policy, named in the README. A course without either has neither."""
    from autograder.kits import build_student_kit
    assert COURSE.torch_index_url.endswith("/cpu")
    requirements = (kit / "requirements.txt").read_text().splitlines()
    assert requirements[0] == f"--extra-index-url {COURSE.torch_index_url}"
    readme = (kit / "README.md").read_text()
    assert "delete that first line before installing" in readme and "CUDA build" in readme
    policy = COURSE.ai_policy.read_text()
    assert "You must not" in policy and (kit / "AGENTS.md").read_text() == policy == (kit / "CLAUDE.md").read_text()
    assert "`AGENTS.md`" in readme and "never write your answers" in readme
    plain = dataclasses.replace(COURSE, torch_index_url="", ai_policy=None)
    build_student_kit(plain, tmp_path / "kit", COURSE.assignments[-1].release)
    assert not (tmp_path / "kit" / "AGENTS.md").exists() and not (tmp_path / "kit" / "CLAUDE.md").exists()
    assert (tmp_path / "kit" / "requirements.txt").read_text().startswith("torch==")
    assert "AGENTS.md" not in (tmp_path / "kit" / "README.md").read_text()
    assert "{" not in (tmp_path / "kit" / "README.md").read_text().replace("{torch}", "")


# -- Gradescope --------------------------------------------------------------------------------

@pytest.mark.slow   # pip resolves the lock for three Pythons (half a minute): make test-all
def test_the_gradescope_lock_of_each_python_resolves(tmp_path):
    """pip's resolver, for the Python of each Gradescope image (metadata only, the three at once):
    each lock with its dependencies, and torch at the course's version on its own (it comes from
    the CPU-only index)."""
    def resolve(short, python):
        pins = [line for line in (LOCKS / f"requirements-{short}.txt").read_text().splitlines()
                if line and not line.startswith("#")]
        rest = tmp_path / f"without-torch-{short}.txt"
        rest.write_text("\n".join(pins[1:]) + "\n")
        found = [pip_for(python, "-r", str(rest)), pip_for(python, "--no-deps", torch_pin())]
        return pins, [error_of(process) for process in found if process.returncode != 0]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(zip(PYTHONS, pool.map(lambda item: resolve(*item), PYTHONS.items())))
    for short, (pins, errors) in results.items():
        assert errors == [], f"Python {PYTHONS[short]}: {errors}"
        assert pins[0] == torch_pin()
        names = {pin.split("==")[0].lower() for pin in pins}
        assert {"numpy", "matplotlib", "nbformat", "pytest", "pyyaml", "networkx", "pyseccomp"} <= names, short

HANGING = "def scaled_dot_product_attention(q, k, v, mask=None):\n    while True:\n        pass\n"
# Gradescope's results.json specification: every field it defines, at the top and per test.
SPEC_FIELDS = {"score", "execution_time", "output", "output_format", "test_output_format", "test_name_format",
               "visibility", "stdout_visibility", "extra_data", "tests", "leaderboard"}
SPEC_TEST_FIELDS = {"score", "max_score", "status", "name", "name_format", "number", "output", "output_format",
                    "tags", "visibility", "extra_data"}
GRADESCOPE_FIELDS = {"score", "execution_time", "output", "output_format", "visibility", "stdout_visibility", "tests"}
TEST_FIELDS = {"name", "number", "tags", "score", "max_score", "status", "output", "output_format", "visibility"}


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
    suites = sorted(name.rsplit("/", 1)[1] for name in names if name.startswith("autograder/suites/test_"))
    assert suites == ["test_sdpa.py"]  # its own hidden suite, no other
    assert "packages.txt" not in names   # nothing beyond the lock: Triton only comes with the kernel track
    for script in ("setup.sh", "run_autograder"):
        (root / "source" / script).chmod(0o755)
    # Shorter limits than the course's, so that the hanging submission costs seconds here.
    course_yml = root / "source" / "course.yml"
    course_yml.write_text(course_yml.read_text().replace("cell_timeout: 10", "cell_timeout: 3")
                          .replace("call_timeout: 5 ", "call_timeout: 2 "))
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    return root


def test_gradescope_zip_of_the_kernel_track_adds_triton_and_only_its_suites(tmp_path):
    from autograder.kits import pinned
    process = run_grader("gradescope-zip", "--assignment", "triton_attention", "--out", tmp_path / "autograder.zip")
    assert process.returncode == 0, process.stderr
    assert "base image: Debian 12 (Python 3.11), Ubuntu 24.04 (Python 3.12)" in process.stdout
    assert "no build for Python 3.10: setup.sh refuses those images" in process.stdout
    with zipfile.ZipFile(tmp_path / "autograder.zip") as archive:
        names = archive.namelist()
        packages = archive.read("packages.txt").decode()
        pythons = archive.read("pythons.txt").decode().split()
    assert packages.splitlines() == pinned(COURSE, COURSE.assignment("triton_attention").packages)
    assert pythons == ["3.11", "3.12"]
    suites = sorted(name.rsplit("/", 1)[1] for name in names if name.startswith("autograder/suites/test_"))
    assert suites == sorted(exercise.suite.name for exercise in COURSE.assignment("triton_attention").exercises)


def test_every_zips_packages_install_on_the_pythons_it_names_and_no_other(tmp_path):
    """For each assignment that adds packages: pip's resolver installs packages.txt on each Python the
    zip names (pythons.txt) and finds nothing on the others, so setup.sh's refusal is the truth."""
    from autograder.kits import IMAGES, build_gradescope
    for assignment in (a for a in COURSE.assignments if a.packages):
        archive, pythons = build_gradescope(COURSE, assignment, tmp_path / f"{assignment.id}.zip")
        with zipfile.ZipFile(archive) as handle:
            (tmp_path / "packages.txt").write_bytes(handle.read("packages.txt"))
            assert handle.read("pythons.txt").decode().split() == pythons
        with ThreadPoolExecutor(max_workers=3) as pool:
            resolved = dict(zip(IMAGES, pool.map(
                lambda short: pip_for(PYTHONS[short], "-r", str(tmp_path / "packages.txt")).returncode == 0, IMAGES)))
        assert [short for short, ok in resolved.items() if ok] == pythons, assignment.id


def test_gradescope_setup_refuses_an_image_whose_python_the_packages_lack(tmp_path):
    process = run_grader("gradescope-zip", "--assignment", "triton_attention", "--out", tmp_path / "autograder.zip")
    assert process.returncode == 0, process.stderr
    with zipfile.ZipFile(tmp_path / "autograder.zip") as archive:
        archive.extractall(tmp_path / "tree" / "source")
    python310 = 'case "$2" in *print*) echo 3.10 ;; *) exit 0 ;; esac'   # Ubuntu 22.04's python3, as setup.sh asks it
    process, apt = run_setup(tmp_path / "tree", tmp_path, {"python3": python310, "bwrap": "echo bwrap ran >&2"})
    assert process.returncode != 0
    assert process.stderr.strip() == ("setup.sh: triton==3.9.0 has no build for this image's Python 3.10: choose an "
                                      "image with Python 3.11 or 3.12 (Debian 12: 3.11, Ubuntu 24.04: 3.12)")
    assert "install -y -qq python3" in apt   # what ran before: the image's own Python, nothing of the course


def run_autograder(tree, submission_files, time_limit=300, extra_env=None, stdout=None):
    submission = tree / "submission"
    shutil.rmtree(submission, ignore_errors=True)
    submission.mkdir()
    for name, data in submission_files.items():
        if isinstance(data, Path):
            (submission / name).symlink_to(data)
        else:
            (submission / name).write_bytes(data)
    env = {**os.environ, "AUTOGRADER_ROOT": str(tree), "AUTOGRADER_PYTHON": sys.executable,
           "AUTOGRADER_TIME_LIMIT": str(time_limit), **(extra_env or {})}
    process = subprocess.run([str(tree / "run_autograder")], env=env, capture_output=True, text=True, timeout=600)
    assert process.returncode == 0, process.stderr
    if stdout is not None:
        stdout.append(process.stdout)
    if not (tree / "results" / "results.json").exists():
        return None   # the grader failed: Gradescope's "autograder failed", no score
    result = json.loads((tree / "results" / "results.json").read_text())
    assert {"score", "output", "stdout_visibility", "tests"} <= set(result)
    assert set(result) - {"max_score"} <= SPEC_FIELDS   # nothing Gradescope does not define (max_score: ours)
    for test in result["tests"]:
        assert TEST_FIELDS <= set(test) <= SPEC_TEST_FIELDS
    return result


def notebook_bytes(tmp_path, answers):
    path = make_submission("scaled_attention", answers, tmp_path)[0]
    return path.read_bytes()


def test_gradescope_perfect_submission_whatever_its_name(autograder_tree, tmp_path):
    result = run_autograder(autograder_tree, {"Homework 2 (final).ipynb": notebook_bytes(
        tmp_path, solution_answers("scaled_attention"))})
    assert GRADESCOPE_FIELDS <= set(result)
    assert result["score"] == COURSE.assignment("scaled_attention").max_score and all(t["status"] == "passed" for t in result["tests"])
    assert (result["output_format"], result["test_output_format"]) == ("md", "md")
    assert [t["number"] for t in result["tests"]] == [f"1.{i}" for i in range(1, len(result["tests"]) + 1)]
    assert {tag for t in result["tests"] for tag in t["tags"]} == {"sdpa"}


def test_gradescope_corrupt_and_missing_and_several_notebooks(autograder_tree, tmp_path):
    corrupt = run_autograder(autograder_tree, {"scaled_attention.ipynb": b'{"cells": ['})
    assert corrupt["score"] == 0 and "not a readable notebook" in corrupt["output"]
    from autograder.intake import choose_notebooks, find_notebooks
    (tmp_path / "missing").mkdir()
    (tmp_path / "missing" / "notes.txt").write_text("hello")
    with pytest.raises(SubmissionError, match="no notebook"):
        choose_notebooks(COURSE.assignment("scaled_attention"), find_notebooks(tmp_path / "missing"))
    (tmp_path / "several" / "sub").mkdir(parents=True)
    for name in ("several/a.ipynb", "several/sub/b.ipynb"):
        (tmp_path / name).write_text("{}")
    with pytest.raises(SubmissionError, match="2 notebooks were submitted"):
        choose_notebooks(COURSE.assignment("scaled_attention"), find_notebooks(tmp_path / "several"))


def test_gradescope_refuses_links_out_of_the_upload_and_huge_uploads(autograder_tree, tmp_path):
    solution = autograder_tree / "source" / "solutions" / "scaled_attention" / "scaled_attention.ipynb"
    linked = run_autograder(autograder_tree, {"scaled_attention.ipynb": solution})
    assert linked["score"] == 0 and "is a link to a place outside the submission" in linked["output"]
    for index in range(2100):
        (tmp_path / f"junk{index}.txt").touch()
    from autograder.intake import choose_notebooks, find_notebooks
    with pytest.raises(SubmissionError, match="more than 2000 files"):
        choose_notebooks(COURSE.assignment("scaled_attention"), find_notebooks(tmp_path))


def test_gradescope_gets_no_score_when_the_grader_is_stopped(autograder_tree, tmp_path):
    """A grader stopped by its time limit is a fault: no results.json (Gradescope's contract for an
    autograder that failed: no score, run again), the reason in the instructor's stdout."""
    stdout = []
    result = run_autograder(autograder_tree, {"scaled_attention.ipynb": notebook_bytes(tmp_path, {"sdpa": HANGING})},
                            time_limit=2, stdout=stdout)
    assert result is None
    assert "instructor: no score: the grader failed on this submission" in stdout[0]


def test_a_gradescope_sandbox_that_cannot_start_is_a_fault_said_to_the_instructor_only(autograder_tree, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    (bin_dir / "bwrap").chmod(0o755)
    stdout = []
    result = run_autograder(autograder_tree, {"scaled_attention.ipynb": notebook_bytes(
        tmp_path, solution_answers("scaled_attention"))}, extra_env={"PATH": f"{bin_dir}:{os.environ['PATH']}"},
        stdout=stdout)
    assert result is None   # a grader fault: no score, and nothing of the reason for the student
    assert "No permissions to create new namespace" in stdout[0] and "grader fault, no score" in stdout[0]


def run_setup(tree, tmp_path, fakes):
    """setup.sh as Gradescope runs it, in a scratch root: apt-get and the given tools are fakes on
    PATH, and the image's venv is this machine's (so nothing is downloaded)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in {"apt-get": 'echo "apt-get $*" >> "$(dirname "$0")/apt.log"', **fakes}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    root = tmp_path / "autograder"
    root.mkdir()
    (root / "venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    process = subprocess.run(["bash", str(tree / "source" / "setup.sh")], env=env, capture_output=True,
                             text=True, timeout=600)
    return process, (bin_dir / "apt.log").read_text()


def test_gradescope_setup_uses_the_images_python_and_proves_the_sandbox(autograder_tree, tmp_path):
    process, apt = run_setup(autograder_tree, tmp_path, {})
    assert process.returncode == 0, process.stderr
    assert "install -y -qq python3 python3-venv bubblewrap" in apt and "python3.11" not in apt
    full = COURSE.assignment("scaled_attention").max_score
    assert f"the sandbox works here: solutions/scaled_attention/scaled_attention.ipynb gets {full:g} / {full:g}" \
        in process.stdout


@pytest.mark.parametrize("fakes,reason", [
    ({"bwrap": "echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1"},
     "the grader cannot run on this image: the sandbox (bubblewrap) cannot start: bwrap: setting up uid map"),
    ({"python3": "echo Python 3.8.10; exit 1"}, "the grader needs Python 3.10 or newer"),
])
def test_gradescope_setup_fails_the_build_when_the_image_cannot_grade(autograder_tree, tmp_path, fakes, reason):
    process, _ = run_setup(autograder_tree, tmp_path, fakes)
    assert process.returncode != 0 and reason in process.stderr, process.stderr
