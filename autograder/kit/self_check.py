"""Run your notebooks and report which visible checks pass: what the self-check workflow runs.

    .venv/bin/python self_check.py           every notebook in this repository
    .venv/bin/python self_check.py masks     only the masks/ folder

Each notebook runs top to bottom in a fresh kernel (a cell that fails does not stop the others);
each cell of visible checks (the `assert` cells after the exercises) is reported as passing or
failing, with the reason.  The exit status is 0 when every check passes and 1 otherwise, so the
workflow's run is red until they all pass.  This is the same as running the notebook yourself: it
is not your grade, and it holds nothing of the hidden tests.
"""

import os
import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

CELL_TIMEOUT = 600  # seconds; the training cells of the later notebooks take a minute or two


def reason(error):
    """Why a check cell failed, in one line, even when its error carries no message."""
    name, value = error.get("ename", "Error"), (error.get("evalue") or "").strip()
    if value:
        return f"{name}: {value.splitlines()[0]}"
    if name == "NotImplementedError":
        return "NotImplementedError: an exercise this cell checks is still the stub"
    # the line IPython marks with an arrow in the last frame: the assert that failed, say
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for frame in error.get("traceback", []) for line in frame.splitlines()]
    marked = [line.split(maxsplit=2)[-1] for line in lines if re.match(r"\s*-+>\s*\d+\s", line)]
    return f"{name} at `{marked[-1].strip()}`" if marked else f"{name} (with no message)"


def checks(path):
    """[(check cell id, passed, reason)] for one notebook, run in a fresh kernel (whose own log says
    only errors: the notebook's outputs are what matters here)."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=CELL_TIMEOUT, allow_errors=True, kernel_name="python3",
                   extra_arguments=["--IPKernelApp.log_level=ERROR"],
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    found = []
    for cell in notebook.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            errors = [output for output in cell.get("outputs", []) if output.get("output_type") == "error"]
            found.append((meta.get("grade_id", "?"), not errors, reason(errors[0]) if errors else ""))
    return found


def main(folders):
    root = Path(__file__).resolve().parent
    patterns = [f"{folder.strip('/')}/*.ipynb" for folder in folders] or ["*/*.ipynb"]
    notebooks = sorted({path for pattern in patterns for path in root.glob(pattern)})
    if not notebooks:
        print(f"no notebook found for {' '.join(folders) or 'this repository'} (run me from the kit's folder)",
              file=sys.stderr)
        return 2
    lines = ["# Self-check", "", "| notebook | visible check | result |", "|---|---|---|"]
    results = []
    for path in notebooks:
        for check, passed, message in checks(path):
            results.append(passed)
            lines.append(f"| {path.parent.name}/{path.name} | {check} | "
                         + ("passes" if passed else f"fails: {message.replace('|', '/')[:200]}") + " |")
    lines += ["", f"{sum(results)} of {len(results)} visible checks pass. They are a help, not your grade: "
              "the hidden tests are your instructor's.", ""]
    text = "\n".join(lines)
    print(text)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as handle:
            handle.write(text)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
