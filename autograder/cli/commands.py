"""What the command groups share: `command`, which makes a handler a command with its options written
above it (as otter's options sit on their handlers), a parser made of groups' commands, a command run
with its errors as one line, the options several commands take (each written once), and the sandbox's
check before student code runs."""

import argparse
import os
import sys
from dataclasses import dataclass, field

from autograder.course import CourseError, load_course
from autograder.sandbox import cgroup
from autograder.sandbox.jail import SandboxUnavailable, probe


@dataclass(frozen=True)
class Option:
    """One argparse argument: its flags and add_argument's settings."""
    flags: tuple
    settings: dict

    def add_to(self, parser):
        parser.add_argument(*self.flags, **self.settings)


@dataclass(frozen=True)
class OneOf:
    """Options of which a command takes one at most (or exactly one, `required`)."""
    options: tuple
    required: bool = False

    def add_to(self, parser):
        group = parser.add_mutually_exclusive_group(required=self.required)
        for option in self.options:
            option.add_to(group)


def option(*flags, **settings):
    return Option(flags, settings)


def one_of(*options, required=False):
    return OneOf(options, required)


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple
    run: object                       # run(args, course) -> the exit code
    defaults: dict = field(default_factory=dict)

    def add_to(self, commands):
        parser = commands.add_parser(self.name, help=self.help)
        for option in self.options:
            option.add_to(parser)
        parser.set_defaults(run=self.run, **self.defaults)


def command(name, help, *options, **defaults):
    """The handler below is the command `name` (--help's line `help`), taking `options` in this order."""
    def made(handler):
        handler.command = Command(name, help, options, handler, defaults)
        return handler
    return made


def commands_of(module):
    """The commands a group's module defines, in the order it defines them."""
    return [value.command for value in vars(module).values()
            if callable(value) and isinstance(getattr(value, "command", None), Command)
            and value.__module__ == module.__name__]


def build_parser(groups, description):
    """The command line of the groups' commands (each a module of cli/), in their order."""
    main = argparse.ArgumentParser(prog="python -m autograder", description=description,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    main.add_argument("--course", default=None, help="path to course.yml (default: the repository's)")
    commands = main.add_subparsers(dest="command", required=True)
    for group in groups:
        for command in commands_of(group):
            command.add_to(commands)
    return main


def run_command(args, offer=lambda course: (None, "")):
    """args.run(args, course) for the course args name, unless offer(course) gives an exit code (the
    grading service ran it); an error the instructor can act on is one line on stderr (exit code 2)."""
    # nbgrader runs tools of its own (alembic) from PATH; they live beside this interpreter.
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    try:
        course = load_course(args.course)
        code, why_not = offer(course)
        if code is not None:
            return code
        if getattr(args, "db", "") is None:
            args.db = course.gradebook_url
        code = args.run(args, course)
        if why_not and code == 0:   # after the run: an error stays the one line it is
            print(f"note: run without the course's grading service: {why_not}", file=sys.stderr)
        return code
    except SandboxUnavailable as error:
        print(f"error: the sandbox cannot be built here ({error}); install bubblewrap and allow user "
              "namespaces, or set `sandbox: none` in course.yml to run student code unsandboxed",
              file=sys.stderr)
        return 2
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def shard(text):
    """--shard K/N's type."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N (for example 2/4)") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"shard {text}: K must be between 1 and N")
    return k, n


def check_sandbox(course, probe_it=True):
    """Before student code runs: SandboxUnavailable where the course's sandbox cannot be built (probed
    where `probe_it`), a line on stderr for the instructor about what it binds of a GPU, and the
    warning where memory cannot be accounted per child."""
    if probe_it and course.limits.sandboxed:
        line = probe()
        if line:
            print(line, file=sys.stderr)
    warning = cgroup.fallback_warning()
    if warning:
        print(warning, file=sys.stderr)


def say(line):
    print(line, flush=True)


# The options several commands share, each written once.

# the options that choose part of the class, the same wherever a class is graded
SELECTION = (option("--assignment", action="append", help="only this assignment (repeatable)"),
             option("--student", action="append", help="only students matching this glob (repeatable)"))
SUBMITTED = option("--submitted", default="submitted")
DB = option("--db", default=None, help="nbgrader gradebook URL (default: gradebook.db in the course root)")
ORGANIZATION = (option("--organization", default=None, help="default: course.yml's github.organization"),
                option("--prefix", default=None, help="default: course.yml's github.repository_prefix"))
GRADED = option("--out", default="grading", help="the folder grade-class wrote")
AUTOGRADED = option("--autograded", default=None,
                    help="nbgrader's autograded/ folder (default: beside the submitted folder)")
NO_SERVICE = option("--no-service", action="store_true",
                    help="grade in this process even where a grading service runs (see serve)")
API = option("--api", default=None, help="the REST API's URL (default: $GITHUB_API_URL or GitHub's)")
JOBS = option("--jobs", type=int, default=0, help="grading processes (default: one per core)")
