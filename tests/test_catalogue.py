"""The hidden suites are sharp and fair: every catalogued mistake loses points on its exercise with
feedback naming the likely cause, and every correct variant gets full marks.

The whole catalogue is graded as one class by `grade-class`, the command instructors run.
"""

import json
import re

import pytest

from tests.catalogue import MISTAKES, VARIANTS
from tests.conftest import run_grader
from tests.notebooks import COURSE, make_submission, solution_answers

ASSIGNMENT_OF = {exercise.id: assignment.id for assignment in COURSE.assignments for exercise in assignment.exercises}
MAX_SCORE = {exercise.id: exercise.max_score for assignment in COURSE.assignments for exercise in assignment.exercises}


def student_id(kind, entry):
    return f"{kind}__{entry.exercise}__{re.sub(r'[^a-z0-9]+', '_', entry.name.lower()).strip('_')}"


ENTRIES = [("mistake", m) for m in MISTAKES] + [("variant", v) for v in VARIANTS]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalogue")
    for kind, entry in ENTRIES:
        assignment = ASSIGNMENT_OF[entry.exercise]
        answers = {**solution_answers(assignment), entry.exercise: entry.code}
        make_submission(assignment, answers, root / "submitted" / student_id(kind, entry) / assignment)
    process = run_grader("grade-class", "--submitted", root / "submitted", "--out", root / "out",
                         "--db", f"sqlite:///{root / 'gradebook.db'}", timeout=3000)
    assert process.returncode == 0, process.stderr
    return root / "out" / "results"


def exercise_results(results, kind, entry):
    path = results / student_id(kind, entry) / ASSIGNMENT_OF[entry.exercise] / "results.json"
    tests = json.loads(path.read_text())["tests"]
    return [test for test in tests if test["name"].split(":")[0] == entry.exercise]


def test_catalogue_is_large_enough():
    assert len(MISTAKES) >= 40 and len(VARIANTS) >= 15
    assert {m.exercise for m in MISTAKES} == set(ASSIGNMENT_OF), "every exercise has catalogued mistakes"


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: f"{m.exercise}-{m.name}")
def test_mistake_loses_points_with_a_hint(graded, mistake):
    tests = exercise_results(graded, "mistake", mistake)
    score = sum(test["score"] for test in tests)
    assert score < MAX_SCORE[mistake.exercise], f"{mistake.name!r} got full marks"
    feedback = "\n".join(test.get("output", "") for test in tests if test["score"] < test["max_score"])
    assert mistake.hint.lower() in feedback.lower(), f"feedback does not say {mistake.hint!r}:\n{feedback}"


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v.exercise}-{v.name}")
def test_correct_variant_gets_full_marks(graded, variant):
    tests = exercise_results(graded, "variant", variant)
    lost = [f"{test['name']}: {test.get('output', '')}" for test in tests if test["score"] < test["max_score"]]
    assert not lost, "\n".join(lost)
