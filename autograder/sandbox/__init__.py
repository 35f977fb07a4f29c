"""The wall between the grader and student code.

This folder is the trusted side: it starts the sandbox (`jail.py`), accounts for each child's memory
and processes (`cgroup.py`, `memory.py`), holds the grader's handle on the warm worker and each
submission's child (`student.py`), and checks every reply before anything uses it (`replies.py`).

`inside/` holds what runs beside student code, and nothing else: it is the only folder of the grader
bound into the sandbox (as /sandbox, its modules imported there by their own names), and the names
the course's static rules protect from student code are its modules (`inside_modules`).  Code here
may import from `inside/` (the wire format, the cell compiler); nothing in `inside/` imports from here.
"""

from pathlib import Path

INSIDE_DIR = Path(__file__).resolve().parent / "inside"


def inside_modules():
    """The names of the modules bound into the sandbox, as student code would import them."""
    return tuple(sorted(path.stem for path in INSIDE_DIR.glob("*.py") if path.stem != "__init__"))
