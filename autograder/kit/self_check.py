"""Run your notebooks and report which visible checks pass: what the self-check workflow runs.

    python self_check.py                 every notebook in this repository
    python self_check.py masks           only the masks/ folder

Each notebook runs top to bottom in a fresh kernel (a cell that fails does not stop the others);
each cell of visible checks (the `assert` cells after the exercises) is reported as passing or
failing, with the first line of its error.  This is the same as running the notebook yourself: it
is not your grade, and it holds nothing of the hidden tests.
"""

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

CELL_TIMEOUT = 600  # seconds; the training cells of the later notebooks take a minute or two


def checks(path):
    """[(check cell id, passed, message)] for one notebook, run in a fresh kernel."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=CELL_TIMEOUT, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    found = []
    for cell in notebook.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            errors = [output for output in cell.get("outputs", []) if output.get("output_type") == "error"]
            message = f"{errors[0].get('ename')}: {errors[0].get('evalue')}".splitlines()[0] if errors else ""
            found.append((meta.get("grade_id", "?"), not errors, message))
    return found


def main(folders):
    root = Path(__file__).resolve().parent
    patterns = [f"{folder.strip('/')}/*.ipynb" for folder in folders] or ["*/*.ipynb"]
    notebooks = sorted({path for pattern in patterns for path in root.glob(pattern)})
    lines = ["# Self-check", "", "| notebook | visible check | result |", "|---|---|---|"]
    for path in notebooks:
        for check, passed, message in checks(path):
            lines.append(f"| {path.parent.name}/{path.name} | {check} | "
                         + ("passes" if passed else f"fails: {message.replace('|', '/')[:200]}") + " |")
    lines += ["", "The visible checks are a help, not your grade: the hidden tests are your instructor's.", ""]
    text = "\n".join(lines)
    print(text)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
