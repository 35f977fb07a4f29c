"""The course is consistent: course.yml, the suites, the solutions and the released exercises."""

import ast

import nbformat
import pytest

from autograder.release import comparable, generate
from autograder.submission import cell_kind
from tests.gradescope_locks import torch_pin
from tests.notebooks import COURSE

NOTEBOOKS = [(a, nb) for a in COURSE.assignments for nb in a.notebooks]
IDS = [f"{a.id}/{nb.name}" for a, nb in NOTEBOOKS]


def suite_tests(path):
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


@pytest.mark.parametrize("exercise", [e for a in COURSE.assignments for e in a.exercises], ids=lambda e: e.id)
def test_every_hidden_test_has_points_and_every_point_a_test(exercise):
    """Every test function of a suite is its exercise's gate or has points (course.yml)."""
    assert suite_tests(exercise.suite) == set(exercise.tests)
    assert all(points > 0 for points in exercise.points.values())


@pytest.mark.parametrize("exercise", [e for a in COURSE.assignments for e in a.exercises], ids=lambda e: e.id)
def test_every_exercise_has_a_gate_and_its_basic_tests_stay_within_a_fifth(exercise):
    assert exercise.gate and exercise.gate not in exercise.points
    assert sum(exercise.points[test] for test in exercise.basic) <= 0.2 * exercise.max_score


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS, ids=IDS)
def test_solution_check_cells_carry_course_points(assignment, notebook):
    nb = nbformat.read(COURSE.source_notebook(assignment, notebook), as_version=4)
    points = {cell.metadata["nbgrader"]["grade_id"]: cell.metadata["nbgrader"]["points"]
              for cell in nb.cells if cell_kind(cell) == "test"}
    assert points == {exercise.check_cell: exercise.max_score for exercise in notebook.exercises}
    answers = {cell.metadata["nbgrader"]["grade_id"] for cell in nb.cells if cell_kind(cell) == "answer"}
    assert answers == {exercise.id for exercise in notebook.exercises}


def test_exercises_equal_a_fresh_release(tmp_path):
    exercises = generate(COURSE, COURSE.assignments, tmp_path)
    for assignment, notebook in NOTEBOOKS:
        assert comparable(exercises / assignment.id / notebook.filename) == \
            comparable(COURSE.release_notebook(assignment, notebook)), \
            f"exercises/ is stale: run `make release` ({assignment.id}/{notebook.filename})"


def solution_lines(notebook_path):
    """Lines that appear only inside solution regions (not also in given code, such as the broken
    class that students fix)."""
    nb = nbformat.read(notebook_path, as_version=4)
    inside_lines, outside_lines = [], set()
    for cell in nb.cells:
        inside = False
        for line in cell.source.splitlines():
            if "### BEGIN SOLUTION" in line:
                inside = True
            elif "### END SOLUTION" in line:
                inside = False
            elif inside and len(line.strip()) > 12:
                inside_lines.append(line.strip())
            else:
                outside_lines.add(line.strip())
    return [line for line in inside_lines if line not in outside_lines]


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS, ids=IDS)
def test_exercises_hold_no_solution_code_and_no_hidden_test(assignment, notebook):
    released = COURSE.release_notebook(assignment, notebook).read_text()
    assert "BEGIN SOLUTION" not in released and "BEGIN HIDDEN TESTS" not in released
    leaked = [line for line in solution_lines(COURSE.source_notebook(assignment, notebook))
              if line in released and not line.startswith(("#", '"""'))]
    assert leaked == []
    for exercise in notebook.exercises:
        for test in exercise.points:
            assert test not in released
    nb = nbformat.read(COURSE.release_notebook(assignment, notebook), as_version=4)
    stubs = [cell.source for cell in nb.cells if cell_kind(cell) == "answer"]
    assert stubs and all("raise NotImplementedError()" in stub for stub in stubs)


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS, ids=IDS)
def test_notebook_states_its_torch_version_and_labels_its_heatmaps(assignment, notebook):
    nb = nbformat.read(COURSE.source_notebook(assignment, notebook), as_version=4)
    assert torch_pin() in nb.cells[0].source, "the first cell says which torch the notebook needs"
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        last = cell.source.strip().splitlines()[-1] if cell.source.strip() else ""
        assert not last.startswith("torch.manual_seed("), "a bare manual_seed prints <torch._C.Generator ...>"
        if "imshow(" in cell.source:  # every heatmap: axis labels, integer ticks, a colour bar
            for needed in ("xlabel(", "ylabel(", "ticks(", "colorbar("):
                assert needed in cell.source, (cell.source[:80], needed)


