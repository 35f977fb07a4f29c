"""The four kinds of catalogue entry: answers as students write them.

A Mistake must lose points on its exercise only in the tests named in `fails` (the properties it
breaks), with feedback that gives its cause, CAUSES[cause] of the exercise's suite, and no other
mistake's cause.  A Variant is correct, written differently from the reference solution, and
must get full marks.  A Degenerate answer keeps the shapes and the structure but computes nothing
the exercise is about; it must earn at most DEGENERATE_SHARE of its exercise.  A Gaming answer is
written to earn a measured point (memory, counted work, what a cache serves, a pruning that must run
the model) without the algorithm it measures: it must lose exactly the tests in `loses`, and their
feedback must say `says`.
"""

from dataclasses import dataclass

DEGENERATE_SHARE = 0.2


@dataclass(frozen=True)
class Mistake:
    name: str
    cause: str            # a key of CAUSES in the exercise's suite module
    fails: tuple          # the tests it may fail (names without test_)
    code: str
    also_fails: tuple = ()  # known debt: tests it still fails although their property holds
    also_named: tuple = ()  # other causes its feedback may give: the answer really makes those mistakes too
    exercise: str = ""      # filled in from the module that lists it


@dataclass(frozen=True)
class Variant:
    name: str
    code: str
    exercise: str = ""


@dataclass(frozen=True)
class Degenerate:
    name: str
    code: str
    exercise: str = ""


@dataclass(frozen=True)
class Gaming:
    name: str
    code: str
    loses: tuple          # the tests it must lose, and the only ones (names without test_)
    says: str             # words the feedback of those tests must contain
    exercise: str = ""


def edited(code, *pairs):
    """code with each (old, new) pair replaced in turn: a mistake written as an edit of the reference
    solution (every `old` must be there, so the entry cannot silently stop being a mistake)."""
    for old, new in zip(pairs[::2], pairs[1::2]):
        assert old in code, old
        code = code.replace(old, new)
    return code
