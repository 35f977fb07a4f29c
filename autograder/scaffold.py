"""`make exercise ID=... ASSIGNMENT=... FUNCTION=...`: the four files of a new exercise, ready to fill in.

An exercise is one unit; this writes each of its parts where it belongs, with the names filled in
and TODOs where only its author knows what to write:

  solutions/<assignment>/<notebook>.ipynb   its statement, answer cell (grade_id = the exercise id)
                                            and visible self-check (check_<id>), with nbgrader's metadata
  course.yml                                its entry: suite, gate, basic tests, points
  autograder/suites/test_<id>.py            its calls into student code, CAUSES, gate and tests
  tests/catalogue/<id>.py                   its mistakes, correct alternatives and degenerate answers
  README.md                                 the table of assignments, written again from course.yml

It refuses, before writing anything, when the id is taken or any of these files exists.  Then
`make release ASSIGNMENT=...` makes the student version and `make check EXERCISE=<id>` grades the
reference, the stub and the catalogue.
"""

import re
from datetime import timedelta
from pathlib import Path

import nbformat

from autograder import readme
from autograder.course import CourseError, load_course
from autograder.kits import pinned_versions

SUITE = '''"""Hidden tests for {function}(x) -> TODO: the statement's signature."""

import torch

from autograder.harness import checks
from autograder.suites.helpers.common import B, D_K, SQ, named, randn

# The causes this suite names, by key (the course's catalogue names its mistakes by these keys).
CAUSES = {{
    "doubled": "doubling x (TODO: each mistake's cause, in the words the student will read)",
}}


def {function}(student, x):
    """Call the student's {function}; check the reply's form ({library} in, {library} out)."""
    return checks.tensor(student.call("{function}", x)["output"], "{function}(x)", "{kind}")


def inputs(seed):
    """The input x of a test: TODO: the statement's shapes and dtypes."""
    return randn(B, SQ, D_K, seed=seed){convert}


def named_mistakes(x):
    """What each named mistake gives for x: cause text -> value (TODO: recompute each one)."""
    return named(CAUSES, doubled=2 * x)


def test_gate(student, reference):
    """The gate: a property every real attempt has and no degenerate answer does (TODO)."""
    result = checks.as_tensor({function}(student, inputs(1)))
    checks.require(bool(torch.isfinite(result).all()) and not torch.equal(result, torch.zeros_like(result)),
                   "{function}(x) returns zeros or non-finite values, so it does not compute anything yet.",
                   "TODO: the hint a student needs here.")


def test_shape(student):
    x = inputs(2)
    checks.shape({function}(student, x), x.shape, "{function}(x)", "TODO: the shape the statement asks for.")


def test_matches_reference_solution(student, reference):
    x = inputs(3)
    checks.close({function}(student, x), reference["{function}"](x), "{function}(x)",
                 "TODO: the property, stated as the student reads it.", named_mistakes(x))
'''

CATALOGUE = '''"""The catalogue of {exercise}: its mistakes (with the cause each must be named by, a key of
CAUSES in autograder/suites/test_{exercise}.py, and the tests it may fail), correct alternatives and
degenerate answers.  TODO: the mistakes students really make, each with its own cause."""

from tests.catalogue.entries import Degenerate, Mistake, Alternative

MISTAKES = [
    Mistake("doubles its input", "doubled",
            fails=("matches_reference_solution",),
            code=\'\'\'def {function}(x):
    return 2 * x
\'\'\'),
]


ALTERNATIVES = [
    Alternative("the reference written another way (TODO)", \'\'\'def {function}(x):
    return {copy}
\'\'\'),
]


DEGENERATES = [
    Degenerate("zeros", \'\'\'def {function}(x):
    return {zeros}
\'\'\'),
]
'''

# What differs between a NumPy notebook and a PyTorch one (the scaffold follows the notebook's own imports).
LIBRARIES = {
    "torch": {"library": "torch", "kind": "tensor", "convert": "", "copy": "x.clone()", "zeros": "torch.zeros_like(x)",
              "random": "torch.randn(2, 3, 4)", "imports": "import torch"},
    "numpy": {"library": "numpy", "kind": "ndarray", "convert": ".numpy()", "copy": "x.copy()",
              "zeros": "np.zeros_like(x)", "random": "np.random.default_rng(0).standard_normal((2, 3, 4))",
              "imports": "import numpy as np"},
}
POINTS = {"test_shape": 1, "test_matches_reference_solution": 4}   # the tests of SUITE that carry points
ENTRY = '''          - id: {exercise}
            title: {title}
            suite: test_{exercise}.py
            gate: test_gate
            basic: [test_shape]
            points:
''' + "".join(f"              {test}: {points}\n" for test, points in POINTS.items())

ASSIGNMENT = '''
  - id: {assignment}
    release: {release}
    due: {due}
    title: {title}
    summary: "TODO: what it teaches, in a line (the README's table)"
    notebooks:
      - name: {notebook}
        exercises:
'''


