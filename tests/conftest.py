import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder import service
from autograder.variants import SECRET_ENV
from tests.notebooks import ROOT


def _tests_secret():
    """The tests' own variant secret, outside the repository and the same in every run, so that every
    test draws the same numbers for a student (tests of the secret itself make their own)."""
    folder = Path(tempfile.gettempdir()) / f"attention-course-tests-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / "variant-secret"
    temporary = folder / f".variant-secret.{os.getpid()}"
    temporary.write_text("5e" * 32 + "\n")   # not random: the tests' numbers must not change between runs
    temporary.chmod(0o600)
    os.replace(temporary, path)
    return path


os.environ[SECRET_ENV] = str(_tests_secret())


def run_grader(*args, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "autograder", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def run_in(folder, *args, check=True, module=True):
    """`python -m args` (or `python args`) in `folder`, with this interpreter's tools on PATH (nbgrader
    runs its own); with `check`, a non-zero exit fails the test with the command's output."""
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    process = subprocess.run([sys.executable, *(["-m"] if module else []), *map(str, args)], cwd=folder,
                             capture_output=True, text=True, env=env, timeout=900)
    if check:
        assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-3000:]
    return process


@pytest.fixture
def grade(tmp_path):
    """Grade one notebook through the command line; returns (results.json as dict, process)."""
    def grade(assignment, notebook):
        out = tmp_path / f"results-{len(list(tmp_path.iterdir()))}.json"
        process = run_grader("grade", "--assignment", assignment, notebook, "--json", out)
        assert process.returncode == 0, process.stderr
        return json.loads(out.read_text()), process
    return grade


def scores_by_exercise(result):
    totals = {}
    for test in result["tests"]:
        exercise = test["name"].split(":")[0]
        totals[exercise] = totals.get(exercise, 0) + test["score"]
    return totals


# The modules that take longest first, so that the two pytest-xdist workers of `make test` finish
# together (longest processing time first; Makefile: --dist loadfile --no-loadscope-reorder), except
# the sample class, which starts first, beside the catalogue.
# Measured wall seconds per module in one make test (fresh clone), roughly: catalogue 145 (three grading
# runs of one process), filter 250 (one grading process, on a machine shared with other jobs),
# notebooks_run 95, lifecycle 80, scale 70, service 60, delivery 55, sample_class 50,
# lti 50, grading 45, variants 25, customise 25, hostile 20, push 20; the rest are quick.  The two workers
# end within about 15 s of each other.
LONGEST_FIRST = ["test_hub.py", "test_sample_class.py", "test_catalogue.py", "test_filter.py", "test_lifecycle.py",
                 "test_grading.py", "test_notebooks_run.py", "test_scale.py", "test_service.py", "test_lti.py",
                 "test_push.py", "test_delivery.py", "test_hostile.py", "test_course.py", "test_customise.py",
                 "test_sandbox.py"]


def pytest_collection_modifyitems(items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: test order within a module stays


def pytest_configure(config):
    """Under pytest-xdist (make test), the controller starts the course's grading service for this
    checkout (`python -m autograder serve`), so that the suite's many `grade` and `grade-class` runs
    here do not each import torch and start their sandboxes.  What it does not serve is graded as
    without it: runs in a copy of the course, with --no-service, with another environment, or before
    it is ready.  tests/test_service.py checks that both ways give the same grades."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    if service.status(ROOT) is not None:
        return  # one runs already (make serve): it serves the same course
    config.course_service = subprocess.Popen([sys.executable, "-m", "autograder", "serve"], cwd=ROOT,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pytest_unconfigure(config):
    process = getattr(config, "course_service", None)
    if process is not None:
        process.terminate()
        process.wait(timeout=60)
