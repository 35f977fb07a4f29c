"""The pytest plugin that runs the hidden suites against one submission, in the trusted process.

Tests ask for two fixtures: `student` (calls into the submission's own process) and `reference`
(the solution notebook's definitions).  The plugin records one outcome per test function, with
the message the student will see.
"""

import traceback

import pytest

from autograder.harness.checks import Feedback
from autograder.student import StudentError, StudentFailure, StudentTimeout


class Outcome:
    def __init__(self, passed, message=""):
        self.passed, self.message = passed, message


def student_message(error):
    """What the student sees for an exception raised while a hidden test ran."""
    if isinstance(error, Feedback):
        return str(error)
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


class SuitePlugin:
    def __init__(self, student, reference, exercises_by_suite):
        self._student = student
        self._reference = reference
        self.exercises_by_suite = exercises_by_suite
        self.outcomes = {}        # (exercise id, test name) -> Outcome
        self.internal_errors = []  # tracebacks for the instructor's log, never for students

    @pytest.fixture(scope="session")
    def student(self):
        return self._student

    @pytest.fixture(scope="session")
    def reference(self):
        return self._reference

    def _key(self, item):
        exercise = self.exercises_by_suite[item.path.resolve()]
        return exercise.id, getattr(item, "originalname", item.name)

    def pytest_collection_modifyitems(self, items):
        # Only tests that course.yml gives points to run; the consistency test in tests/
        # makes sure nothing is left out by mistake.
        items[:] = [item for item in items if self._key(item)[1] in
                    self.exercises_by_suite[item.path.resolve()].points]

    def pytest_runtest_setup(self, item):
        self._student.current = self._key(item)[0]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        result = yield
        report = result.get_result()
        key = self._key(item)
        if report.when == "call" or (report.failed and report.when == "setup"):
            previous = self.outcomes.get(key)
            if call.excinfo is None:
                outcome = Outcome(True)
            else:
                error = call.excinfo.value
                if not isinstance(error, (Feedback, StudentFailure)):
                    self.internal_errors.append(
                        f"{item.nodeid}\n" + "".join(traceback.format_exception(error)))
                outcome = Outcome(False, student_message(error))
            # A parametrised test passes only when all of its cases pass.
            if previous is None or (previous.passed and not outcome.passed):
                self.outcomes[key] = outcome


def run_suites(suites, plugin):
    args = [str(path) for path in suites] + [
        "-p", "no:cacheprovider", "-p", "no:terminal", "-p", "no:warnings",
        "-p", "no:logging", "--rootdir", str(suites[0].parent), "-c", str(suites[0].parent / "pytest.ini")]
    code = pytest.main(args, plugins=[plugin])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        # A broken suite is the instructor's problem and must not look like a student's zero.
        raise RuntimeError(f"the hidden suites could not run (pytest exit code {int(code)})")
    return code