def test_every_package_an_assignment_adds_is_pinned_in_requirements():
    from autograder.kits import pinned
    extra = sorted({name for assignment in COURSE.assignments for name in assignment.packages})
    assert extra == ["triton"]
    assert pinned(COURSE, extra) == ['triton==3.9.0; sys_platform == "linux"']


def course_saying(folder, feedback=None, overrides=None):
    """A copy of course.yml with its feedback policy replaced (None: no feedback key) and, per assignment
    id, an override of its own."""
    import yaml
    from autograder.course import load_course
    raw = yaml.safe_load(COURSE.path.read_text())
    raw.pop("feedback", None)
    if feedback is not None:
        raw["feedback"] = feedback
    for assignment in raw["assignments"]:
        if assignment["id"] in (overrides or {}):
            assignment["feedback"] = overrides[assignment["id"]]
    path = folder / "course.yml"
    path.write_text(yaml.safe_dump(raw))
    return load_course(path)


def test_feedback_shows_values_after_the_due_date_by_default_and_as_an_assignment_says(tmp_path):
    from dataclasses import replace
    from datetime import timedelta

    from autograder.lateness import LatePolicy
    course = course_saying(tmp_path, None, {"masks": {"values": "always"}, "multi_head": {"values": "never"}})
    basics, masks, heads = (course.assignment(name) for name in ("attention_basics", "masks", "multi_head"))
    for assignment in (basics, masks, heads):
        # a late policy under which a hand-in one second late earns nothing: the answers are final at the due date
        assignment = replace(assignment, checks=replace(assignment.checks, late_hours=0.0, until=None),
                             late_policy=LatePolicy(percent_per_day=100, max_percent=100))
        before, after = assignment.due - timedelta(seconds=1), assignment.due + timedelta(seconds=1)
        shown = {"after_due": (False, True), "always": (True, True), "never": (False, False)}[assignment.feedback_values]
        assert (assignment.feedback_values_shown(before), assignment.feedback_values_shown(after)) == shown
    assert basics.feedback_values == "after_due" and masks.feedback_values == "always"
    assert COURSE.assignment("masks").feedback_values == "after_due"   # the course's own setting
    with pytest.raises(ValueError, match="time zone"):
        basics.feedback_values_shown(basics.due.replace(tzinfo=None))


@pytest.mark.parametrize("feedback, error", [({"values": "sometimes"}, "feedback values must be one of never, after_due, "
                                                                       "always, not 'sometimes'"),
                                             ({"show": "always"}, "feedback takes values"), ("always", "feedback takes values")])
def test_a_feedback_policy_course_yml_cannot_mean_is_refused_with_one_line(tmp_path, feedback, error):
    import re
    from autograder.course import CourseError
    with pytest.raises(CourseError, match=re.escape(error)):
        course_saying(tmp_path, feedback)


def causes_put_in_a_description_slot(path):
    """The CAUSES keys a suite words as a description: literal keywords of named(CAUSES, ...) (its feedback
    says "It matches what <cause> gives.") and causes written after "Likely cause: "."""
    import re
    tree, keys = ast.parse(path.read_text()), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "named" \
                and node.args and getattr(node.args[0], "id", "") == "CAUSES":
            keys |= {keyword.arg for keyword in node.keywords if keyword.arg}
    keys |= set(re.findall(r"Likely cause: \{CAUSES\[['\"](\w+)['\"]\]", path.read_text()))
    return keys


@pytest.mark.parametrize("exercise", [e for a in COURSE.assignments for e in a.exercises], ids=lambda e: e.id)
def test_every_cause_worded_as_a_description_is_one(exercise):
    """A cause the feedback words as "It matches what ... gives." or "Likely cause: ...." describes what the
    answer does (a phrase, no full stop); an instruction there read "It matches what For float16 ... gives."."""
    import importlib
    from autograder.harness.checks import is_description
    causes = importlib.import_module(f"autograder.suites.{exercise.suite.stem}").CAUSES
    wrong = {key: causes[key] for key in causes_put_in_a_description_slot(exercise.suite) if not is_description(causes[key])}
    assert not wrong, f"{exercise.id}: causes worded as descriptions that are instructions: {wrong}"
