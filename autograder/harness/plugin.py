"""The pytest session that runs the hidden suites, in the trusted process.

The suites are collected once per grading process; then the session's run loop (pytest's
documented `pytest_runtestloop` hook, the way pytest-xdist's workers pull tests from a queue)
hands control to the grader, which runs the tests of one submission's exercises as often as it
has submissions.  Tests ask for two fixtures: `student` (the submission, see context.py) and
`reference` (the solution notebook's definitions).  One outcome is recorded per test function,
with the message the student will see.
"""

import builtins
import contextvars
import functools
import re
import traceback
from dataclasses import dataclass

import pytest

from autograder.harness.checks import REFERENCE, Feedback
from autograder.sandbox.inside.reach import INTERNAL_ATTRIBUTES
from autograder.sandbox.student import StudentError, StudentFailure, StudentTimeout, WorkerError


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
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


@functools.lru_cache(maxsize=16)
def course_text(released):
    """What of the released notebook (context.released_cells) feedback on a student's exception may name:
    (the course's vocabulary: every name its code writes, its imports among them, and Python's builtins;
    label -> the lines of the released cell of that nbgrader label, stripped)."""
    vocabulary = frozenset(IDENTIFIER.findall("\n".join(source for _, source in released))) | frozenset(vars(builtins))
    lines = {}
    for label, source in released:
        if label:
            lines.setdefault(label, set()).update(line.strip() for line in source.splitlines() if line.strip())
    return vocabulary, lines


def missing_name(error):
    """The undefined name behind a student's NameError ('' for any other failure), only where it is a name of
    the course's own vocabulary (course_text, RELEASED): the message is text of the student's process, which
    may choose the name from a hidden input (n_0 ... n_9999 mentioned in a comment, n_4623 raised)."""
    if isinstance(error, StudentError) and error.kind == "NameError":
        found = NOT_DEFINED.match(error.message)
        if found and found.group(1) in course_text(RELEASED.get())[0]:
            return found.group(1)
    return ""


# What feedback says of an exception raised in the student's process.  Everything that process reports
# (the exception's message, its type's name, the text of its traceback) is written by code the student
# controls, and a test calls it with hidden inputs: a message such as f"{q}" would hand them over.  So
# the feedback quotes none of it: it names the exception's type when that is one of Python's built-in
# exceptions or a library's below (else "an exception of its own class"), says in a fixed phrase what
# kind of failure a library's message reports (FAILURES), names a NameError's name only where it is one
# of the course's own (missing_name), and shows the released cells the error passed through, with a line
# only where the released cell already had it (code_lines).  What is left to the student's choice is which
# of a small set fixed by the course a failure shows, as passing or failing a test tells: a few bits a
# check, never a value.
CODE = contextvars.ContextVar("submission_code", default={})   # cell file name -> source, while a run lasts
RELEASED = contextvars.ContextVar("released_code", default=())   # context.released_cells, while a run lasts
KNOWN_KINDS = frozenset(name for name, value in vars(builtins).items()
                        if isinstance(value, type) and issubclass(value, BaseException)) | {
    "LinAlgError", "AxisError", "CompilationError", "CompileTimeAssertionFailure", "OutOfResources"}
# Failures the grader's own code in the student's process reports, by kind: said in the grader's words.
GRADER_KINDS = {
    "BuiltinAttentionForbidden": "torch's built-in attention may not be used in this exercise",
    "OutOfBounds": "a load or store of the kernel reaches elements outside every tensor passed to it (a lane "
                   "past the end of a tensor that no mask covers)",
    "Uncounted": "the kernel uses an operation on memory of Triton's interpreter that the grader cannot count "
                 "(write it with tl.load and tl.store, tensor descriptors or atomics)",
    "Unsupported": "it returned a value that cannot be sent back (tensors, arrays, numbers, strings, and "
                   "lists, tuples and dicts of them can)",
    "NotCountable": "work was done outside torch during a call whose work is counted (a tensor's numbers turned "
                    "into a NumPy array, a Python list, a buffer or a file, or too many numbers moved between torch "
                    "and Python): keep the call's work in torch (or in the kernel)",
    "NotTriton": "the kernel is not Triton that a GPU compiles (Triton's GPU compiler refuses its body)",
    "ReachRefused": "a name computed at run time (getattr, hasattr, setattr, delattr or type(...)) was refused",
}
# What a refused name reaches (reach.py's reasons, a closed list): said after ReachRefused's sentence.
REACH_REASONS = frozenset(INTERNAL_ATTRIBUTES.values()) | {
    "an interpreter attribute outside the data model's ordinary ones", "a private name of code the submission did not write"}
