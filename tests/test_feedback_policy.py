"""What feedback says: under course.yml's feedback policy, before the due date (the default, `after_due`),
no feedback of a variant exercise holds a right value a student could copy into the answer; a hint is
said once per exercise.

The catalogue's wrong answers of every variant exercise are worked out on the trusted side (their code
run in the solution notebook's namespace with a drawn variant, as a student's notebook runs it), and each
hidden test of the exercise is run on them with the policy of a time before the assignment's due date.
Every right value worked out from the student's numbers, as the feedback would print it, must be absent
from the feedback, unless the student's own answer or numbers hold it (then it is theirs, not handed over).
"""

import ast
import functools
import importlib
import math
import random
import re
from dataclasses import replace
from datetime import timedelta

import pytest

from autograder.course import CheckPolicy
from autograder.harness.checks import Feedback
from autograder.lateness import LatePolicy
from autograder.reference import reference_namespace
from autograder.variants import DEFAULTS
from tests.catalogue import MISTAKES
from tests.notebooks import COURSE, solution_answers

VARIANT_EXERCISES = [(assignment, exercise) for assignment in COURSE.assignments for exercise in assignment.exercises
                     if exercise.variant]


class Answered:
    """The student as a variant suite sees them (harness/context.py's Student): the value of the answer's
    name, their numbers, the released notebook's, and the policy's verdict."""

    def __init__(self, namespace, variant, released, values_shown):
        self.namespace, self.variant, self.values_shown = namespace, variant, values_shown
        self.others, self.flags, self.exercise = {DEFAULTS: released}, [], None

    def value(self, name):
        return {"output": self.namespace[name]}

    def call(self, name, *args, fresh=False, **kwargs):   # fresh: a witness's call (checks.students_functions)
        return {"output": self.namespace[name](*args, **kwargs)}


def solution(assignment):
    return _solution(assignment.id)


@functools.cache
def _solution(assignment_id):
    assignment = COURSE.assignment(assignment_id)
    notebook, = [notebook for notebook in assignment.notebooks if any(e.variant for e in notebook.exercises)]
    return reference_namespace(COURSE.source_notebook(assignment, notebook))


def printed(value):
    """The ways a feedback line prints a number of an answer: whole numbers as they are (and with thousands
    separators), others to 2, 3 and 4 decimals."""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return {str(int(value)), f"{int(value):,}"}
    return {f"{value:.2f}", f"{value:.3f}", f"{value:.4f}"}


def flat(value):
    """Every number in a value (dicts, lists, arrays, tensors), as Python numbers."""
    if isinstance(value, dict):
        return [x for item in value.values() for x in flat(item)]
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [x for item in value for x in flat(item)]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def feedback_of(suite, exercise, student):
    said = []
    for test in exercise.tests:
        try:
            getattr(suite, test)(student)
        except Feedback as feedback:
            said.append(str(feedback))
    return "\n".join(said)


@pytest.mark.parametrize("assignment,exercise", VARIANT_EXERCISES, ids=[e.id for _, e in VARIANT_EXERCISES])
def test_no_feedback_before_the_due_date_holds_a_right_value(assignment, exercise):
    before_due = assignment.due - timedelta(days=1)
    assert assignment.feedback_values == "after_due" and not assignment.feedback_values_shown(before_due)
    suite = importlib.import_module(f"autograder.suites.{exercise.suite.stem}")
    base = solution(assignment)
    mistakes = [mistake for mistake in MISTAKES if mistake.exercise == exercise.id]
    assert mistakes, f"{exercise.id} has no catalogued mistakes to scan"
    scanned = 0
    for seed in range(4):
        variant = base["make_variant"](random.Random(seed))
        for mistake in mistakes:
            namespace = {**base, "VARIANT": variant}
            if "CACHE_DTYPE" in base:   # the locked cell's dtype follows the variant, as in the student's notebook
                namespace["CACHE_DTYPE"] = getattr(base["torch"], variant["dtype"])
            exec(mistake.code, namespace)
            student = Answered(namespace, variant, base["DEFAULT_VARIANT"], assignment.feedback_values_shown(before_due))
            text = feedback_of(suite, exercise, student)
            theirs = {form for x in flat(namespace[exercise.id]) + flat(variant) for form in printed(x)}
            right = {form for x in right_values_of(exercise, assignment, namespace) for form in printed(x)}
            handed = sorted(form for form in right - theirs if re.search(rf"(?<![\d.]){re.escape(form)}(?!\d|\.\d)", text))
            assert not handed, f"{exercise.id}, {mistake.name!r} (seed {seed}): the feedback holds {handed}:\n{text}"
            scanned += bool(text)
    assert scanned, "no wrong answer got any feedback"


