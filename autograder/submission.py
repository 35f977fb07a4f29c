"""Turn a submitted notebook into the code cells that will run, using the instructor's copy.

Like nbgrader, the instructor's copy decides what each cell is: a submission can edit its own
answers and add cells, but read-only cells come from the instructor, and the autograded test cells
(the visible self-checks) do not run at all: the hidden suites grade.  Edited nbgrader metadata in
the submission therefore changes nothing.

Read-only cells whose grade_id starts with "demo_" (training runs, timings, figures) are for
reading only: nothing graded may depend on them, so they are skipped to keep grading fast.
"""

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.intake import SubmissionError, read_file


MAX_FILE_BYTES = 512 * 1024 * 1024   # what is read at all (outputs included)
MAX_CODE_BYTES = 20 * 1024 * 1024    # what is run: the cells' sources, once outputs are dropped
MAX_CELLS = 5000                     # cells of every kind; the course's notebooks have about 60


@dataclass
class Cell:
    label: str
    source: str

    @property
    def defines(self):
        """Top-level functions, classes and names the cell defines, read from the text (so even
        from a cell with a syntax error)."""
        return tuple(dict.fromkeys(found.group(1) or found.group(2)
                                   for found in TOP_LEVEL_NAME.finditer(self.source)))


TOP_LEVEL_NAME = re.compile(r"^(?:(?:async\s+)?def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)",
                            re.MULTILINE)


@dataclass
class Program:
    cells: list                                  # Cells to run, in order
    answers: dict = field(default_factory=dict)  # exercise id -> the student's answer source
    grade_ids: set = field(default_factory=set)  # every nbgrader cell id found in the submission
    written: dict = field(default_factory=dict)  # label -> source of every cell the student wrote


def _nbgrader(cell):
    metadata = cell.get("metadata")
    nbgrader = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return nbgrader if isinstance(nbgrader, dict) else {}


DEMO_PREFIX = "demo_"


def cell_kind(cell):
    meta = _nbgrader(cell)
    if meta.get("grade") and not meta.get("solution"):
        return "test"
    if meta.get("solution"):
        return "answer"
    if meta.get("locked"):
        return "demo" if str(meta.get("grade_id", "")).startswith(DEMO_PREFIX) else "locked"
    return "free"


def digest_files(digest, folder, names):
    """Feed `digest` each named file of a submission folder as the grader reads it: its name, then its
    bytes, or why it cannot be read (a fingerprint of what is graded, the version of a student's work)."""
    for name in names:
        digest.update(name.encode())
        try:
            digest.update(read_file(Path(folder) / name, folder, MAX_FILE_BYTES))
        except SubmissionError as error:
            digest.update(str(error).encode())
    return digest


def read_notebook(path, folder=None):
    """Read a notebook with nbformat, or raise SubmissionError with a one-line reason.  `folder`
    is the submission folder it must lie in (links out of it are refused); None for the course's own."""
    path = Path(path)
    data = read_file(path, path.parent if folder is None else folder, MAX_FILE_BYTES)
    if not data.strip():
        raise SubmissionError(f"{path.name} is empty")
    try:
        text = data.decode("utf-8")
        raw = json.loads(text)
        cells = raw.get("cells") if isinstance(raw, dict) else None  # counted before nbformat validates each
        if isinstance(cells, list) and len(cells) > MAX_CELLS:
            raise SubmissionError(f"{path.name} has {len(cells)} cells, over the limit of "
                                  f"{MAX_CELLS} cells for a notebook")
        notebook = nbformat.reads(text, as_version=4)
    except SubmissionError:
        raise
    except Exception as error:  # nbformat raises many types for broken files
        kind = "not JSON" if "JSON" in type(error).__name__ or "json" in str(error).lower() \
            else "not UTF-8" if isinstance(error, UnicodeDecodeError) else type(error).__name__
        raise SubmissionError(f"{path.name} is not a readable notebook ({kind})") from None
    if not isinstance(notebook.get("cells"), list) or \
            not all(isinstance(cell, dict) for cell in notebook["cells"]):
        raise SubmissionError(f"{path.name} is not a readable notebook (no list of cells)")
    # Outputs and attachments are never read: they are dropped before any size check.
    for cell in notebook["cells"]:
        cell.pop("outputs", None)
        cell.pop("attachments", None)
    code = sum(len(_source(cell).encode("utf-8", "replace")) for cell in notebook["cells"])
    if code > MAX_CODE_BYTES:
        raise SubmissionError(f"{path.name} holds {code / 2**20:.0f} MB of code, over the "
                              f"{MAX_CODE_BYTES // 2**20} MB limit")
    return notebook


