"""A grading process's lifetime tied to the process that forked it: a class run's grading processes
(classrun/fanout.py) and the check server's (ondemand/pool.py) end with the run or the server, however it
ends."""

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1   # prctl(2): the signal this process gets when the thread that made it ends


def die_with(parent):
    """End this process (SIGKILL) when `parent`, the process that forked it, dies, however it dies.  The
    kernel sends the signal, so a parent killed with SIGKILL is covered (a process group the run owns
    and kills would need the run alive to kill it).  A parent already gone before the signal was asked
    for is seen by its pid: this process then exits at once."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:
        os._exit(1)
