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

Roster students without a submission get 0; graded students missing from the roster are kept (the
LMS reports them on import) and named on the console.
"""

import csv
from pathlib import Path

from autograder.course import CourseError
from autograder.files import csv_text, write_atomic

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


def exports(course, wide_rows, roster):
    """{file name: text} for Canvas and Moodle, and the graded students missing from the roster."""
    rows, fields = wide_rows
    assignments = [course.assignment(field) for field in fields if field not in ("student", "total", "max_total",
                                                                                  "percent")]
    scores = {row["student"]: row for row in rows}
    students = sorted(set(roster) | set(scores))
    unknown = sorted(set(scores) - set(roster))

    def who(student):
        return roster.get(student) or {"student": student, "name": student, **{f: "" for f in ROSTER_FIELDS[2:]}}

    def score(student, assignment):
        return scores.get(student, {}).get(assignment.id, "0")

    titles = [assignment.title for assignment in assignments]
    canvas = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *titles],
              ["Points Possible", "", "", "", "", *[f"{a.max_score:g}" for a in assignments]]]
    canvas += [[who(s)["name"], "", who(s)["sis_user_id"], who(s)["sis_login_id"] or s, who(s)["section"],
                *[score(s, a) for a in assignments]] for s in students]
    moodle = [["Username", "ID number", "Email address", "Full name", *titles]]
    moodle += [[who(s)["sis_login_id"] or s, who(s)["sis_user_id"], who(s)["email"], who(s)["name"],
                *[score(s, a) for a in assignments]] for s in students]
    return {"canvas.csv": csv_text(canvas[0], canvas[1:]), "moodle.csv": csv_text(moodle[0], moodle[1:])}, unknown


def write_exports(course, layout, wide_rows, roster_path):
    files, unknown = exports(course, wide_rows, read_roster(roster_path))
    for name, text in files.items():
        write_atomic(Path(layout.out) / name, text)
    return [Path(layout.out) / name for name in files], unknown
