import json
import subprocess
import sys

import pytest

from tests.notebooks import ROOT


def run_grader(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "autograder", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


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