def _source(cell):
    """The cell's code; lone surrogates (valid JSON, not valid UTF-8) become U+FFFD."""
    source = cell.get("source", "")
    source = "".join(map(str, source)) if isinstance(source, list) else str(source)
    return source.encode("utf-8", "replace").decode("utf-8")


def build_program(submitted, instructor):
    """Merge a submission with the instructor's release notebook into the cells to run."""
    reference = {}
    for index, cell in enumerate(instructor.cells):
        grade_id = _nbgrader(cell).get("grade_id")
        if grade_id and cell.get("cell_type") == "code":
            reference[grade_id] = (index, cell)

    released = {_source(cell) for cell in instructor.cells if cell.get("cell_type") == "code"}
    emitted = []  # (instructor index or None, Cell)
    seen = set()
    answers = {}
    grade_ids = {str(_nbgrader(cell).get("grade_id")) for cell in submitted.cells if _nbgrader(cell).get("grade_id")}
    for position, cell in enumerate(submitted.cells):
        if cell.get("cell_type") != "code":
            continue
        grade_id = _nbgrader(cell).get("grade_id")
        grade_id = grade_id if isinstance(grade_id, str) else None
        known = reference.get(grade_id) if grade_id not in seen else None
        if known is None:
            # A cell the student added (or an ordinary demo cell): it runs as written.
            emitted.append((None, Cell(f"{position + 1}", _source(cell))))
            continue
        seen.add(grade_id)
        index, original = known
        kind = cell_kind(original)
        if kind == "answer":
            answers[grade_id] = _source(cell)
            emitted.append((index, Cell(grade_id, _source(cell))))
        elif kind == "locked":
            emitted.append((index, Cell(grade_id, _source(original))))
        else:
            emitted.append((index, None))  # a test cell (the hidden suites grade) or a demo

    # Read-only cells the student deleted come back, after the cell that preceded them.
    for grade_id, (index, original) in reference.items():
        if grade_id not in seen and cell_kind(original) == "locked":
            at = max((i for i, (where, _) in enumerate(emitted) if where is not None and where < index),
                     default=-1)
            emitted.insert(at + 1, (index, Cell(grade_id, _source(original))))
    cells = [cell for _, cell in emitted if cell is not None]
    written = {cell.label: cell.source for cell in cells if cell.label in answers or
               (cell.label.isdigit() and cell.source not in released)}
    return Program(cells=cells, answers=answers, grade_ids=grade_ids, written=written)


def load_program(path, folder, instructor_path):
    return build_program(read_notebook(path, folder), course_notebook(instructor_path))


def course_notebook(path):
    """A notebook of the course's own (the instructor's release copy), read and validated once while
    its file is unchanged: a warm grader merges every submission with it (12 ms a read, a tenth of a
    check of masks on the grading process's side).  The same object every time: not to be changed."""
    try:
        found = Path(path).stat()
    except OSError:
        return read_notebook(path)   # which says why in its own words
    return _course_notebook(Path(path), found.st_mtime_ns, found.st_size)


@functools.lru_cache(maxsize=64)
def _course_notebook(path, mtime_ns, size):
    return read_notebook(path)


def check_belongs(program, notebook, course):
    """A notebook without any of its assignment's answer cells (by nbgrader cell id) is another
    notebook: refuse it, naming the assignment it looks like."""
    if {exercise.id for exercise in notebook.exercises} & program.grade_ids:
        return
    likely = max(((len({e.id for e in other.exercises} & program.grade_ids), assignment.id)
                  for assignment in course.assignments for other in assignment.notebooks), default=(0, ""))
    looks_like = f"; it looks like {likely[1]}" if likely[0] else ""
    raise SubmissionError(f"{notebook.filename} has none of the answer cells of this assignment "
                          f"({', '.join(e.id for e in notebook.exercises)}){looks_like}")
