"""The four kinds of catalogue entry: answers as students write them.

A Mistake must lose points on its exercise only in the tests named in `fails` (the properties it
breaks), with feedback that gives its cause, CAUSES[cause] of the exercise's suite, and no other
mistake's cause.  A Alternative is correct, written differently from the reference solution, and
must get full marks.  A Degenerate answer keeps the shapes and the structure but computes nothing
the exercise is about; it must earn at most DEGENERATE_SHARE of its exercise.  A Gaming answer is
written to earn a measured point (memory, counted work, what a cache serves, a pruning that must run
the model) without the algorithm it measures: it must lose exactly the tests in `loses`, and their
feedback must say `says`.

Where kernels are compiled for a GPU instead of run in Triton's interpreter, some counts cannot be
taken (the elements a kernel's loads address, the products of its tl.dots) and a load outside a
tensor reads whatever memory lies there instead of stopping the kernel.  An entry whose grade differs
there says so in `on_gpu`: the tests it fails (a Mistake) or loses (Gaming) on a GPU, or a sentence
saying why it is not judged there (UNDEFINED_ON_A_GPU).
"""

from dataclasses import dataclass, replace

DEGENERATE_SHARE = 0.2
# What a kernel that reads or writes outside its tensors does on a GPU depends on what lies there.
UNDEFINED_ON_A_GPU = ("it reads memory outside its tensors, which on a GPU holds whatever lies there (the "
                      "interpreter stops it and names the cause): its grade there is not defined")


@dataclass(frozen=True)
class Mistake:
    name: str
    cause: str            # a key of CAUSES in the exercise's suite module
    fails: tuple          # the tests it may fail (names without test_)
    code: str
    also_fails: tuple = ()  # known debt: tests it still fails although their property holds
    also_named: tuple = ()  # other causes its feedback may give: the answer really makes those mistakes too
    on_gpu: object = None   # the tests it fails where kernels run on a GPU, if others; or why it is not judged there
    exercise: str = ""      # filled in from the module that lists it


@dataclass(frozen=True)
class Alternative:
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
    on_gpu: object = None  # the tests it loses where kernels run on a GPU, if others; or why it is not judged there
    exercise: str = ""


def on_device(entry, device):
    """The entry as it must grade where kernels run on `device` ("cpu": Triton's interpreter, or "cuda"):
    None where it is not judged there."""
    if device != "cuda" or getattr(entry, "on_gpu", None) is None:
        return entry
    if isinstance(entry.on_gpu, str):
        return None
    return replace(entry, fails=tuple(entry.on_gpu)) if isinstance(entry, Mistake) else replace(entry, loses=tuple(entry.on_gpu))


def edited(code, *pairs):
    """code with each (old, new) pair replaced in turn: a mistake written as an edit of the reference
    solution (every `old` must be there, so the entry cannot silently stop being a mistake)."""
    for old, new in zip(pairs[::2], pairs[1::2]):
        assert old in code, old
        code = code.replace(old, new)
    return code
