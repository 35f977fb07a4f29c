"""The course's catalogue, one module per exercise (tests/catalogue/<exercise id>.py): the
mistakes students really make, correct alternatives written differently from the reference,
degenerate answers that compute no attention, and answers that game a measured point.  tests/test_catalogue.py grades them all and
`make check EXERCISE=id` grades one exercise's part (tests/check.py judges both).
"""

import importlib
from dataclasses import replace

from tests.catalogue.entries import DEGENERATE_SHARE, Degenerate, Gaming, Mistake, Alternative
from tests.notebooks import COURSE

SUITES = {exercise.id: exercise.suite.stem for assignment in COURSE.assignments for exercise in assignment.exercises}


def _collect(kind):
    found = []
    for exercise in SUITES:
        module = importlib.import_module(f"tests.catalogue.{exercise}")
        found += [replace(entry, exercise=exercise) for entry in getattr(module, kind, ())]
    return found


MISTAKES, ALTERNATIVES, DEGENERATES = _collect("MISTAKES"), _collect("ALTERNATIVES"), _collect("DEGENERATES")
GAMING = _collect("GAMING")  # only the exercises with measured points have them


def cause_text(exercise, key):
    """The words a mistake's feedback must contain: CAUSES[key] of the exercise's suite."""
    return importlib.import_module(f"autograder.suites.{SUITES[exercise]}").CAUSES[key]


def mistake(exercise, name):
    """The code of a catalogued mistake, for reuse (the sample class uses some)."""
    return next(m.code for m in MISTAKES if m.exercise == exercise and m.name == name)


__all__ = ["DEGENERATE_SHARE", "DEGENERATES", "GAMING", "MISTAKES", "ALTERNATIVES", "Degenerate", "Gaming", "Mistake",
           "Alternative",
           "cause_text", "mistake"]