def cells(exercise, function, title, points, library):
    """The statement, answer and visible self-check cells, with nbgrader's metadata."""
    def meta(grade_id, **flags):
        return {"nbgrader": {"grade": False, "solution": False, "locked": True, "task": False,
                             "schema_version": 3, "grade_id": grade_id, **flags}}
    names = LIBRARIES[library]
    return [
        nbformat.v4.new_markdown_cell(f"## {title}\n\nTODO: why this matters, a picture, then the statement: "
                                      f"`{function}(x)`, its arguments, shapes and dtypes."),
        nbformat.v4.new_code_cell(f'def {function}(x):\n    """TODO: the statement, with shapes in comments."""\n'
                                  f"    ### BEGIN SOLUTION\n    return {names['copy']}\n    ### END SOLUTION",
                                  metadata=meta(exercise, solution=True, locked=False)),
        nbformat.v4.new_code_cell(f"# A visible self-check (the hidden tests grade more than this).\n"
                                  f"x = {names['random']}\nassert {function}(x).shape == x.shape, "
                                  f'"{function}(x) must keep the shape of x"\n'
                                  f'print("{function}: the shape is right")',
                                  metadata=meta(f"check_{exercise}", grade=True, points=float(points))),
    ]


def notebook_library(nb):
    """"torch" when the notebook imports torch (or is new), "numpy" when it uses NumPy only."""
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    if re.search(r"^\s*(import torch|from torch)", code, re.M) or not code:
        return "torch"
    return "numpy" if re.search(r"^\s*import numpy", code, re.M) else "torch"


def add_to_course_yml(text, exercise, assignment, notebook, title, course):
    """course.yml with the exercise's entry at the end of its notebook's exercises (the notebook
    and the assignment are added when new); comments and order are kept."""
    entry = ENTRY.format(exercise=exercise, title=title)
    if assignment not in {a.id for a in course.assignments}:
        last = course.assignments[-1]
        block = ASSIGNMENT.format(assignment=assignment, notebook=notebook, title=title,
                                  release=last.due.isoformat(), due=(last.due + timedelta(days=14)).isoformat())
        return text.rstrip("\n") + "\n" + block + entry
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if re.match(rf"\s*- id: {re.escape(assignment)}\s*$", line))
    names = [i for i in range(start + 1, len(lines)) if re.match(r"\s*- name: ", lines[i])]
    ends = [i for i in range(start + 1, len(lines)) if re.match(r"  - id: ", lines[i]) or re.match(r"\S", lines[i])]
    end = ends[0] if ends else len(lines)
    ours = [i for i in names if i < end and lines[i].split("- name:")[1].strip() == notebook]
    if not ours:
        block = f"      - name: {notebook}\n        exercises:\n" + entry
        return "".join(lines[:end]).rstrip("\n") + "\n" + block + "\n" + "".join(lines[end:])
    following = [i for i in names if ours[0] < i < end]
    stop = following[0] if following else end
    while stop > ours[0] and not lines[stop - 1].strip():
        stop -= 1
    return "".join(lines[:stop]) + entry + "".join(lines[stop:])


def scaffold(exercise, assignment, function, title=None, notebook=None, root=None):
    """Write the four parts of a new exercise and its README row; returns the paths written."""
    course = load_course(Path(root) / "course.yml" if root else None)
    root = course.root
    if not re.fullmatch(r"[a-z][a-z0-9_]*", exercise) or not function.isidentifier():
        raise CourseError(f"{exercise!r} / {function!r}: an exercise id is lower_snake_case and the function a "
                          "Python name")
    if any(ex.id == exercise for a in course.assignments for ex in a.exercises):
        raise CourseError(f"course.yml already has an exercise {exercise}")
    title = title or function
    notebook = notebook or assignment
    paths = {"suite": root / "autograder" / "suites" / f"test_{exercise}.py",
             "catalogue": root / "tests" / "catalogue" / f"{exercise}.py"}
    taken = [str(path.relative_to(root)) for path in paths.values() if path.exists()]
    if taken:
        raise CourseError(f"{', '.join(taken)} already exists; nothing was written")
    notebook_path = root / "solutions" / assignment / f"{notebook}.ipynb"
    if notebook_path.exists():
        nb = nbformat.read(notebook_path, as_version=4)
    else:
        nb = nbformat.v4.new_notebook()
        torch_pin = pinned_versions(course).get("torch", "?")   # the course's own, as every notebook states it
        nb.cells.append(nbformat.v4.new_markdown_cell(
            f"# {assignment.replace('_', ' ').capitalize()}\n\nTODO: what this notebook teaches, and its exercises.\n\n"
            f"*Software:* written for **PyTorch {'.'.join(torch_pin.split('.')[:2])}** (`pip install torch=={torch_pin}`); "
            "the self-checks and the grader compare against what that version computes."))
        nb.cells.append(nbformat.v4.new_code_cell("import torch", metadata={"nbgrader": {
            "grade": False, "solution": False, "locked": True, "task": False, "schema_version": 3,
            "grade_id": f"setup_{exercise}"}}))
    library = notebook_library(nb)
    nb.cells += cells(exercise, function, title, points=sum(POINTS.values()), library=library)
    course_yml = root / "course.yml"
    text = add_to_course_yml(course_yml.read_text(), exercise, assignment, notebook, title, course)
    notebook_path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, notebook_path)
    course_yml.write_text(text)
    paths["suite"].write_text(SUITE.format(function=function, **LIBRARIES[library]))
    paths["catalogue"].write_text(CATALOGUE.format(exercise=exercise, function=function, **LIBRARIES[library]))
    written = [notebook_path, course_yml, *paths.values()]
    readme_path = root / "README.md"
    if readme_path.exists():
        before = readme_path.read_text()
        after = readme.written(before, text)
        if after != before:
            readme_path.write_text(after)
            written.append(readme_path)
    return written
