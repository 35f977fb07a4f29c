"""`python -m tests.catalogue`: write the catalogue's counts into docs/grading.md, between its two
markers (make check does it too); tests/test_docs.py checks that the page holds what this makes."""

import sys

from autograder.readme import between
from tests.catalogue import DEGENERATES, GAMING, MISTAKES, ALTERNATIVES
from tests.notebooks import ROOT

PAGE = ROOT / "docs" / "grading.md"
START = "<!-- catalogue: written by python -m tests.catalogue (and make check) -->"
END = "<!-- end of catalogue -->"


def counts():
    """The sentence of the catalogue's counts, as docs/grading.md gives it."""
    debt = sum(bool(mistake.also_fails) for mistake in MISTAKES)
    exercises = len({entry.exercise for entry in MISTAKES + ALTERNATIVES + DEGENERATES})
    return (f"Today the catalogue holds, over {exercises} exercises, {len(MISTAKES)} mistakes, {len(ALTERNATIVES)} "
            f"correct alternatives, {len(DEGENERATES)} degenerate answers and {len(GAMING)} answers that game a measured "
            f"point. {len(MISTAKES) - debt} of the {len(MISTAKES)} mistakes fail exactly their properties; the other "
            f"{debt} (their `also_fails`) also fail a value test in another regime, listed as debt.")


def written(text):
    """The page's text with the counts as the catalogue makes them (unchanged without the markers)."""
    return between(text, START, END, counts())


def main():
    PAGE.write_text(written(PAGE.read_text()))
    print(f"wrote the catalogue's counts into {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