REACHES = re.compile(r"is refused: it reaches (.*)$")
FAILURES = (   # (signs in a library's message, what kind of failure it reports)
    (("size of tensor", "shapes cannot be multiplied", "must match the size", "shape '[", "mat1 and mat2",
      "could not be broadcast", "not broadcastable", "expanded size", "matmul: Input operand",
      "dimension", "out of range", "out of bounds"), "a mismatch of shapes or an index out of range"),
    (("inplace operation", "in-place operation"), "an in-place operation on a tensor autograd still needs"),
    (("expected scalar type", "same dtype", "dtype mismatch"), "a mismatch of dtypes"),
    (("same device",), "tensors on different devices"),
)
FRAME = re.compile(r'^\s*File "(<cell [^"]*>)", line (\d+)', re.MULTILINE)


def cell_files(cells):
    """file name -> source of a submission's cells (submission.Cell), named as the sandbox compiles them
    (handlers.run_cells: "<cell label>", "<cell label #index>" for a label used again)."""
    files, labels = {}, set()
    for index, cell in enumerate(cells):
        files[f"<cell {cell.label} #{index}>" if cell.label in labels else f"<cell {cell.label}>"] = cell.source
        labels.add(cell.label)
    return files


def code_lines(error, most=3):
    """Where in the notebook the error passed through (the last `most` places): each as the released cell it
    ran in, by its nbgrader label, with the line of code only where that line is one the released cell already
    had (read from the grader's copy of the cells, CODE; no line number), else "a cell of your own".  Which of
    a thousand lines, or of a thousand cells added, raised is the student's process's choice, and a hidden
    input may make it: the places shown are a small set fixed by the course."""
    code, lines = CODE.get(), course_text(RELEASED.get())[1]
    shown = []
    for filename, number in FRAME.findall(error.traceback or ""):
        label = filename.strip("<>").removeprefix("cell ").split(" #")[0]
        if label not in lines:
            place = "  a cell of your own"
        else:
            written = code.get(filename, "").splitlines()
            text = written[int(number) - 1].strip() if 0 < int(number) <= len(written) else ""
            place = f"  cell {label}: {text[:160]}" if text in lines[label] else f"  cell {label}"
        if not shown or shown[-1] != place:
            shown.append(place)
    return shown[-most:]


def said_of(error):
    """What the feedback says of an exception of the student's (a StudentError), holding nothing of its
    message or traceback text (see CODE)."""
    if error.kind in GRADER_KINDS:
        reaches = REACHES.search(error.message) if error.kind == "ReachRefused" else None
        why = f": it reaches {reaches.group(1)}" if reaches and reaches.group(1) in REACH_REASONS else ""
        head = f"Your code failed: {GRADER_KINDS[error.kind]}{why}"
    else:
        known = error.kind in KNOWN_KINDS
        kind = error.kind if known else "an exception of its own class"
        what = next((phrase for signs, phrase in FAILURES if any(sign in error.message for sign in signs)), "") \
            if known else ""
        name = missing_name(error)
        head = (f"Your code raised {kind}" + (f": name '{name}' is not defined" if name else "")
                + (f" ({what})" if what and not name else ""))
    lines = code_lines(error)
    return head + (".\n" + "\n".join(lines) if lines else ".")


def student_message(error, said=None):
    """What the student sees for an exception raised while a hidden test ran (`said`: the hints already
    shown in the exercise, see Feedback.text)."""
    if isinstance(error, Feedback):
        return error.text(said) if said is not None else str(error)
    if isinstance(error, StudentTimeout):   # in fixed words: the seconds a call had left follow the student's own pace
        if "time budget" in str(error):
            return "Your code did not finish: the submission used up its time budget."
        return "Your code did not finish in the time a call may take (an infinite loop?)."
    if isinstance(error, StudentError):
        if error.kind == "NotImplementedError":
            return "Your code raised NotImplementedError: the stub has not been replaced yet."
        return said_of(error)
    if isinstance(error, StudentFailure):
        return f"Your code could not be run: {error}."
    return "The grader could not run this check (an internal error); please tell your instructor."


# What a test says when an error inside the grader came of the submission's reply (see SuiteSession._settle).
UNREADABLE = ("This check could not read what your code returned: it is not of the form the exercise asks for "
              "(the course's own answer passes this check).")


