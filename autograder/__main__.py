"""`python -m autograder`: the command line (cli.py), and a quick exit once a command has returned."""

import atexit
import os
import sys
import threading

from autograder.cli import main

code = main()
# A command that returned has written and closed what it made; tearing the interpreter down after it
# (torch's, nbgrader's and SQLAlchemy's modules: about a second of one core after grading a class)
# changes nothing on disk.  What was registered to run at exit runs (logging's flush, temporary
# folders), the output is flushed, and the process ends.  A thread still running, or a Python without
# atexit's runner, gets the ordinary exit.
run_at_exit = getattr(atexit, "_run_exitfuncs", None)
running = [thread for thread in threading.enumerate() if thread.is_alive() and not thread.daemon
           and thread is not threading.main_thread()]
if run_at_exit is None or running or not isinstance(code, (int, type(None))):
    sys.exit(code)
run_at_exit()
for stream in (sys.stdout, sys.stderr):
    try:
        stream.flush()
    except (OSError, ValueError):   # a closed pipe: nothing more can reach it
        pass
os._exit(code or 0)
