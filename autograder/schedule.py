"""When students may see what: course.yml's release dates, due dates and the order rule.

    assignments:
      - id: masks
        release: 2026-10-05T09:00:00+00:00   # from then on in the student kit
        due: 2026-10-19T23:59:00+00:00
    released: [attention_basics, masks]     # optional, top level: this list instead of the dates

A later notebook may hand students an earlier exercise's solution in a read-only cell (masks gives
a working scaled_dot_product_attention), but only once that exercise is past its due date.  A
read-only cell carries an exercise's solution when it defines a name that the exercise's answer
cell defines in the instructor's solution notebook.
"""

from datetime import datetime, timezone

from autograder.course import CourseError
from autograder.submission import Cell, _nbgrader, _source, cell_kind, read_notebook


def now():
    return datetime.now(timezone.utc)


def is_released(course, assignment, moment):
    if course.released is not None:
        return assignment.id in course.released
    return assignment.release is not None and assignment.release <= moment


def released(course, moment):
    """The assignments students have at `moment`, in course order."""
    return [assignment for assignment in course.assignments if is_released(course, assignment, moment)]


def answer_names(course):
    """name -> (assignment, exercise) for every name an exercise's answer cell defines."""
    names = {}
    for assignment in course.assignments:
        for notebook in assignment.notebooks:
            exercises = {exercise.id: exercise for exercise in notebook.exercises}
            for cell in read_notebook(course.source_notebook(assignment, notebook)).cells:
                grade_id = _nbgrader(cell).get("grade_id")
                if cell_kind(cell) == "answer" and grade_id in exercises:
                    for name in Cell(grade_id, _source(cell)).defines:
                        names[name] = (assignment, exercises[grade_id])
    return names


def carried_solutions(course, assignment, notebook, names=None):
    """[(cell id, assignment, exercise)] for every other assignment's exercise whose solution a
    read-only cell of the released notebook defines."""
    names = answer_names(course) if names is None else names
    carried = {}
    for cell in read_notebook(course.release_notebook(assignment, notebook)).cells:
        if cell.get("cell_type") != "code" or cell_kind(cell) not in ("locked", "demo"):
            continue
        for name in Cell("", _source(cell)).defines:
            owner, exercise = names.get(name, (None, None))
            if owner is not None and owner.id != assignment.id and exercise.id not in carried:
                carried[exercise.id] = (_nbgrader(cell).get("grade_id", "?"), owner, exercise)
    return list(carried.values())


def _when(moment):
    return moment.strftime("%Y-%m-%d %H:%M %Z").strip() if moment else "no due date"


def leaks(course, assignment, moment, names=None):
    """One line for each solution that assignment's notebooks would hand out before its due date."""
    found = []
    for notebook in assignment.notebooks:
        for cell, owner, exercise in carried_solutions(course, assignment, notebook, names):
            if owner.due is None or owner.due > moment:
                found.append(f"exercises/{assignment.id}/{notebook.filename} carries the solution of "
                             f"{exercise.id} ({owner.id}, due: {_when(owner.due)}) in its read-only cell {cell}")
    return found


def kit_assignments(course, moment):
    """The assignments of the student kit at `moment`; CourseError (one line) when there is none, or
    when one would hand out a solution that is not yet due."""
    chosen = released(course, moment)
    if not chosen:
        raise CourseError(f"no assignment is released on {_when(moment)}: give assignments a `release:` "
                          "date in course.yml, or list them under `released:`")
    names = answer_names(course)
    for assignment in chosen:
        problems = leaks(course, assignment, moment, names)
        if problems:
            raise CourseError(f"{problems[0]}; the kit was not built (release {assignment.id} after that "
                              "due date, or take it out of `released:`)")
    return chosen


def order_problems(course):
    """Lines for every notebook released before the due date of a solution it carries (the rule
    that makes any released set of assignments safe to hand out)."""
    names = answer_names(course)
    problems = []
    for assignment in course.assignments:
        for notebook in assignment.notebooks:
            for cell, owner, exercise in carried_solutions(course, assignment, notebook, names):
                if owner.due is None or assignment.release is None or owner.due > assignment.release:
                    problems.append(f"{assignment.id} (release: {_when(assignment.release)}) carries "
                                    f"{exercise.id} of {owner.id} (due: {_when(owner.due)}) in cell {cell}")
    return problems
