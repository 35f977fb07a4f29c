"""The hidden suites are sharp and fair: every catalogued mistake loses points on its exercise, only
in the tests it is allowed to fail (the properties it breaks), with feedback that names its cause
and no other catalogued cause; every correct alternative gets full marks; every degenerate answer
(uniform weights, zeros, NaN, masks that allow everything...) earns at most 20% of its exercise
and hears why once, at the top of the exercise; every answer that games a measured point loses
that point, and only the tests the catalogue says, with the reason.

The whole catalogue is graded by `grade-class --exercise`, the command instructors run, in one run
per group of exercises that do not call each other (each entry's own exercise is graded, not the
suites of the reference answers beside it), and judged by the functions `make check EXERCISE=id`
uses (tests/check.py).
"""

import json

import pytest

from tests.catalogue import DEGENERATES, GAMING, MISTAKES, ALTERNATIVES
from tests.check import ASSIGNMENT_OF, entries, exactly_as_allowed, grade_entries, judge
from tests.notebooks import COURSE


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    # One grading process: make test's other pytest worker keeps the second core busy, and a third
    # CPU-bound process only makes the three of them slower (measured: the suite about 10% faster).
    return grade_entries(entries(), tmp_path_factory.mktemp("catalogue"), jobs=1)


def test_catalogue_is_large_enough():
    assert len(MISTAKES) >= 40 and len(ALTERNATIVES) >= 15
    for kind in (MISTAKES, DEGENERATES):
        assert {entry.exercise for entry in kind} == set(ASSIGNMENT_OF), "every exercise has entries of each kind"


@pytest.mark.slow
def test_each_mistake_fails_exactly_the_properties_it_breaks(graded):
    """Apart from the known debt (a mistake's also_fails), no mistake fails fewer tests than listed either:
    a list that claims more than the suites charge would hide a missed property."""
    assert exactly_as_allowed(graded) == len(MISTAKES) - sum(bool(m.also_fails) for m in MISTAKES)


@pytest.mark.slow
@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: f"{m.exercise}-{m.name}")
def test_mistake_loses_points_only_where_allowed_and_names_its_cause(graded, mistake):
    _, wrong = judge(graded, "mistake", mistake)
    assert not wrong, f"{mistake.name!r}: {wrong}"


@pytest.mark.slow
@pytest.mark.parametrize("alternative", ALTERNATIVES, ids=lambda v: f"{v.exercise}-{v.name}")
def test_correct_alternative_gets_full_marks(graded, alternative):
    _, wrong = judge(graded, "alternative", alternative)
    assert not wrong, wrong


@pytest.mark.slow
@pytest.mark.parametrize("degenerate", DEGENERATES, ids=lambda d: f"{d.exercise}-{d.name}")
def test_degenerate_answer_earns_next_to_nothing_and_hears_why_once(graded, degenerate):
    _, wrong = judge(graded, "degenerate", degenerate)
    assert not wrong, f"{degenerate.name!r}: {wrong}"


@pytest.mark.slow
@pytest.mark.parametrize("gaming", GAMING, ids=lambda g: f"{g.exercise}-{g.name}")
def test_gaming_answer_loses_the_measured_points(graded, gaming):
    _, wrong = judge(graded, "gaming", gaming)
    assert not wrong, f"{gaming.name!r}: {wrong}"


@pytest.mark.slow
def test_no_check_answer_of_the_catalogue_holds_a_hidden_line(graded):
    """Every graded entry, answered as the check server answers a student (ondemand.server.answer) under each
    of the policy's three ways of showing, holds no line of a hidden suite, nor of a solution the student did not
    send: well over a thousand answers, of every exercise's mistakes, alternatives, degenerate and gaming answers."""
    from types import SimpleNamespace

    from autograder.ondemand.server import answer
    from autograder.schedule import now
    from tests.ondemand import hidden_lines, leaked

    lines = hidden_lines(COURSE, [assignment.id for assignment in COURSE.assignments])
    scanned, found = 0, []
    for path in sorted(graded.glob("*/*/grade.json")):
        record = json.loads(path.read_text())
        assignment = COURSE.assignment(record["assignment"])
        sent = "".join(p.read_text() for p in graded.parent.parent.glob(f"submitted-*/{record['student']}/"
                                                                          f"{assignment.id}/*.ipynb"))
        for notebook in (nb for nb in assignment.notebooks if nb.name in {n["notebook"] for n in record["notebooks"]}):
            job = SimpleNamespace(student=record["student"], assignment=assignment, notebook=notebook, now=now())
            for shows in ("causes", "tests", "total"):
                text = json.dumps(answer(job, json.loads(path.read_text()), shows, []))
                found += [f"{path.parent.name} of {record['student']} ({shows}): {line}"
                          for line in leaked(text, sent, lines)]
                scanned += 1
    assert scanned >= 1000 and not found, (scanned, found[:10])
