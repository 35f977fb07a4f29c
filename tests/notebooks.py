"""Helpers for tests: build submissions from the released notebooks with chosen answers."""

from pathlib import Path

import nbformat

from autograder.course import load_course
from autograder.submission import cell_kind

COURSE = load_course()
ROOT = COURSE.root


def answer_cells(notebook_path):
    """grade_id -> source of every answer cell in a notebook."""
    notebook = nbformat.read(notebook_path, as_version=4)
    return {cell.metadata["nbgrader"]["grade_id"]: cell.source
            for cell in notebook.cells if cell_kind(cell) == "answer"}


def solution_answers(assignment_id):
    assignment = COURSE.assignment(assignment_id)
    answers = {}
    for notebook in assignment.notebooks:
        answers.update(answer_cells(COURSE.source_notebook(assignment, notebook)))
    return answers


def make_submission(assignment_id, answers, folder, notebook_name=None):
    """Write the released notebook(s) of an assignment into folder, with answers replaced.

    answers maps an answer cell's grade_id to the code the student wrote there; cells not named
    keep the released stub.  Returns the written paths.
    """
    assignment = COURSE.assignment(assignment_id)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for notebook in assignment.notebooks:
        if notebook_name and notebook.name != notebook_name:
            continue
        nb = nbformat.read(COURSE.release_notebook(assignment, notebook), as_version=4)
        for cell in nb.cells:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if cell_kind(cell) == "answer" and grade_id in answers:
                cell.source = answers[grade_id]
        path = folder / notebook.filename
        nbformat.write(nb, path)
        written.append(path)
    return written


def unused(name, course=None):
    """`name`, or the first `name_2`, `name_3`, ... that no assignment or exercise of the course uses (a
    course that made its own `sliding_window` keeps these tests meaningful)."""
    course = course or load_course()
    taken = {a.id for a in course.assignments} | {e.id for a in course.assignments for e in a.exercises}
    return next(n for n in (name, *(f"{name}_{k}" for k in range(2, 99))) if n not in taken)
