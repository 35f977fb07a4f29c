"""Every solution notebook runs top to bottom, each in a fresh kernel as a student opens it; every
released one runs until its first stub (one kernel serves them all, its namespace emptied and its
folder changed before each: starting a kernel that imports torch costs seconds of CPU a notebook)."""

import os

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.notebooks import COURSE

pytestmark = pytest.mark.slow   # every solution notebook run top to bottom (minutes): make test-all and CI


def one_thread():
    """The kernels' environment.  They run beside other tests on a small machine: one thread each, or
    torch's idle worker threads of several processes compete for the cores (a 13 s notebook took two
    minutes).  Only theirs: this process's own environment is what its grader runs inherit."""
    return {**os.environ, "OMP_NUM_THREADS": "1"}

NOTEBOOKS = [(a, nb) for a in COURSE.assignments for nb in a.notebooks]
IDS = [f"{a.id}/{nb.name}" for a, nb in NOTEBOOKS]


def execute(path, km=None):
    """Run a notebook's cells in a fresh kernel, or in the running kernel of `km`, emptied first."""
    notebook = nbformat.read(path, as_version=4)
    if km is not None:
        notebook.cells.insert(0, nbformat.v4.new_code_cell(f"%reset -f\nimport os\nos.chdir({str(path.parent)!r})"))
    client = NotebookClient(notebook, km=km, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    if km is None:
        client.execute(env=one_thread())
    else:
        client.execute()


@pytest.fixture(scope="module")
def kernel():
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=one_thread())
    yield km
    km.shutdown_kernel(now=True)


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS, ids=IDS)
def test_solution_notebook_runs_top_to_bottom(assignment, notebook):
    execute(COURSE.source_notebook(assignment, notebook))


@pytest.mark.parametrize("assignment,notebook", NOTEBOOKS, ids=IDS)
def test_released_notebook_stops_at_a_stub(kernel, assignment, notebook):
    with pytest.raises(CellExecutionError, match="NotImplementedError"):
        execute(COURSE.release_notebook(assignment, notebook), kernel)
