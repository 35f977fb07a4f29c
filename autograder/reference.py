"""The reference solutions, taken from the instructor's solution notebooks.

The solution notebooks are the single source of the reference code: the grader runs their answer
and read-only cells (never the demos and plots) in its own, trusted process.  Student code never
runs here.
"""

import contextlib
import functools
import io
import os

from autograder.sandbox.inside.cells import compile_cell
from autograder.sandbox.jail import kernel_environment
from autograder.submission import cell_kind, read_notebook


@functools.lru_cache(maxsize=None)
def reference_namespace(solution_path):
    notebook = read_notebook(solution_path)
    # A Triton kernel of a reference runs where a student's does (in the interpreter without a GPU).
    for name, value in kernel_environment().items():
        os.environ.setdefault(name, value)
    namespace = {"__name__": f"reference:{solution_path.stem}"}
    with contextlib.redirect_stdout(io.StringIO()):  # what the cells print is for students to read
        for index, cell in enumerate(notebook.cells):
            if cell.get("cell_type") == "code" and cell_kind(cell) in ("answer", "locked"):
                # one file name a cell, its source readable by inspect (@triton.jit compiles from it)
                exec(compile_cell(cell.source, f"<{solution_path.name} cell {index}>"), namespace)
    return namespace
