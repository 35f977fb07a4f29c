"""A notebook cell's source compiled the way IPython compiles it (this file runs on both sides: in
the sandbox for the student's cells, in the grader for the reference's).

IPython registers every cell's source with `linecache` under the cell's file name, so that
`inspect.getsource` finds the functions a cell defines.  Code that reads its own source needs it:
`@triton.jit` does, when it compiles a kernel for a GPU (without TRITON_INTERPRET it refuses a
function whose source it cannot read: "@jit functions should be defined in a Python file").
"""

import linecache


def compile_cell(source, filename):
    """The code object of `source`, its lines readable by inspect under `filename` (e.g. "<cell x>")."""
    code = compile(source, filename, "exec")
    # (size, mtime, lines, name): an mtime of None is never checked against a file, so the entry stays.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return code
