"""The hidden suites are sharp and fair: every catalogued mistake loses points on its exercise, only
in the tests it is allowed to fail (the properties it breaks), with feedback that names its cause
and no other catalogued cause; every correct variant gets full marks.

The whole catalogue is graded as one class by `grade-class`, the command instructors run.
"""

import json
import re

import pytest

from tests.catalogue import MISTAKES, STILL_ALSO_FAILS, VARIANTS
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
    """(the exercise's test results, the notes about cells it depends on)"""
    path = results / student_id(kind, entry) / ASSIGNMENT_OF[entry.exercise] / "results.json"
    result = json.loads(path.read_text())
    tests = [test for test in result["tests"] if test["name"].split(":")[0] == entry.exercise]
    notes = [part for part in result["output"].split("\n\n") if part.startswith(f"{entry.exercise}: ")]
    return tests, "\n".join(notes)


def failed_tests(tests):
    """The names (without test_) of the tests that lost points."""
    return {test["name"].split(": ", 1)[1].removeprefix("test_") for test in tests if test["score"] < test["max_score"]}


def exactly_as_allowed(results):
    """How many mistakes fail exactly the tests they are allowed to fail (the catalogue's precision)."""
    return sum(failed_tests(exercise_results(results, "mistake", m)[0]) == set(m.fails) for m in MISTAKES)


def test_catalogue_is_large_enough():
    assert len(MISTAKES) >= 40 and len(VARIANTS) >= 15
    assert {m.exercise for m in MISTAKES} == set(ASSIGNMENT_OF), "every exercise has catalogued mistakes"


def test_each_mistake_fails_exactly_the_properties_it_breaks(graded):
    """Apart from the known debt (STILL_ALSO_FAILS), no mistake fails fewer tests than listed either:
    a list that claims more than the suites charge would hide a missed property."""
    assert exactly_as_allowed(graded) == len(MISTAKES) - len(STILL_ALSO_FAILS)


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: f"{m.exercise}-{m.name}")
def test_mistake_loses_points_only_where_allowed_and_names_its_cause(graded, mistake):
    tests, notes = exercise_results(graded, "mistake", mistake)
    failed = failed_tests(tests)
    assert failed, f"{mistake.name!r} got full marks"
    tolerated = set(STILL_ALSO_FAILS.get((mistake.exercise, mistake.name), ()))
    assert set(mistake.fails) | tolerated <= {test["name"].split(": ", 1)[1].removeprefix("test_") for test in tests}, \
        "the catalogue names a test the exercise does not have"
    assert failed <= set(mistake.fails) | tolerated, \
        f"{mistake.name!r} also fails {sorted(failed - set(mistake.fails) - tolerated)}"
    feedback = "\n".join([notes] + [test.get("output", "") for test in tests if test["score"] < test["max_score"]])
    assert mistake.hint.lower() in feedback.lower(), f"feedback does not say {mistake.hint!r}:\n{feedback}"
    wrong = [other.hint for other in MISTAKES if other.exercise == mistake.exercise
             and other.hint.lower() not in mistake.hint.lower() and other.hint.lower() in feedback.lower()]
    assert not wrong, f"the feedback names other mistakes' causes {wrong}:\n{feedback}"


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v.exercise}-{v.name}")
def test_correct_variant_gets_full_marks(graded, variant):
    tests, _ = exercise_results(graded, "variant", variant)
    lost = [f"{test['name']}: {test.get('output', '')}" for test in tests if test["score"] < test["max_score"]]
    assert not lost, "\n".join(lost)
