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


def written(readme_text, course_yml):
    """The README's text with its table as `course_yml` makes it (unchanged without the markers)."""
    if START not in readme_text or END not in readme_text:
        return readme_text
    head, rest = readme_text.split(START, 1)
    return f"{head}{START}\n{table(course_yml)}\n{END}{rest.split(END, 1)[1]}"


def main(root=ROOT):
    path = Path(root) / "README.md"
    path.write_text(written(path.read_text(), (Path(root) / "course.yml").read_text()))
    print(f"wrote the table of assignments into {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
