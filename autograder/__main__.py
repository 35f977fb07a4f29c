"""Command line: python -m autograder COMMAND ...; `--help` on each says more.

    grading       grade (one notebook), grade-class, serve (keeps both warm), check-server
                  (students' notebooks graded on demand), merge (shards),
                  grade-slurm, k8s-manifests, gradescope (inside Gradescope's image), report,
                  manual-score
    delivery      release, student-kit, gradescope-zip, collect-push, post-push, variants (each
                  student's numbers), variant-secret
    the LMS       export-lms, lms-keys, lms-push
    authoring     new-exercise

Each command parses its arguments, calls one function of the package and prints what it gave.
"""

import atexit
import os
import sys
import threading

from autograder.cli import course, delivery, grading, lms, scale
from autograder.cli.commands import build_parser, run_command

GROUPS = (grading, scale, delivery, lms, course)   # --help lists their commands in this order


def parser():
    return build_parser(GROUPS, __doc__)


def main(argv=None):
    """python -m autograder ARGV: the command, handed to the course's grading service where one runs and
    takes it (service.offer), else run here."""
    from autograder import service

    argv = sys.argv[1:] if argv is None else list(map(str, argv))
    args = parser().parse_args(argv)
    args.argv = argv

    def offer(course):
        return (None, "") if getattr(args, "no_service", True) else service.offer(course.root, args.command, argv)
    return run_command(args, offer)


def _exit(code):
    """A command that returned has written and closed what it made; tearing the interpreter down after it
    (torch's, nbgrader's and SQLAlchemy's modules: about a second of one core after grading a class)
    changes nothing on disk.  What was registered to run at exit runs (logging's flush, temporary
    folders), the output is flushed, and the process ends.  A thread still running, or a Python without
    atexit's runner, gets the ordinary exit."""
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


if __name__ == "__main__":
    _exit(main())