def right_values_of(exercise, assignment, namespace):
    """The reference answer's numbers for the same variant (the solution's cell run in `namespace`)."""
    right = dict(namespace)
    exec(solution_answers(assignment.id)[exercise.id], right)
    values = flat(right[exercise.id])
    return [x for x in values if not (isinstance(x, float) and math.isnan(x))]


def test_the_same_answers_show_their_values_once_the_policy_allows():
    """The scan above can fail: with values shown, the feedback of a wrong by_hand holds the right scores."""
    assignment, exercise = next((a, e) for a, e in VARIANT_EXERCISES if e.id == "by_hand")
    suite = importlib.import_module(f"autograder.suites.{exercise.suite.stem}")
    base = solution(assignment)
    variant = base["make_variant"](random.Random(0))
    mistake = next(m for m in MISTAKES if m.exercise == "by_hand" and m.cause == "unscaled")
    namespace = {**base, "VARIANT": variant}
    exec(mistake.code, namespace)
    assignment = replace(assignment, late_policy=LatePolicy(percent_per_day=100, max_percent=100))
    after_due = assignment.due + timedelta(days=1)
    assert assignment.feedback_values_shown(after_due)
    text = feedback_of(suite, exercise, Answered(namespace, variant, base["DEFAULT_VARIANT"], True))
    scores = right_values_of(exercise, assignment, namespace)[:3]
    assert all(f"{x:.3f}" in text for x in scores), text


def test_a_hint_is_said_once_per_exercise():
    """One cause, one mention: the second test of an exercise that fails with the same hint says what it saw
    and points above (plugin.SuiteSession.run starts each exercise with nothing said)."""
    from autograder.harness.plugin import student_message
    said = set()
    first = Feedback("The weights: rows sum to 0.09 to 0.27.", "Likely cause: your softmax's axis.")
    second = Feedback("The output: 80% of the entries differ.", "Likely cause: your softmax's axis.")
    other = Feedback("The output for large scores is NaN.", "Subtract the maximum.")
    assert student_message(first, said) == str(first)
    assert student_message(second, said) == "The output: 80% of the entries differ. (The hint given above applies here too.)"
    assert student_message(other, said) == str(other)
    assert student_message(second) == str(second)   # outside an exercise's run: the whole text


def test_values_wait_until_no_hand_in_and_no_check_can_use_them():
    """`after_due` means after the answers are final: the due date, the checks' late window and the late
    policy's window all past.  A student who has not handed in cannot copy a right value from a check's
    feedback (or a classmate's) and hand it in late for marks."""
    due = COURSE.assignment("attention_basics").due
    base = replace(COURSE.assignment("attention_basics"), feedback_values="after_due",
                   checks=CheckPolicy(open=True, late_hours=48), late_policy=LatePolicy(percent_per_day=25, max_percent=100))
    # checks open two days after the due date; a hand-in earns something for three started days (75% off)
    assert base.answers_final == due + timedelta(days=3)
    assert not base.feedback_values_shown(due + timedelta(hours=2))          # checks open, hand-ins worth 90%
    assert not base.feedback_values_shown(due + timedelta(days=3))           # the last moment a hand-in earns 25%
    assert base.feedback_values_shown(due + timedelta(days=3, seconds=1))
    graced = replace(base, late_policy=LatePolicy(percent_per_day=50, grace_minutes=15, max_percent=100))
    assert graced.answers_final == due + timedelta(hours=48)                 # the checks close after the late window
    assert replace(graced, checks=CheckPolicy(open=False, late_hours=48)).answers_final == due + timedelta(days=1, minutes=15)
    # a late hand-in that always earns something (no penalty, or a capped one): the answers are never final
    for endless in (LatePolicy(), LatePolicy(percent_per_day=10, max_percent=50)):
        never = replace(base, late_policy=endless)
        assert never.answers_final is None and not never.feedback_values_shown(due + timedelta(days=3650))
    assert replace(base, due=None).answers_final is None


