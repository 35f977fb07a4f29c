"""Final scores in the layouts LMSs import, from the same numbers as grades_wide.csv.

    roster.csv (the instructor's; one row per enrolled student, extra columns ignored)
        student        the name of the student's folder under submitted/ (nbgrader's student id)
        name           "Last, First", as the LMS shows it
        email
        sis_user_id    the LMS's student id (Canvas: SIS User ID; Moodle: ID number)
        sis_login_id   the LMS login (Canvas: SIS Login ID; Moodle: username)
        section
        lms_user_id    the LMS's own user id (LTI's user_id), where lms-push matches by it

    canvas.csv   Canvas's gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, then one
                 column per assignment (a new column name creates the assignment), and the
                 "Points Possible" row of Canvas's own export.
    moodle.csv   Moodle's CSV grade import: one row per student with Username, ID number and Email
                 address (map one of them under "Identify user by"), then one column per
                 assignment (map each to a grade item, or a new one).

Both read the final scores as grades.csv holds them (final_scores, also what lms-push sends). Roster
students without a submission get 0; graded students missing from the roster are kept (the LMS
reports them on import) and named on the console. A row of a grader fault (status "grader fault":
the grader failed, the student did not) or one without a final score is held back: its cell is
left empty, never 0, and the console says which and why, one line each.
"""

import csv
from pathlib import Path

from autograder.course import CourseError
from autograder.files import csv_text, write_atomic
from autograder.render import read_grades_csv
from autograder.results import GRADER_FAULT

ROSTER_FIELDS = ("student", "name", "email", "sis_user_id", "sis_login_id", "section", "lms_user_id")


def read_roster(path):
    """student id -> the roster's row; CourseError (one line) when it cannot be used."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            if not reader.fieldnames or "student" not in reader.fieldnames:
                raise CourseError(f"{path}: a roster needs a header with a `student` column "
                                  f"(and any of {', '.join(ROSTER_FIELDS[1:])})")
            roster = {}
            for line, row in enumerate(reader, start=2):
                student = (row.get("student") or "").strip()
                if not student:
                    raise CourseError(f"{path}, line {line}: no student")
                if student in roster:
                    raise CourseError(f"{path}, line {line}: {student} is listed twice")
                roster[student] = {field: (row.get(field) or "").strip() for field in ROSTER_FIELDS}
    except OSError as error:
        raise CourseError(f"cannot read the roster {path}: {error.strerror}") from None
    return roster


def _held_back(row):
    """Why a grades.csv row gives the LMS no score, or "" when it gives one."""
    if row.get("status") == GRADER_FAULT:
        return (f"a grader fault, not the student's score: {row.get('reason') or 'the grader failed'}; the next "
                "make grade grades it again")
    text = (row.get("final_score") or "").strip()
    if not text:
        return "grades.csv holds no final score for it"
    try:
        float(text)
    except ValueError:
        return f"grades.csv's final score {text!r} is not a number"
    return ""


def final_scores(course, grades_csv, assignments=None):
    """What an LMS is given, read from grades.csv as published: ({assignment id: {student: (final score,
    points), or None where held back}}, [(student, assignment id, why held back)]).  Every student of
    grades.csv appears under each assignment chosen (`assignments`, or every one graded): one who did not
    hand it in gets 0, as in the wide export; a grader fault or a row without a score is held back."""
    try:
        rows = read_grades_csv(grades_csv)
    except (OSError, ValueError) as error:
        raise CourseError(f"cannot read the final scores {grades_csv}: {getattr(error, 'strerror', None) or error}") from None
    graded = {row["assignment"] for row in rows}
    chosen = [a for a in course.assignments if a.id in graded and (not assignments or a.id in assignments)]
    students = sorted({row["student"] for row in rows})
    scores = {a.id: {student: (0.0, a.max_score) for student in students} for a in chosen}
    held = []
    for row in rows:
        by_student = scores.get(row["assignment"])
        if by_student is None:
            continue
        why = _held_back(row)
        if why:
            by_student[row["student"]] = None
            held.append((row["student"], row["assignment"], why))
        else:
            by_student[row["student"]] = (float(row["final_score"]), by_student[row["student"]][1])
    return scores, held


def exports(course, scores, roster):
    """{file name: text} for Canvas and Moodle from final_scores' scores, and the graded students
    missing from the roster.  A score held back (None) is an empty cell."""
    assignments = [course.assignment(assignment_id) for assignment_id in scores]
    graded = {student for by_student in scores.values() for student in by_student}
    students = sorted(set(roster) | graded)
    unknown = sorted(graded - set(roster))

    def who(student):
        return roster.get(student) or {"student": student, "name": student, **{f: "" for f in ROSTER_FIELDS[2:]}}

    def score(student, assignment):
        given = scores[assignment.id].get(student, (0.0, assignment.max_score))
        return "" if given is None else f"{given[0]:g}"

    titles = [assignment.title for assignment in assignments]
    canvas = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *titles],
              ["Points Possible", "", "", "", "", *[f"{a.max_score:g}" for a in assignments]]]
    canvas += [[who(s)["name"], "", who(s)["sis_user_id"], who(s)["sis_login_id"] or s, who(s)["section"],
                *[score(s, a) for a in assignments]] for s in students]
    moodle = [["Username", "ID number", "Email address", "Full name", *titles]]
    moodle += [[who(s)["sis_login_id"] or s, who(s)["sis_user_id"], who(s)["email"], who(s)["name"],
                *[score(s, a) for a in assignments]] for s in students]
    return {"canvas.csv": csv_text(canvas[0], canvas[1:]), "moodle.csv": csv_text(moodle[0], moodle[1:])}, unknown


def write_exports(course, out, scores, roster_path):
    """The files of exports() written beside grades.csv in `out`: ([their paths], the unknown students)."""
    files, unknown = exports(course, scores, read_roster(roster_path))
    for name, text in files.items():
        write_atomic(Path(out) / name, text)
    return [Path(out) / name for name in files], unknown