@functools.lru_cache(maxsize=None)
def _resolved(path):
    """A suite's path resolved once: items are keyed by it some 90 times a check (a tenth of a millisecond each)."""
    return path.resolve()


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
        self.charged = []          # errors inside the grader that the course's answers do not cause (_settle)
        self.raised = {}           # node id -> (item, outcome, error): an error inside the grader, until settled
        self._answers_of = self._answers = None
        self.said = set()          # the hints shown in the current exercise's feedback: each is said once

    @pytest.fixture
    def student(self):
        return self._student

    @pytest.fixture
    def reference(self):
        return self._reference

    def _key(self, item):
        exercise = self.by_suite[_resolved(item.path)]
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
        once in the process that forks the grading processes (classrun.fanout.prime) instead of once in each."""
        modules = {id(item.module): item.module for items in self.items.values() for item in items}
        for module in modules.values():
            if callable(getattr(module, "prepare", None)):
                module.prepare()

    def run(self, exercises, student, reference, answers=None):
        """Run the tests of `exercises` against one submission; returns the outcomes.  answers: makes the
        Student of the course's own answers (see _settle), or None (an error inside the grader is then
        the grader's)."""
        self._student, self._reference = student, reference
        self.outcomes, self.internal_errors, self.charged, self.raised = {}, [], [], {}
        self._answers_of, self._answers = answers, None
        code = CODE.set(cell_files(getattr(getattr(student, "process", None), "cells", ())))
        released = RELEASED.set(tuple(getattr(student, "released", ())))
        known = REFERENCE.set(reference if isinstance(reference, dict) else {})
        try:
            self._run(exercises, student)
            self._settle(student)
        finally:
            REFERENCE.reset(known)
            RELEASED.reset(released)
            CODE.reset(code)
            self._student = self._reference = None
            if self._answers is not None and callable(getattr(self._answers.process, "close", None)):
                self._answers.process.close()
            self._answers = self._answers_of = None
        return self.outcomes

    def _run(self, exercises, student):
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

    def _settle(self, student):
        """Whose fault each error raised inside the grader while a test ran is.  Not the exception's type
        decides (any type can come of a reply the grader's code cannot read), nor anything the student's
        process says: once the submission's tests have run, its process is ended (nothing of it stays alive,
        nor in the scratch space, beside what comes next), the tests that raised run again on the course's
        own answers (the solution notebook in a process of its own, `answers`), and an error is the grader's
        only where it comes again there.  Where the course's answers pass through the check, what raised was
        the submission's reply: the test fails, and the instructor is told (`charged`); a gate that fails so
        caps the exercise as any failed gate does (scoring.py).  A grader that lost its sandbox (WorkerError)
        is the grader's without a second run."""
        raised, self.raised = self.raised, {}
        if not raised:
            return
        if callable(getattr(getattr(student, "process", None), "close", None)):
            student.process.close()
        for item, outcome, error in raised.values():
            text = f"{item.nodeid}\n" + "".join(traceback.format_exception(error))
            answers = None if isinstance(error, WorkerError) else self._course_answers()
            if answers is None or self._again(item, answers).internal:
                self.internal_errors.append(text)
                continue
            self.charged.append(text)
            key = self._key(item)
            if self.outcomes.get(key) is outcome:
                self.outcomes[key] = Outcome(False, UNREADABLE)

    def _course_answers(self):
        """The Student of the course's own answers (started once a submission, when first needed), or None."""
        if self._answers is None and self._answers_of is not None:
            try:
                self._answers = self._answers_of()
            except Exception:   # noqa: BLE001 - without them the error stays the grader's, as it was
                self._answers_of = None
        return self._answers

    def _again(self, item, answers):
        """The outcome of `item` run on the course's answers (nothing of it is recorded for the submission)."""
        outcomes, said = self.outcomes, self.said
        self._student, self.outcomes, self.said = answers, {}, set()
        answers.exercise = self._key(item)[0]
        try:
            item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
            return self.outcomes.get(self._key(item), Outcome(False, internal=True))
        finally:
            self.outcomes, self.said, self.raised = outcomes, said, {}

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
                picture = getattr(error, "picture", None)
                stub = isinstance(error, StudentError) and error.kind == "NotImplementedError"
                outcome = Outcome(False, student_message(error, self.said), missing_name(error),
                                  picture.to_dict() if picture is not None else None, internal,
                                  isinstance(error, StudentFailure) and not stub)
                if internal:
                    self.raised[item.nodeid] = (item, outcome, error)
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
