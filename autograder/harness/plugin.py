"""The pytest session that runs the hidden suites, in the trusted process.

The suites are collected once per grading process; then the session's run loop (pytest's
documented `pytest_runtestloop` hook, the way pytest-xdist's workers pull tests from a queue)
hands control to the grader, which runs the tests of one submission's exercises as often as it
has submissions.  Tests ask for two fixtures: `student` (the submission, see context.py) and
`reference` (the solution notebook's definitions).  One outcome is recorded per test function,
with the message the student will see.
"""

import re
import traceback
from dataclasses import dataclass

import pytest

from autograder.harness.checks import Feedback
from autograder.sandbox.student import StudentError, StudentFailure, StudentTimeout


@dataclass
class Outcome:
    passed: bool
    message: str = ""
    missing: str = ""  # the name the student's code could not find (a NameError), if that failed it
    picture: dict = None  # pictures.Picture as a dict, when the failed check drew one
    internal: bool = False  # the grader failed (never the student's fault)
    crashed: bool = False   # the student's code raised, hung or broke the process (a stub aside)

    @property
    def refused(self):
        """The check ran to its verdict and the answer did not have the property (or is still the
        stub).  A crash is not a verdict: the tests that need the crashing call charge it."""
        return not self.passed and not self.internal and not self.crashed


NOT_DEFINED = re.compile(r"^(?:name )?'?([A-Za-z_]\w*)'? is not defined")


def missing_name(error):
    """The undefined name behind a student's NameError ('' for any other failure)."""
    if isinstance(error, StudentError) and error.kind == "NameError":
        found = NOT_DEFINED.match(error.message)
        return found.group(1) if found else ""
    return ""


def student_message(error, said=None):
    """What the student sees for an exception raised while a hidden test ran (`said`: the hints already
    shown in the exercise, see Feedback.text)."""
    if isinstance(error, Feedback):
        return error.text(said) if said is not None else str(error)
    if isinstance(error, StudentTimeout):
        return f"Your code did not finish: {error}."
    if isinstance(error, StudentError):
        if error.kind == "NotImplementedError":
            return "Your code raised NotImplementedError: the stub has not been replaced yet."
        trace = f"\n{error.traceback.rstrip()}" if error.traceback.strip() else ""
        return f"Your code raised {error}.{trace}"
    if isinstance(error, StudentFailure):
        return f"Your code could not be run: {error}."
    return "The grader could not run this check (an internal error); please tell your instructor."


