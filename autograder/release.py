"""make release: write course.yml's points into the solution notebooks, let nbgrader generate the
student versions, and put them in exercises/ without ever losing anything.

nbgrader's generate_assignment runs in a scratch copy of the course (with a scratch gradebook),
so it can neither delete exercises/ (its --force does) nor refuse half-way.  A released notebook
is then replaced only when its cells changed; and when students have already submitted an
assignment whose notebook would change, nothing is written and the user is told why.
"""

import os
import shutil
import subprocess
import sys
import tempfile
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


GENERATE = """
import sys
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
    db_url = db_url or f"sqlite:///{course.root / 'gradebook.db'}"
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
        # Refuse before writing anything: students' submissions were made against the current notebook.
        if db_url.startswith("sqlite:///") and Path(db_url[len("sqlite:///"):]).exists():
            for assignment_id, changed in changes.items():
                count = submissions_in_gradebook(db_url, assignment_id) if changed else 0
                if count:
                    names = ", ".join(current.name for _, current in changed)
                    raise CourseError(
                        f"{assignment_id} already has {count} submission(s) in the gradebook and its released "
                        f"notebook would change ({names}); nothing was written. Release the change as a new "
                        "assignment, or remove those submissions first")
        for assignment_id, changed in changes.items():
            for new, current in changed:
                current.parent.mkdir(parents=True, exist_ok=True)
                temporary = current.with_name(f".{current.name}.new")
                shutil.copyfile(new, temporary)
                os.replace(temporary, current)
            print(f"{assignment_id}: " + (f"released {', '.join(c.name for _, c in changed)}" if changed
                                          else "unchanged"))
    # The assignments' structure in the gradebook, as nbgrader's generate_assignment leaves it, so
    # formgrader lists them from now on.
    from autograder import gradebook
    gradebook.prepare(db_url, course, [assignment.id for assignment in selected])