# -- a student's own exception: feedback names its type and the released cell, never its text ---------

LEAKING = '''
import torch

def attention(q, k, v):
    raise ValueError(f"{q.tolist()} {k} {float(v.sum()):.9f}")

def own_class(q, k, v):
    raise type("Leak" + str(int(abs(float(q.sum())) * 10**6)), (Exception,), {})(repr(q))

def torch_error(q, k, v):
    return q @ k[..., :3].T
'''
HIDDEN_PROBE = '''
import torch

from autograder.suites.helpers.common import crash_hint, qkv


def test_plain(student):
    student.call("attention", *qkv((), seed=123))


def test_own_class(student):
    student.call("own_class", *qkv((), seed=123))


def test_through_a_crash_hint(student):
    with crash_hint("Use k.transpose(-2, -1)."):
        student.call("torch_error", *qkv((), seed=123))
'''


def hidden_values(tensors):
    """Every way an element or a sum of the hidden inputs may be printed (4 significant digits and more)."""
    values = [float(x) for tensor in tensors for x in tensor.flatten()] + [float(t.sum()) for t in tensors]
    return {text for value in values for text in (f"{value:.4f}", f"{abs(value):.4f}"[1:], str(int(abs(value) * 10**6)))
            if len(text.strip("0.-")) >= 3}


