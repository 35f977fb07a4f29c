"""Every hidden value test tells the right answer from a trivial one: zeros, ones, an input passed
through, the answer to other inputs, an earlier call's answer (tests/value_filter.py generates them from
each exercise's reference and grades them in one warm grading process, the gates lifted).  An exercise
whose test a trivial answer passes fails here with a sentence that says which answer earned which points.
"""

import json
import subprocess
import sys

import pytest

from autograder import rules
from tests.check import ASSIGNMENT_OF
from tests.notebooks import ROOT
from tests.value_filter import (CONTROL, EXEMPT, KNOWN_WEAK, Filtered, describe, exercise_of, findings,
                                trivial_answers, value_tests)


@pytest.fixture(scope="module")
def filtered(tmp_path_factory):
    """What the filter graded over the whole course, in one process (one warm grading worker)."""
    out = tmp_path_factory.mktemp("value-filter") / "graded.json"
    process = subprocess.run([sys.executable, "-m", "tests.value_filter", "--json", str(out)], cwd=ROOT,
                             capture_output=True, text=True, timeout=1800)
    assert out.exists(), process.stdout[-2000:] + process.stderr[-3000:]
    return Filtered(**json.loads(out.read_text()))


@pytest.mark.slow
@pytest.mark.parametrize("exercise", sorted(ASSIGNMENT_OF))
def test_every_value_test_tells_the_right_answer_from_a_trivial_one(filtered, exercise):
    said = findings(exercise, filtered)
    assert not said, "\n".join(said)


def test_a_test_that_a_trivial_answer_passes_is_named_with_the_answer_and_its_points():
    """The verdict itself, on a made-up grading where zeros earns a value test of softmax: one sentence naming
    the test, the answer and the points, and nothing said about the tests every answer lost."""
    test = value_tests("softmax")[0]
    points = exercise_of("softmax").points
    graded = {name: {t: [0.0, p, "wrong"] for t, p in points.items()} for name in describe("softmax")}
    graded[CONTROL] = {t: [p, p, ""] for t, p in points.items()}
    seen = Filtered(graded={"softmax": graded})
    assert findings("softmax", seen) == []
    graded["zeros"][test] = [points[test], points[test], ""]
    said = findings("softmax", seen)
    assert len(said) == 1 and f"softmax: {test} is weak" in said[0] and "'zeros'" in said[0] \
        and f"earns {points[test]:g} of its {points[test]:g} points" in said[0], said
    graded[CONTROL][test] = [0.0, points[test], "lost"]
    assert any("does not get full marks" in sentence for sentence in findings("softmax", seen))
    seen.crashes["softmax"] = [f"{test} raised IndexError: too many indices on the trivial answer 'ones'"]
    assert any("grader fault" in sentence for sentence in findings("softmax", seen))


def test_each_exemption_names_a_test_with_points_and_says_why():
    for (exercise, test), why in {**EXEMPT, **KNOWN_WEAK}.items():
        assert test in exercise_of(exercise).points, f"{exercise}: EXEMPT names {test}, which has no points"
        assert len(why.split()) >= 5, f"{exercise}: {test} is exempt without a reason"
    assert not set(EXEMPT) & set(KNOWN_WEAK), "a test is either exempt (no value) or a weak value test"


@pytest.mark.parametrize("exercise", ["softmax", "mha", "by_hand", "param_counts"])
def test_the_generated_answers_break_no_course_rule(exercise):
    """The wrapper is code a student may write: the reading that flags code reaching into the grader finds
    nothing in it (a flagged answer would lose its points to the flag, not to what it returns)."""
    for name, (_, code) in trivial_answers(exercise).items():
        assert rules.reaches_into_internals(code) is None, f"{exercise}, {name}: {rules.reaches_into_internals(code)}"