class SuiteSession:
    """Collects the suites of `exercises` once; `body(session)` then calls `session.run(...)`."""

    def __init__(self, exercises, body):
        self.by_suite = {exercise.suite.resolve(): exercise for exercise in exercises}
        self.body = body
        self.items = {}            # exercise id -> its collected test items, in file order
        self.result = None
        self.error = None
        self._student = self._reference = None
        self.outcomes = {}         # (exercise id, test name) -> Outcome, for the current run
        self.internal_errors = []  # tracebacks for the instructor's log, never for students
        self.said = set()          # the hints shown in the current exercise's feedback: each is said once

    @pytest.fixture
    def student(self):
        return self._student

    @pytest.fixture
    def reference(self):
        return self._reference

    def _key(self, item):
        exercise = self.by_suite[item.path.resolve()]
        return exercise.id, getattr(item, "originalname", item.name)

    def pytest_collection_modifyitems(self, items):
        # Only the gate and the tests that course.yml gives points to run; tests/test_course.py
        # makes sure nothing is left out by mistake.
        items[:] = [item for item in items if self._key(item)[1] in
                    self.by_suite[item.path.resolve()].tests]

    def pytest_collection_finish(self, session):
        for item in session.items:
            self.items.setdefault(self._key(item)[0], []).append(item)
        for exercise in self.by_suite.values():  # the gate first: its verdict decides what else runs
            self.items.get(exercise.id, []).sort(key=lambda item: self._key(item)[1] != exercise.gate)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        missing = {exercise.id for exercise in self.by_suite.values()} - set(self.items)
        if missing:
            self.error = RuntimeError(f"the hidden suites of {sorted(missing)} collected no tests")
            return True
        try:
            self.result = self.body(self)
        except BaseException as error:  # noqa: B902 - re-raised by with_suites, Ctrl-C included
            self.error = error
        return True

    def prepare(self):
        """Call each collected suite's `prepare()`, where it has one: what every submission's tests
        compare with (the grader's answers on long inputs, lazy imports of its first call), worked out
        once in the process that forks the grading processes (classroom.prime) instead of once in each."""
        modules = {id(item.module): item.module for items in self.items.values() for item in items}
        for module in modules.values():
            if callable(getattr(module, "prepare", None)):
                module.prepare()

    def run(self, exercises, student, reference):
        """Run the tests of `exercises` against one submission; returns the outcomes."""
        self._student, self._reference = student, reference
        self.outcomes, self.internal_errors = {}, []
        plan = [(exercise, self.items.get(exercise.id, [])) for exercise in exercises]
        for position, (exercise, items) in enumerate(plan):
            student.exercise = exercise.id
            self.said = set()
            # pytest tears down what the next item does not need, so each item is told the item
            # that really runs next: within an exercise, what its gate leaves to run; after it,
            # the next exercise's first item (its gate), which always runs.
            after = next((later[0] for _, later in plan[position + 1:] if later), None)
            basic = [item for item in items if self._key(item)[1] in exercise.basic]
            pending = list(items)
            while pending:
                item = pending.pop(0)
                is_gate = self._key(item)[1] == exercise.gate
                if is_gate:
                    following = basic[0] if basic else after  # the only items sure to follow it
                else:
                    following = pending[0] if pending else after
                item.ihook.pytest_runtest_protocol(item=item, nextitem=following)
                if is_gate and self.outcomes[exercise.id, exercise.gate].refused:
                    pending = list(basic)  # an answer that fails the gate earns its basic tests only
        self._student = self._reference = None
        return self.outcomes

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        """Record the outcome, and hand pytest a plain report: nobody reads pytest's own failure
        report (a formatted traceback with source), which would cost more than most tests."""
        key = self._key(item)
        error = call.excinfo.value if call.excinfo is not None else None
        if call.when == "call" or (error is not None and call.when == "setup"):
            if error is None:
                outcome = Outcome(True)
            else:
                internal = not isinstance(error, (Feedback, StudentFailure))
                if internal:
                    self.internal_errors.append(
                        f"{item.nodeid}\n" + "".join(traceback.format_exception(error)))
                picture = getattr(error, "picture", None)
                stub = isinstance(error, StudentError) and error.kind == "NotImplementedError"
                outcome = Outcome(False, student_message(error, self.said), missing_name(error),
                                  picture.to_dict() if picture is not None else None, internal,
                                  isinstance(error, StudentFailure) and not stub)
            previous = self.outcomes.get(key)
            # A parametrised test passes only when all of its cases pass.
            if previous is None or (previous.passed and not outcome.passed):
                self.outcomes[key] = outcome
        return pytest.TestReport(item.nodeid, item.location, {}, "passed" if error is None else "failed",
                                 None if error is None else "see the grader's outcome", call.when,
                                 duration=call.duration, start=call.start, stop=call.stop)


def with_suites(exercises, body):
    """Collect the suites of `exercises` once and call body(session); returns what body returns."""
    suites = sorted({str(exercise.suite) for exercise in exercises})
    folder = exercises[0].suite.parent
    session = SuiteSession(exercises, body)
    # Only the plugins the suites use: each test runs once per submission, so per-test overhead
    # (output capture, fault handlers, warning and log capture) adds up over a class.
    unused = ["cacheprovider", "terminal", "warnings", "logging", "stepwise", "capture", "faulthandler",
              "threadexception", "unraisableexception", "doctest", "junitxml", "pastebin", "setuponly",
              "setupplan", "unittest", "debugging", "legacypath", "tmpdir", "subtests"]
    options = [option for plugin in unused for option in ("-p", f"no:{plugin}")]
    # The suites never use a bare assert (checks.py words every verdict), so pytest's rewriting of
    # their modules (0.6 s a process where no bytecode cache may be written) buys nothing.
    options.append("--assert=plain")
    code = pytest.main(suites + options + ["--rootdir", str(folder), "-c", str(folder / "pytest.ini")],
                       plugins=[session])
    if session.error is not None:
        raise session.error
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        # A broken suite is the instructor's problem and must not look like a student's zero.
        raise RuntimeError(f"the hidden suites could not be collected (pytest exit code {int(code)})")
    return session.result