def test_feedback_on_an_exception_holds_none_of_the_hidden_inputs_in_its_message(tmp_path):
    """A function that raises with its hidden inputs in the message, or in the name of a class it makes, gets
    feedback with the exception's type and the released cell it raised in, and none of their values."""
    from autograder.course import Exercise, Limits
    from autograder.harness.context import Student
    from autograder.harness.plugin import with_suites
    from autograder.sandbox.student import Cell, StudentProcess, Worker
    from autograder.suites.helpers.common import qkv

    suite = tmp_path / "test_probe.py"
    suite.write_text(HIDDEN_PROBE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    exercise = Exercise("probe", "probe", suite, {"test_plain": 1, "test_own_class": 1, "test_through_a_crash_hint": 1})
    limits = Limits(call_timeout=5, cell_timeout=5, time_budget=60, memory_mb=2048)
    with Worker(limits) as worker:
        worker.start()
        with StudentProcess(worker, [Cell("probe", LEAKING)], limits) as process:
            outcomes = with_suites([exercise], lambda session: session.run([exercise], Student(process, released=STUB), {}))
    messages = {test: outcome.message for (_, test), outcome in outcomes.items()}
    leaked = hidden_values(qkv((), seed=123))
    for test, message in messages.items():
        assert not [value for value in leaked if value in message], (test, message)
        assert not re.search(r"Leak\d|tensor\(", message), message
    assert messages["test_plain"] == "Your code raised ValueError.\n  cell probe"   # its own line: not the stub's
    assert "an exception of its own class" in messages["test_own_class"]
    assert "RuntimeError (a mismatch of shapes" in messages["test_through_a_crash_hint"]
    assert "Likely cause: Use k.transpose(-2, -1)." in messages["test_through_a_crash_hint"]


# What the released notebook had of the probe's cell: the lines and names feedback may show.
STUB = (("probe", "import torch\n\ndef attention(q, k, v):\n    raise NotImplementedError()\n\n"
                  "def uses_softmax(q, k, v):\n    return softmax(q)\n"),)
# The two channels a hostile review found: the hidden input's first number chosen as the name of a NameError
# (a comment mentions n_0 ... n_9999), or as which of 1,000 lines, or of 100 added cells, raises.
CHOSEN_NAME = "import torch\n# " + " ".join(f"n_{i}" for i in range(10000)) + """

def attention(q, k, v):
    raise NameError(f"name 'n_{int(round(abs(float(q.flatten()[0])) * 1000)) % 10000}' is not defined")

def uses_softmax(q, k, v):
    return softmax(q)
"""
CHOSEN_LINE = "_C = []\n" + "\n".join(f"def _r{i}(): raise ValueError  # {i}" for i in range(1000)) + f"""
_R = [{", ".join(f"_r{i}" for i in range(1000))}]

def attention(q, k, v):
    _R[int(round(abs(float(q.flatten()[0])) * 100)) % 1000]()

def uses_softmax(q, k, v):
    _C[int(round(abs(float(q.flatten()[0])) * 100)) % 100]()
"""
CHANNEL_PROBE = '''
from autograder.suites.helpers.common import qkv


def test_name(student):
    student.call("attention", *qkv((), seed=123))


def test_vocabulary(student):
    student.call("uses_softmax", *qkv((), seed=123))
'''


def channel_messages(tmp_path, worker, cells):
    """test -> (its message, its missing name) for the probe's cells, graded in the sandbox."""
    from autograder.course import Exercise
    from autograder.harness.context import Student
    from autograder.harness.plugin import with_suites
    from autograder.sandbox.student import StudentProcess
    suite = tmp_path / f"test_channel_{len(list(tmp_path.glob('test_channel_*')))}.py"   # pytest imports each once
    suite.write_text(CHANNEL_PROBE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    exercise = Exercise("probe", "probe", suite, {"test_name": 1, "test_vocabulary": 1})
    with StudentProcess(worker, cells, worker.limits) as process:
        outcomes = with_suites([exercise], lambda session: session.run([exercise], Student(process, released=STUB), {}))
    return {test: (outcome.message, outcome.missing) for (_, test), outcome in outcomes.items()}


def test_feedback_on_an_exception_shows_no_place_or_name_the_student_chose_from_a_hidden_input(tmp_path):
    """A NameError's name is shown only where it is a name of the course's own (the released notebook's code,
    Python's builtins), and the places an error passed through only as the released cells, with a line only
    where the released cell had it: the name n_<x0 * 1000>, the line _r<x0 * 100> of a thousand, and the added
    cell of a hundred that raised never reach the feedback, while a name of the course's (softmax) still does."""
    from autograder.course import Limits
    from autograder.sandbox.student import Cell, Worker
    from autograder.suites.helpers.common import qkv
    first = abs(float(qkv((), seed=123)[0].flatten()[0]))
    added = [Cell(f"{index + 2}", f"def _c{index}(): raise ValueError\n_C.append(_c{index})\n") for index in range(100)]
    with Worker(Limits(call_timeout=5, cell_timeout=5, time_budget=60, memory_mb=2048)) as worker:
        worker.start()
        by_name = channel_messages(tmp_path, worker, [Cell("probe", CHOSEN_NAME)])
        by_line = channel_messages(tmp_path, worker, [Cell("probe", CHOSEN_LINE), *added])
    assert by_name["test_name"] == ("Your code raised NameError.\n  cell probe", "")
    assert str(int(round(first * 1000)) % 10000) not in by_name["test_name"][0]
    # a name of the course's vocabulary (the released code calls softmax) is named, and noted as missing
    assert by_name["test_vocabulary"] == ("Your code raised NameError: name 'softmax' is not defined.\n"
                                          "  cell probe: return softmax(q)", "softmax")
    assert by_line["test_name"][0] == "Your code raised ValueError.\n  cell probe"
    assert by_line["test_vocabulary"][0] == "Your code raised ValueError.\n  cell probe\n  a cell of your own"
    chosen = int(round(first * 100))
    for message, _ in by_line.values():
        assert f"_r{chosen % 1000}" not in message and "line" not in message


# -- an exercise built on an earlier one: a slip there is charged once --------------------------------------

def _strings(path):
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def earlier_ones_used(assignment, notebook):
    """exercise id -> {earlier exercise id: its names}: the functions and classes of earlier exercises of the
    notebook that an exercise's answer in the solution notebook uses, or its suite hands to the student's code
    by name, directly or through a given (read-only) cell that uses them (PatternModel holds a
    CausalSelfAttention)."""
    from autograder.submission import cell_kind, read_notebook
    exercises = {exercise.id: exercise for exercise in notebook.exercises}
    owner, carried, found = {}, {}, {}
    for cell in read_notebook(COURSE.source_notebook(assignment, notebook)).cells:
        if cell.get("cell_type") != "code":
            continue
        tree = ast.parse(cell.source)
        kind, grade_id = cell_kind(cell), cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        if kind == "answer" and grade_id in exercises:
            used |= _strings(exercises[grade_id].suite)
        reached = {}
        for name in used:
            if owner.get(name, grade_id) != grade_id:
                reached.setdefault(owner[name], set()).add(name)
            for exercise, names in carried.get(name, {}).items():
                if exercise != grade_id:
                    reached.setdefault(exercise, set()).update(names)
        defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
        if kind == "answer" and grade_id in exercises:
            found[grade_id] = reached
            owner.update(dict.fromkeys(defined, grade_id))
        elif kind == "locked":
            carried.update({name: reached for name in defined if reached})
    return found


BUILT_ON_USES = [(assignment, notebook, exercise, earlier) for assignment in COURSE.assignments
                 for notebook in assignment.notebooks
                 for exercise, earlier in earlier_ones_used(assignment, notebook).items() if earlier]


def test_the_exercises_built_on_earlier_ones_are_found():
    """The reading finds the course's known cases (so the test below cannot pass by finding nothing)."""
    found = {exercise: {earlier: set(names) for earlier, names in uses.items()} for _, _, exercise, uses in BUILT_ON_USES}
    assert found["numpy_attention"] == {"softmax": {"softmax"}}
    assert found["mha"] == {"heads": {"split_heads", "merge_heads"}}
    assert found["train_model"] == {"causal_self_attention": {"CausalSelfAttention"}}
    assert len(found) >= 8


@pytest.mark.parametrize("assignment,notebook,exercise,earlier", BUILT_ON_USES, ids=[u[2] for u in BUILT_ON_USES])
def test_an_exercise_built_on_an_earlier_one_declares_it(assignment, notebook, exercise, earlier):
    """Each exercise whose answers use an earlier exercise's functions or classes declares them in its suite's
    BUILT_ON (checks.built_on): a slip there then costs the earlier exercise's points alone."""
    suite = next(e.suite for e in notebook.exercises if e.id == exercise)
    declared = getattr(importlib.import_module(f"autograder.suites.{suite.stem}"), "BUILT_ON", {})
    missing = {ex: sorted(set(names) - set(declared.get(ex, ()))) for ex, names in earlier.items()}
    assert not any(missing.values()), (f"{suite.name} uses {missing} of earlier exercises without declaring them in "
                                       "BUILT_ON (and grading them with checks.built_on)")


def test_the_graders_own_failures_inside_the_students_process_are_said_in_the_graders_words():
    """A kind the grader's code raises in the student's process is said by a fixed sentence, whatever message
    comes with it (the student's code can raise one of that name too); what a refused name reaches is said only
    when it is one of the rule's own reasons."""
    from autograder.harness.plugin import said_of
    from autograder.sandbox.student import StudentError
    leak = "0.8123 -1.2207 2.5501"
    counted = said_of(StudentError("NotCountable", f"a tensor in {leak} was used", ""))
    assert "NumPy" in counted and "Python list" in counted and leak not in counted
    refused = said_of(StudentError("ReachRefused", "getattr(..., '_C') is refused: it reaches torch internals (torch._C)", ""))
    assert refused.endswith("was refused: it reaches torch internals (torch._C).")
    chosen = said_of(StudentError("ReachRefused", f"getattr(..., '_{leak}') is refused: it reaches {leak}", ""))
    assert leak not in chosen and "refused" in chosen


def test_a_time_out_is_said_without_the_seconds_the_call_had_left():
    """A call's time limit is what the submission's budget has left, which its earlier calls spend at a pace a
    hidden input may set: the feedback says a time-out in fixed words, never those seconds."""
    from autograder.harness.plugin import student_message
    from autograder.sandbox.student import StudentTimeout
    hung = student_message(StudentTimeout("softmax did not finish within 7.23419 s (an infinite loop?)"))
    spent = student_message(StudentTimeout("the submission used up its time budget of 600 s"))
    assert hung == "Your code did not finish in the time a call may take (an infinite loop?)."
    assert spent == "Your code did not finish: the submission used up its time budget."
