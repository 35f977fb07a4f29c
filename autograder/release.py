"""make release: write course.yml's points into the solution notebooks, then let nbgrader
generate the student versions in exercises/."""

import subprocess
import sys

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


def release(course, assignment_ids=None):
    for assignment in course.assignments:
        if assignment_ids and assignment.id not in assignment_ids:
            continue
        stamp_points(course, assignment)
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment.id,
                        "--force", "--log-level=WARN"], cwd=course.root, check=True)
