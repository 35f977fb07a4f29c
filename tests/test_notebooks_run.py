"""Every solution notebook runs top to bottom; every released one runs until its first stub."""

import os

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.notebooks import COURSE

# The kernels run beside other tests on a small machine: one thread each, or torch's idle worker
# threads of several processes compete for the cores (a 13 s notebook took two minutes).
os.environ["OMP_NUM_THREADS"] = "1"

NOTEBOOKS = [(a, nb) for a in COURSE.assignments for nb in a.notebooks]
IDS = [f"{a.id}/{nb.name}" for a, nb in NOTEBOOKS]


def execute(path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS, ids=IDS)
def test_solution_notebook_runs_top_to_bottom(assignment, notebook):
    execute(COURSE.source_notebook(assignment, notebook))


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS, ids=IDS)
def test_released_notebook_stops_at_a_stub(assignment, notebook):
    with pytest.raises(CellExecutionError, match="NotImplementedError"):
        execute(COURSE.release_notebook(assignment, notebook))
