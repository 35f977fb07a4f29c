"""An instructor makes the course theirs: each customisation the docs describe, made on a copy of the
course the way the docs say, and then the course's own checks that read the course run in that copy.

The copy gets a late policy (docs/instructor.md's block), other points for a test, every date a week
later (a new term), a new exercise in an existing notebook and a new assignment (both by the
scaffold, as docs/authoring.md shows, then filled in), released with nbgrader, the catalogue's counts
and the sample class written again. tests/test_docs.py, tests/test_course.py and tests/test_scaffold.py
must pass there as they pass here: they know the course only through course.yml and the catalogue.
"""

import re
import subprocess
from datetime import datetime, timedelta

import pytest
import yaml

from tests.conftest import run_in
from tests.notebooks import ROOT, unused

pytestmark = pytest.mark.slow   # the documented customisations, each on a copy of the course (minutes): make test-all and CI


def copy_of_the_course(target):
    """The repository's files (tracked, and new ones git does not ignore) in `target`, with this
    checkout's .venv linked in."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes(source.read_bytes())
    (target / ".venv").symlink_to(ROOT / ".venv", target_is_directory=True)
    return target


def documented_late_policy():
    """The late policy docs/instructor.md shows, as course.yml's text."""
    page = (ROOT / "docs" / "instructor.md").read_text()
    block = next(code for code in re.findall(r"```yaml\n(.*?)```", page, re.S) if code.startswith("late_policy:"))
    return yaml.safe_dump({"late_policy": yaml.safe_load(block)["late_policy"]}, sort_keys=False)


def a_week_later(text):
    """course.yml's text with every release and due date a week later."""
    def later(match):
        moment = datetime.fromisoformat(match.group(2).strip("\"'"))
        return f"{match.group(1)}{(moment + timedelta(days=7)).isoformat()}"
    return re.sub(r"^(\s+(?:release|due): )(\S+)", later, text, flags=re.M)


def one_more_point(text, exercise_id):
    """course.yml's text with one more point for the exercise's first test that is not a basic one."""
    raw = next(e for a in yaml.safe_load(text)["assignments"] for nb in a["notebooks"] for e in nb["exercises"]
               if e["id"] == exercise_id)
    test = next(name for name in raw["points"] if name not in raw.get("basic", []))
    start = text.index(f"- id: {exercise_id}\n")
    end = text.find("- id:", start + 1)
    end = len(text) if end < 0 else end
    part = re.sub(rf"(\n\s+{test}: )(\d+)", lambda m: f"{m.group(1)}{int(m.group(2)) + 1}", text[start:end], count=1)
    return text[:start] + part + text[end:]


def filled(path):
    """A scaffolded file with its TODOs written (the scaffold's own example is a whole exercise)."""
    path.write_text(re.sub(r"\(TODO\)|TODO:? ?", "", path.read_text()))


def test_the_documented_customisations_keep_the_courses_checks_green(tmp_path):
    copy = copy_of_the_course(tmp_path / "course")
    course_yml = copy / "course.yml"
    text = course_yml.read_text().replace("\nassignments:\n", "\n" + documented_late_policy() + "\nassignments:\n", 1)
    course_yml.write_text(a_week_later(one_more_point(text, "padding_mask")))

    example = next(line for line in (ROOT / "docs" / "authoring.md").read_text().splitlines()
                   if line.startswith("make exercise "))
    options = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', example))
    made = [(unused(options["ID"]), options["ASSIGNMENT"], unused(options["FUNCTION"])),
            (unused("window_mask"), unused("sliding_window"), unused("window_mask"))]   # free in a course that made them
    for exercise, assignment, function in made:
        run_in(copy, "autograder", "new-exercise", exercise, "--assignment", assignment, "--function", function)
        for path in (f"autograder/suites/test_{exercise}.py", f"tests/catalogue/{exercise}.py",
                     f"solutions/{assignment}/{assignment}.ipynb", "course.yml", "README.md"):
            filled(copy / path)
        run_in(copy, "autograder", "release", "--assignment", assignment)
    run_in(copy, "tests.catalogue")
    run_in(copy, "tests.sample_class")

    raw = yaml.safe_load(course_yml.read_text())
    assert raw["late_policy"]["percent_per_day"] > 0 and raw["assignments"][-1]["id"] == made[1][1]
    run_in(copy, "pytest", "-q", "-p", "no:cacheprovider", "tests/test_docs.py", "tests/test_course.py",
           "tests/test_scaffold.py", "-k", "not fresh_release")
    assert (copy / "README.md").read_text().count(f"`{made[1][1]}`") == 1
