"""The README's table of assignments, made from course.yml: `python -m autograder.readme` writes it
between its two markers (so does `make exercise`); tests/test_docs.py checks that the README holds
what this makes.  It reads course.yml as written (a new exercise's suite need not exist yet)."""

import sys
from pathlib import Path

import yaml

from autograder.course import ROOT

START = "<!-- assignments: written by python -m autograder.readme from course.yml -->"
END = "<!-- end of assignments -->"


def table(course_yml):
    """The Markdown table of the assignments of `course_yml` (its text)."""
    rows = ["| assignment | what it teaches | graded exercises (points) | due |", "| --- | --- | --- | --- |"]
    for assignment in yaml.safe_load(course_yml).get("assignments") or []:
        exercises = ", ".join(
            f"`{exercise['id']}` {exercise.get('title', exercise['id'])} ({sum(exercise['points'].values()):g})"
            for notebook in assignment.get("notebooks") or [] for exercise in notebook.get("exercises") or [])
        due = str(assignment.get("due") or "")[:10]
        rows.append(f"| `{assignment['id']}` | {assignment.get('summary', '')} | {exercises} | {due} |")
    return "\n".join(rows)


def between(text, start, end, body):
    """`text` with `body` between its two marker lines `start` and `end` (unchanged without them): how
    a generated part of a page (this table, the docs' catalogue counts) is written into it."""
    if start not in text or end not in text:
        return text
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{body}\n{end}{rest.split(end, 1)[1]}"


def written(readme_text, course_yml):
    """The README's text with its table as `course_yml` makes it (unchanged without the markers)."""
    return between(readme_text, START, END, table(course_yml))


def main(root=ROOT):
    path = Path(root) / "README.md"
    path.write_text(written(path.read_text(), (Path(root) / "course.yml").read_text()))
    print(f"wrote the table of assignments into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
