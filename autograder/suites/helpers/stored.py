"""Values the suites work out the same way for every submission (the grader's answers and its named
mistakes on the long memory inputs), kept on disk between grading processes and runs:

    @stored
    def memory_reference(seed, causal=False):
        ...

is functools.cache, and more: the first process to need a value saves it (torch.save) in the grader's
cache folder (files.cache_folder: ~/.cache/attention-course/suites), under a name made of the function,
its arguments and a hash of the suites' own code (every file under autograder/suites/) and of torch's
version, so that a changed suite or another torch never reads an old value.  Every other process,
this run's or a later one's, reads it back (weights_only: tensors, and tuples, lists and dicts of
them; files.cached).  A file that cannot be read is worked out again; where the folder cannot be
written the value is kept in the process only.
"""

import contextlib
import functools
import hashlib
import io
from pathlib import Path

import torch

from autograder.files import cache_folder, cached

SUITES = Path(__file__).resolve().parent.parent


@functools.cache
def version():
    """What the stored values depend on besides their arguments: the suites' code and torch's version."""
    digest = hashlib.sha256(torch.__version__.encode())
    for path in sorted(SUITES.rglob("*.py")):
        digest.update(str(path.relative_to(SUITES)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def stored(function):
    """The decorator: see the module's docstring.  Arguments must have a repr that names them (numbers,
    booleans, strings)."""
    name = f"{Path(function.__code__.co_filename).stem}.{function.__qualname__}"

    @functools.cache
    def wrapper(*args, **kwargs):
        stem = f"{name}-{hashlib.sha256(repr((args, sorted(kwargs.items()))).encode()).hexdigest()[:12]}"

        def make():
            buffer = io.BytesIO()
            torch.save(function(*args, **kwargs), buffer)
            _remove_older(stem)
            return buffer.getvalue()
        return cached("suites", f"{stem}-{version()}.pt", make, _load)
    return functools.update_wrapper(wrapper, function)


def _load(data):
    return torch.load(io.BytesIO(data), weights_only=True)


def _remove_older(stem):
    """The same value (`stem`) of older suites or another torch: no longer read, so removed."""
    with contextlib.suppress(OSError):
        for old in cache_folder("suites").glob(f"{stem}-*.pt"):
            if not old.name.endswith(f"-{version()}.pt"):
                old.unlink(missing_ok=True)
