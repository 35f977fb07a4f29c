"""The README is a door and docs/ the house: the README's size, its generated table of assignments,
its table of make targets, and every link of README.md and docs/ (to a file of the repository, and
to a heading of that file when it names one)."""

import re

import pytest

from autograder import readme
from autograder.course import load_course
from autograder.scaffold import scaffold
from tests.notebooks import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path):
    """GitHub's anchors of a Markdown file's headings."""
    found = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_the_readme_is_a_door():
    """What is written by hand stays short (details belong in docs/); the table of assignments that
    course.yml generates grows with the course and is not held to it, so a course with more
    assignments or exercises than this one keeps passing."""
    text = (ROOT / "README.md").read_text()
    head, rest = text.split(readme.START, 1)
    by_hand = head + rest.split(readme.END, 1)[1]
    assert len(by_hand) <= 4500, f"README.md has {len(by_hand)} characters besides its table: move details to docs/"
    assert "{" not in text.replace("{{", "")  # no placeholder left


def test_the_readme_table_of_assignments_is_course_ymls():
    text = (ROOT / "README.md").read_text()
    assert readme.written(text, (ROOT / "course.yml").read_text()) == text, \
        "the README's table of assignments is stale: run python -m autograder.readme"


def test_every_make_target_is_in_the_readmes_table():
    makefile = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:((?:.*\\\n)*.*)$", makefile, re.M).group(1).replace("\\\n", " ").split()
    text = (ROOT / "README.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `make ")]
    assert {target for target in phony if not any(f"`make {target}" in row or f", `make {target}" in row
                                                  for row in rows)} == set()


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_every_link_leads_somewhere(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            assert target.startswith(("https://", "http://", "mailto:")), target
            continue
        path_part, _, anchor = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if ROOT not in destination.parents and destination != ROOT:
            broken.append(f"{target}: outside the repository")
        elif not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no such heading")
    assert broken == [], f"{page.name}: {broken}"


def test_nothing_links_outside_the_repository():
    for page in PAGES:
        assert "../shared" not in page.read_text(), page.name


def test_the_authoring_example_runs_on_this_course(tmp_path):
    """docs/authoring.md's `make exercise` line, on a copy of the course: it writes the exercise's parts."""
    line = next(line for line in (ROOT / "docs" / "authoring.md").read_text().splitlines()
                if line.startswith("make exercise "))
    args = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
    import shutil
    for part in ("course.yml", "solutions", "README.md", "requirements.txt"):
        source = ROOT / part
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp_path / part)
    for folder in ("autograder/suites", "tests/catalogue"):
        (tmp_path / folder).mkdir(parents=True)
    taken = {exercise.id for assignment in load_course().assignments for exercise in assignment.exercises}
    new = next(name for name in (args["ID"], *(f"{args['ID']}_{n}" for n in range(2, 99))) if name not in taken)
    written = scaffold(new, args["ASSIGNMENT"], args["FUNCTION"], args.get("TITLE", "").strip('"') or None,
                       root=tmp_path)   # a course that followed the example already has its id: the next free one
    assert (tmp_path / "tests" / "catalogue" / f"{new}.py") in written


def test_the_layout_names_every_module():
    layout = (ROOT / "docs" / "layout.md").read_text()
    modules = [path for path in (ROOT / "autograder").rglob("*.py") if path.name != "__init__.py"
               and not (path.parent.name == "suites" and path.name.startswith("test_"))]
    assert [str(path.relative_to(ROOT)) for path in modules if path.name not in layout] == []


def test_the_catalogues_counts_in_the_docs_are_the_catalogues():
    from tests.catalogue.__main__ import PAGE, START, written
    text = PAGE.read_text()
    assert START in text and written(text) == text, \
        "docs/grading.md's counts of the catalogue are stale: run python -m tests.catalogue"


def test_the_command_lines_docstring_names_every_command():
    import re

    from autograder import __main__ as cli
    commands = next(action for action in cli.parser()._subparsers._group_actions).choices
    named = set(re.findall(r"[a-z][a-z0-9-]+", cli.__doc__))
    assert len(commands) >= 18 and sorted(set(commands) - named) == []
