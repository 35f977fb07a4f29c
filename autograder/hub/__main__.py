"""`python -m autograder.hub`: prepare the term's folder (prepare.py), then run the hub until Ctrl-C.

    python -m autograder.hub --state /srv/attention-hub [--roster roster.csv] [--port 8000] [--release]
    python -m autograder.hub --state /srv/attention-hub --undo   # its accounts removed, folders closed again
"""

import argparse
import os
import sys
from pathlib import Path

from autograder.course import ROOT, CourseError
from autograder.hub.prepare import DEMO_PASSWORD, VENV_BIN, Term, prepare, release, undo

CONFIG = Path(__file__).resolve().parent / "jupyterhub_config.py"


def hub_command(term):
    """The hub's command and environment (jupyterhub_config.py reads the term from COURSE_HUB_STATE)."""
    env = {**os.environ, "COURSE_HUB_STATE": str(term.folder), "PYTHONPATH": str(ROOT),
           "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}
    return [str(VENV_BIN / "jupyterhub"), "-f", str(CONFIG)], env


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograder.hub", description=__doc__.splitlines()[0])
    parser.add_argument("--state", required=True, help="the term's folder (accounts' homes, the exchange, the hub's files)")
    parser.add_argument("--roster", default="", help="CSV with a `student` column (default: two demo students)")
    parser.add_argument("--instructor", default="instructor")
    parser.add_argument("--assignment", default="attention_basics")
    parser.add_argument("--due", default="", help="the assignment's due date, ISO (default: a week from now)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--password", default=DEMO_PASSWORD)
    parser.add_argument("--release", action="store_true", help="release the assignment now, as the instructor "
                        "would in formgrader (make hub's demo does)")
    parser.add_argument("--undo", action="store_true", help="remove the accounts this folder made, close the "
                        "folders it opened")
    args = parser.parse_args(argv)
    try:
        if args.undo:
            term = Term.load(args.state)
            removed, opened, closed = list(term.created), [place for place, _ in term.opened], len(term.closed)
            undo(term)
            term.save()
            print(f"removed {len(removed)} account(s): {', '.join(removed) or 'none'}; closed again: "
                  f"{', '.join(opened) or 'nothing'}; opened again: {closed} entries of the checkout")
            return 0
        term = Term(state=str(Path(args.state).resolve()), roster=args.roster, instructor=args.instructor,
                    assignment=args.assignment, due=args.due, port=args.port, password=args.password)
        previous = Path(args.state) / "hub" / "hub.json"
        if previous.exists():
            before = Term.load(args.state)   # what it made, opened and closed: `undo` restores the first state
            term.created, term.opened, term.closed = before.created, before.opened, before.closed
        prepare(term)
        if args.release:
            release(term)
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"The course's hub at {term.url}/  (a demo: every account's password is {term.password!r})\n"
          f"  instructor: {term.instructor} (Nbgrader > Formgrader)   students: {', '.join(term.students)}\n"
          f"  {term.assignment} is {'released' if args.release else 'not released yet'}, due {term.due}; "
          "Ctrl-C stops the hub, its proxy and every server")
    command, env = hub_command(term)
    os.chdir(term.folder / "hub")
    os.execve(command[0], command, env)   # the hub itself: Ctrl-C or SIGTERM reach it, and it stops what it started


if __name__ == "__main__":
    sys.exit(main())
