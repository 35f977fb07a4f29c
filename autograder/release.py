"""make release: write course.yml's points into the solution notebooks, let nbgrader generate the
student versions, and put them in exercises/ without ever losing anything.

nbgrader's generate_assignment runs in a scratch copy of the course (with a scratch gradebook),
so it can neither delete exercises/ (its --force does) nor refuse half-way.  A released notebook
is then replaced only when its cells changed; and when students have already submitted an
assignment, a change to its code cells or nbgrader cells writes nothing and says why; a change to
markdown or comments only (a typo fix) is released, saying what changed.
"""

import io
import os
import shutil
import subprocess
import sys
import tempfile
import tokenize
from pathlib import Path

import nbformat

from autograder.course import CourseError


def stamp_points(course, assignment):
    """Give each check_<exercise> cell the points course.yml declares; returns the changed paths."""
    changed = []
    for notebook in assignment.notebooks:
        path = course.source_notebook(assignment, notebook)
        nb = nbformat.read(path, as_version=4)
        points = {exercise.check_cell: exercise.max_score for exercise in notebook.exercises}
        found = set()
        dirty = False
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            grade_id = meta.get("grade_id")
            if grade_id in points:
                found.add(grade_id)
                if meta.get("points") != points[grade_id]:
                    meta["points"] = points[grade_id]
                    dirty = True
        missing = set(points) - found
        if missing:
            raise CourseError(f"{path}: no autograded cell(s) {sorted(missing)} for course.yml's exercises")
        if dirty:
            nbformat.write(nb, path)
            changed.append(path)
    return changed


def comparable(path):
    """What makes two releases the same notebook for a student: the cells, not the file's bytes."""
    nb = nbformat.read(path, as_version=4)
    return [(cell.cell_type, cell.source, cell.get("metadata", {}).get("nbgrader")) for cell in nb.cells]


def _without_comments(source):
    """A code cell's tokens without comments and blank lines (its source when it does not tokenize)."""
    try:
        tokens = tokenize.generate_tokens(io.StringIO(source).readline)
        return [(token.type, token.string) for token in tokens
                if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source


def graded_part(path):
    """What grading reads of a released notebook: its code cells without comments, and every
    cell's nbgrader metadata.  A change outside it (markdown, comments) is safe after submissions."""
    nb = nbformat.read(path, as_version=4)
    return [(cell.cell_type, _without_comments(cell.source) if cell.cell_type == "code" else None,
             {key: value for key, value in (cell.get("metadata", {}).get("nbgrader") or {}).items()
              if key != "checksum"})  # nbgrader's checksum follows the text, comments included
            for cell in nb.cells]


def describe(new, current):
    changed = sum(a != b for a, b in zip(comparable(new), comparable(current)))
    return f"{changed} cell(s) changed in markdown or comments only"


GENERATE = """
import sys
sys.modules.setdefault("rfc3987_syntax", None)   # as autograder/__init__.py says: 1 s per process for nothing
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config
config = Config()
exec(open("nbgrader_config.py").read(), {"get_config": lambda: config})
api = NbGraderAPI(coursedir=CourseDirectory(config=config, root="."), config=config)
for assignment in sys.argv[1:]:
    result = api.generate_assignment(assignment, force=True)
    if not result["success"]:
        print(result.get("error") or result.get("log") or "failed", file=sys.stderr)
        sys.exit(1)
"""


def generate(course, assignments, scratch):
    """nbgrader's generate_assignment (one nbgrader process for all of them) in a scratch copy of
    the course; returns the scratch folder's exercises/."""
    for assignment in assignments:
        shutil.copytree(course.root / "solutions" / assignment.id, scratch / "solutions" / assignment.id)
    shutil.copy(course.root / "nbgrader_config.py", scratch / "nbgrader_config.py")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    process = subprocess.run([sys.executable, "-c", GENERATE, *[a.id for a in assignments]],
                             cwd=scratch, capture_output=True, text=True, env=env)
    if process.returncode != 0:
        last = (process.stderr.strip().splitlines() or ["no message"])[-1]
        raise CourseError(f"nbgrader could not release {', '.join(a.id for a in assignments)}: {last}")
    return scratch / "exercises"


def submissions_in_gradebook(db_url, assignment_id):
    from nbgrader.api import Gradebook, MissingEntry
    try:
        with Gradebook(db_url) as gradebook:
            return len(gradebook.find_assignment(assignment_id).submissions)
    except MissingEntry:
        return 0


def release(course, assignment_ids=None, db_url=None):
    db_url = db_url or course.gradebook_url
    selected = [a for a in course.assignments if not assignment_ids or a.id in assignment_ids]
    if assignment_ids:
        for assignment_id in assignment_ids:
            course.assignment(assignment_id)  # an unknown id is an error
    for assignment in selected:
        stamp_points(course, assignment)
    with tempfile.TemporaryDirectory() as scratch:
        exercises = generate(course, selected, Path(scratch))
        changes = {}
        for assignment in selected:
            changes[assignment.id] = []
            for notebook in assignment.notebooks:
                new, current = exercises / assignment.id / notebook.filename, course.release_notebook(assignment, notebook)
                if not current.exists() or comparable(new) != comparable(current):
                    changes[assignment.id].append((new, current))
        # Refuse before writing anything: students' submissions were made against the current notebook,
        # and may only be graded against one whose code and cells are the same (a typo fix is fine).
        notes = {}
        from autograder.gradebook import exists
        if exists(db_url):
            for assignment_id, changed in changes.items():
                count = submissions_in_gradebook(db_url, assignment_id) if changed else 0
                unsafe = [current.name for new, current in changed if not current.exists() or
                          graded_part(new) != graded_part(current)]
                if count and unsafe:
                    raise CourseError(
                        f"{assignment_id} already has {count} submission(s) in the gradebook and the code or "
                        f"cells of its released notebook would change ({', '.join(unsafe)}); nothing was written. "
                        "Only markdown and comments may change after submissions: release the change as a new "
                        "assignment, or remove those submissions first")
                if count:
                    notes[assignment_id] = "; ".join(f"{current.name}: {describe(new, current)}"
                                                     for new, current in changed)
        for assignment_id, changed in changes.items():
            for new, current in changed:
                current.parent.mkdir(parents=True, exist_ok=True)
                temporary = current.with_name(f".{current.name}.new")
                shutil.copyfile(new, temporary)
                os.replace(temporary, current)
            print(f"{assignment_id}: " + (f"released {', '.join(c.name for _, c in changed)}" if changed
                                          else "unchanged")
                  + (f" ({notes[assignment_id]}; safe for the submissions already in)" if assignment_id in notes else ""))
    # The assignments' structure in the gradebook, as nbgrader's generate_assignment leaves it, so
    # formgrader lists them from now on.
    from autograder import gradebook
    gradebook.prepare(db_url, course, [assignment.id for assignment in selected])
