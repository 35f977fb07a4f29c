"""What the sandbox's tests share: a warm worker for a test module, and a submission made of cells."""

import contextlib

import pytest

from autograder.harness.context import Student
from autograder.sandbox.student import Cell, Limits, StudentProcess, Worker


def warm_worker(limits):
    """A module-scoped fixture: one warm worker, started with `limits`, for every test of the module."""
    @pytest.fixture(scope="module")
    def worker():
        with Worker(limits) as started:
            started.start()
            yield started
    return worker


@contextlib.contextmanager
def submission(worker, limits, *sources, prefix="import torch\n", **overrides):
    """A submission of one cell per source (each after `prefix`), graded under `limits` with `overrides`."""
    cells = [Cell(str(i), prefix + source) for i, source in enumerate(sources)]
    with StudentProcess(worker, cells, Limits(**{**vars(limits), **overrides})) as process:
        yield Student(process)
