"""The shape of the grader's code: imports point down, never in a circle, over a few floors, and the
code bound into the sandbox stands alone (tests/floors.py reads the import graph)."""

import pytest

from autograder import rules
from autograder.sandbox import inside_modules
from tests import floors


@pytest.fixture(scope="module")
def built():
    return floors.graph()


def test_no_import_goes_in_a_circle(built):
    assert floors.cycles(built) == []


def test_the_grader_has_at_most_ten_floors(built):
    assert max(floors.floors(built).values()) <= floors.MOST_FLOORS


def test_the_floors_in_the_layout_page_are_the_code_s(built):
    text = floors.PAGE.read_text()
    assert floors.START in text and floors.written(text, built) == text, \
        "docs/layout.md's floors are stale: run python -m tests.floors"


def test_nothing_bound_into_the_sandbox_imports_the_rest_of_the_grader():
    assert floors.inside_imports() == []


def test_what_the_rules_protect_is_what_is_bound_into_the_sandbox():
    assert set(rules.SANDBOX_MODULES) == set(inside_modules()) >= {"worker", "protocol", "counter", "guard"}


def test_an_import_back_up_is_a_circle():
    built = floors.graph()
    built.add_import(importer="autograder.files", imported="autograder.__main__")   # files is on the bottom floor
    assert any({"autograder.files", "autograder.__main__"} <= set(cycle) for cycle in floors.cycles(built))
