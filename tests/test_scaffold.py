"""`make exercise`: a new exercise's four parts, written where they belong and consistent with each other."""

import shutil

import nbformat
import pytest
import yaml

from autograder.course import CourseError, load_course
from autograder.scaffold import scaffold
from tests.notebooks import ROOT, unused


@pytest.fixture
def course_copy(tmp_path):
    for part in ("course.yml", "solutions", "README.md", "requirements.txt"):
        source = ROOT / part
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / part)
    for folder in ("autograder/suites", "tests/catalogue"):
        (tmp_path / folder).mkdir(parents=True)
    return tmp_path


def assignments(root):
    """course.yml as written (its suites live in the copy, which load_course does not look in)."""
    return {raw["id"]: raw for raw in yaml.safe_load((root / "course.yml").read_text())["assignments"]}


def test_new_exercise_in_an_existing_notebook(course_copy):
    before = load_course(course_copy / "course.yml")
    name = unused("scaled_copy")
    written = scaffold(name, "kv_cache", name, "a copy", root=course_copy)
    exercises = assignments(course_copy)["kv_cache"]["notebooks"][0]["exercises"]
    assert [ex["id"] for ex in exercises] == [ex.id for ex in before.assignment("kv_cache").exercises] + [name]
    new = exercises[-1]
    assert (new["suite"], new["gate"], sum(new["points"].values())) == (f"test_{name}.py", "test_gate", 5)
    nb = nbformat.read(course_copy / "solutions/kv_cache/kv_cache.ipynb", as_version=4)
    ids = [cell.metadata.get("nbgrader", {}).get("grade_id") for cell in nb.cells]
    assert ids[-2:] == [name, f"check_{name}"]
    assert nb.cells[-1].metadata["nbgrader"]["points"] == 5
    assert "### BEGIN SOLUTION" in nb.cells[-2].source
    assert f"`{name}` a copy (5)" in (course_copy / "README.md").read_text()
    for path in written[2:4]:  # the suite and the catalogue module are Python that names the function
        compile(path.read_text(), str(path), "exec")
        assert name in path.read_text()
    assert (course_copy / "course.yml").read_text().startswith((ROOT / "course.yml").read_text().split("\n")[0])


def test_new_assignment(course_copy):
    exercise, assignment = unused("window_mask"), unused("sliding_window")
    scaffold(exercise, assignment, exercise, root=course_copy)
    *_, previous, new = assignments(course_copy).values()
    assert new["id"] == assignment and new["notebooks"][0]["exercises"][0]["id"] == exercise
    assert new["release"] == previous["due"]
    assert (course_copy / f"solutions/{assignment}/{assignment}.ipynb").exists()
    lines = (course_copy / "README.md").read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith(f"| `{assignment}` |"))
    assert lines[row] == (f"| `{assignment}` | TODO: what it teaches, in a line (the README's table) | "
                          f"`{exercise}` {exercise} (5) | {str(new['due'])[:10]} |")
    assert lines[row - 1].startswith(f"| `{previous['id']}` |"), "the row ends the Assignments table"


def test_refuses_a_taken_id_and_writes_nothing(course_copy):
    text = (course_copy / "course.yml").read_text()
    with pytest.raises(CourseError, match="already has an exercise sdpa"):
        scaffold("sdpa", "kv_cache", "f", root=course_copy)
    fresh = unused("fresh")
    (course_copy / f"tests/catalogue/{fresh}.py").write_text("")
    with pytest.raises(CourseError, match="already exists; nothing was written"):
        scaffold(fresh, "kv_cache", "f", root=course_copy)
    assert (course_copy / "course.yml").read_text() == text


def test_a_numpy_notebook_gets_a_numpy_check_and_stub(course_copy):
    """attention_basics imports NumPy only: a torch check there would be a NameError for students."""
    name = unused("scaled_scores")
    written = scaffold(name, "attention_basics", name, root=course_copy)
    nb = nbformat.read(course_copy / "solutions/attention_basics/attention_basics.ipynb", as_version=4)
    answer, check = nb.cells[-2].source, nb.cells[-1].source
    assert "x.copy()" in answer and "np.random.default_rng" in check and "torch" not in answer + check
    suite, catalogue = written[2].read_text(), written[3].read_text()
    assert ".numpy()" in suite and '"ndarray"' in suite and "np.zeros_like(x)" in catalogue
