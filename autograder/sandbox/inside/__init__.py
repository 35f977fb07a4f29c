"""What runs beside student code: the warm worker (`worker.py`) and what its children answer
(`handlers.py`), seccomp and limits (`confine.py`), the from-scratch guard (`guard.py`), the wire
format (`protocol.py`), the count of a call's work in torch (`counter.py`) and in Triton's interpreter
(`kernels.py`), a kernel held to what Triton's GPU compiler accepts (`gpu_compiler.py`), and a cell
compiled with its source readable (`cells.py`).

This folder is bound read-only into the sandbox as /sandbox, and the worker imports its modules by
their own names (`import protocol`), so nothing here may import from the rest of the grader.  The
trusted side imports the few it shares (the wire format, the cell compiler) as
`autograder.sandbox.inside.<module>`.
"""
