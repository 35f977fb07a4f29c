"""The filter over the hidden value tests: a test that a trivial answer passes is weak.

Kernel benchmarks run such a filter before anything else (robust-kbench): a test whose expected output
barely varies with its inputs, or that a constant, zeros, a copy of an input or a cached earlier answer
could pass, measures nothing.  Here every exercise's trivial answers are generated from its reference
solution (the answer cell of the solution notebook, then a wrapper: HELPERS and KINDS below) and graded by
the course's own Grader, in one warm grading process for the whole course, each value test on its own:
the exercises' gates are lifted (a gate that stops a trivial answer hides whether the tests behind it
would), so each test's verdict is its own.  Every trivial answer must lose every value test's points.

The reference itself goes through the same wrapper ("reference", the control) and must keep full marks,
so that what the trivial answers lose is lost to what they return, not to the wrapping.

Exempt, each with its reason in one place (exempt()): the `basic` tests of course.yml (shapes, dtypes,
formats, the ValueError: counted before the gate because they are not about values), the `measured`
tests (memory, counted work: the catalogue's gaming answers hold those), and EXEMPT below.

A group's verdicts are kept in the grader's cache folder under the hash of everything they follow from
(the code grading runs, the course, the group's suites, the generated answers, the notebooks): a run grades again
only what changed, so an instructor's new test is filtered in the next run and an unchanged course costs nothing.

    .venv/bin/python -m tests.value_filter [exercise ...] [--json FILE] [--fresh]

tests/test_filter.py runs it over the whole course (make test); `make check EXERCISE=id` over one.
"""

import argparse
import contextlib
import functools
import hashlib
import inspect
import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tests.check import ASSIGNMENT_OF, exercise_groups, needs
from tests.notebooks import COURSE, make_submission, solution_answers

# Why a test checks no value of its own, once each: what its property is and why a trivial answer has it.
OWN = ("it compares the answer with the answer's own outputs (one mistake, one property: docs/grading.md), which "
       "a trivial answer matches as well; the exercise's value tests hold the values")
SHAPE = "it checks the shapes of the answer, not its numbers"
DTYPE = "it checks the dtypes of the answer, not its numbers"
STRUCTURE = "it checks what the module holds (its parameters, buffers or their presence), not what it computes"
ERROR = "it checks that a wrong call raises ValueError, which the reference inside the wrapper does"
UNCHANGED = "it checks that the inputs are not written to, which any answer that returns new tensors does"
NORMALISED = ("it checks that the weights are a distribution (rows sum to one), which the softmax of any input is; "
              "the value tests hold which distribution")
ZERO_WHERE_BLOCKED = ("it checks that blocked entries are zero (weights, a fully masked row), which an answer of "
                      "zeros has; the value tests with a mask hold the rest")
CAUSAL = ("it checks causality (no output moves when a later token changes), which an answer that sees nothing has; "
          "the value tests hold what it sees")
FINITE = "it checks that large scores give finite numbers, which any trivial answer does"
ONE_CASE = ("it checks one case whose right answer is a constant or the input itself (the diagonal of a causal mask, "
            "a sequence without padding, position 0, a head against itself, no batch that is compute-bound): the "
            "value tests hold the others")
ROTATION = "it checks that lengths are kept, which every rotation has, the identity (the input passed through) included"
EXEMPT = {
    ("softmax", "test_leaves_input_unchanged"): UNCHANGED,
    ("softmax", "test_slices_sum_to_one"): NORMALISED,
    ("numpy_attention", "test_shapes_for_one_sequence"): SHAPE,
    ("numpy_attention", "test_shapes_with_batch_dimensions"): SHAPE,
    ("numpy_attention", "test_weights_rows_sum_to_one"): NORMALISED,
    ("sdpa", "test_weights_rows_sum_to_one"): NORMALISED,
    ("sdpa", "test_masked_weights_are_exactly_zero"): ZERO_WHERE_BLOCKED,
    ("sdpa", "test_fully_masked_row_gives_zeros"): ZERO_WHERE_BLOCKED,
    ("sdpa", "test_masking_equals_dropping_the_keys"): OWN,
    ("sdpa", "test_mask_broadcasts_over_batch_and_heads"): OWN,
    ("sdpa", "test_batching_equals_looping"): OWN,
    ("sdpa", "test_large_scores_stay_finite"): FINITE,
    ("causal_mask", "test_diagonal_is_allowed"): ONE_CASE,
    ("causal_mask", "test_accepts_device_argument"): OWN,
    ("causal_mask", "test_makes_attention_causal"): CAUSAL,
    ("padding_mask", "test_full_length_allows_every_key"): ONE_CASE,
    ("padding_mask", "test_blocks_keys_not_queries"): SHAPE,
    ("fix_causal_attention", "test_is_causal"): CAUSAL,
    ("fix_causal_attention", "test_sequences_shorter_than_the_context"): OWN,
    ("fix_causal_attention", "test_eval_mode_is_deterministic"): OWN,
    ("mha", "test_self_attention_shapes"): SHAPE,
    ("mha", "test_cross_attention_shapes"): SHAPE,
    ("mha", "test_weights_rows_sum_to_one"): NORMALISED,
    ("mha", "test_keeps_float32_and_float64"): DTYPE,
    ("heads", "test_split_heads_shape"): SHAPE,
    ("to_torch_mha", "test_without_bias"): STRUCTURE,
    ("to_torch_mha", "test_keeps_the_modules_dtype"): DTYPE,
    ("causal_self_attention", "test_is_causal"): CAUSAL,
    ("causal_self_attention", "test_eval_mode_is_deterministic"): OWN,
    ("causal_self_attention", "test_rejects_sequences_longer_than_the_context"): ERROR,
    ("causal_self_attention", "test_other_context_lengths"): NORMALISED + "; and where they are zero, " + CAUSAL,
    ("causal_self_attention", "test_mask_is_a_buffer"): STRUCTURE,
    ("head_similarity", "test_identical_heads_give_one"): ONE_CASE,
    ("kv_cache", "test_token_by_token_matches_full_attention"): OWN,
    ("kv_cache", "test_prompt_then_tokens"): OWN,
    ("kv_cache", "test_chunks_of_several_tokens"): OWN,
    ("kv_cache", "test_reset_starts_a_new_sequence"): OWN,
    ("gqa", "test_weights_rows_sum_to_one"): NORMALISED,
    ("gqa", "test_cache_holds_the_unrepeated_heads"): OWN,
    ("online_softmax", "test_leaves_its_inputs_unchanged"): UNCHANGED,
    ("rope", "test_leaves_x_unchanged"): UNCHANGED,
    ("rope", "test_position_zero_is_unchanged"): ONE_CASE,
    ("rope", "test_keeps_the_length_of_each_vector"): ROTATION,
    ("rope", "test_positions_are_used_as_given"): OWN,
    ("rope", "test_scores_depend_only_on_the_offset"): OWN,
    ("cache_bytes", "test_bytes_of_the_dtype"): OWN,
    ("cache_bytes", "test_every_layer"): OWN,
    ("mla", "test_token_by_token_equals_the_full_forward"): OWN,
    ("mla", "test_prompt_then_chunks"): OWN,
    ("mla", "test_cache_holds_the_latent_and_the_rope_key_only"): OWN,
    ("mla", "test_reset_starts_a_new_sequence"): OWN,
    ("absorbed", "test_new_tokens_see_the_whole_cache"): OWN,
    ("absorbed", "test_new_tokens_are_turned_at_their_positions"): OWN,
    ("decode_costs", "test_never_compute_bound"): ONE_CASE,
}

# Known debt (exercise, test) -> what lets a trivial answer through and what would stop it: still weak, said in
# every report, tolerated by tests/test_filter.py until the suite changes (then the entry must go).
KNOWN_WEAK = {
    ("by_hand", "test_weights"): "each step is checked against the student's previous one, so the weights of a "
                                 "consistent answer on other numbers (the released example's, a classmate's) pass; "
                                 "only test_scores looks at the student's own numbers",
}

# What each trivial answer is, by what the exercise's answer is (one rule per kind of answer):
#   function: a function the suites call (softmax, causal_mask, qkv_parameter_counts, train_model, to_torch_mha);
#   module:   an nn.Module class the suites build and call (MultiHeadAttention): what its forward returns;
#   value:    a value worked out in the cell on the student's own numbers (by_hand, pattern_floor).
# A module handed to a function is part of its answer (train_model trains it): the answers that return something
# trivial run the reference on a copy, so that the module is left as it was.
# The inputs of a function or a forward are its parameters with no default or a default of None (q, k, v,
# mask); those with another default are settings (causal=False, block_q=64).  A variant exercise's inputs
# are the entries of its numbers (VARIANT).
KINDS = {
    "zeros": {
        "function": "every number of what the reference returns set to 0 (tensors, arrays, numbers, a returned "
                    "module's parameters)",
        "module": "every number of what the reference's forward returns set to 0",
        "value": "every number of the reference's value set to 0",
    },
    "ones": {
        "function": "every number of what the reference returns set to 1 (True for booleans)",
        "module": "every number of what the reference's forward returns set to 1",
        "value": "every number of the reference's value set to 1",
    },
    "first_input": {
        "function": "an input passed through: each returned tensor or number is a copy of the first input of its "
                    "shape ({name}), every other one 0",
        "module": "an input of the forward passed through: each returned tensor is a copy of the first input of its "
                  "shape ({name}), every other one 0",
        "value": "the numbers passed through: each part of the value is a copy of the first entry of VARIANT of its "
                 "shape ({name}), every other number 0",
    },
    "last_input": {
        "function": "an input passed through: each returned tensor or number is a copy of the last input of its "
                    "shape ({name}), every other one 0",
        "module": "an input of the forward passed through: each returned tensor is a copy of the last input of its "
                  "shape ({name}), every other one 0",
        "value": "the numbers passed through: each part of the value is a copy of the last entry of VARIANT of its "
                 "shape ({name}), every other number 0",
    },
    "other_inputs": {
        "function": "the reference's answer to other inputs of the same kind (each tensor's elements shuffled, "
                    "a module argument's parameters shuffled; a call of numbers alone: each number doubled)",
        "module": "the reference's forward on other inputs of the same kind (each tensor's elements shuffled)",
        "value": "the reference worked out on another student's numbers (differing from the student's in every entry)",
    },
    "earlier_answer": {
        "function": "the answer of an earlier call with other inputs, kept and returned for every later call",
        "module": "the answer of an earlier forward with other inputs (of any instance), returned for every "
                  "later forward",
        "value": "the answer the released notebook's own example numbers give (DEFAULT_VARIANT)",
    },
}
CONTROL = "reference"   # the reference through the same wrapper: full marks

# The code a trivial answer adds after the reference's cell: run in the student's child, so it uses only what
# a student's code may (rules.py reads it like any answer).
HELPERS = '''
import copy as trivial_copy
import numpy as trivial_np
import torch as trivial_torch

TRIVIAL_RNG = trivial_torch.Generator().manual_seed(2026)
TRIVIAL_MEMO = {}


def trivial_fill(value, number):
    """value's structure with every number `number`."""
    if isinstance(value, trivial_torch.Tensor):
        return trivial_torch.full_like(value.detach(), number)
    if isinstance(value, trivial_np.ndarray):
        return trivial_np.full_like(value, number)
    if isinstance(value, bool):
        return bool(number)
    if isinstance(value, (int, float)):
        return type(value)(number)
    if isinstance(value, (list, tuple)):
        return type(value)([trivial_fill(item, number) for item in value])
    if isinstance(value, dict):
        return {key: trivial_fill(item, number) for key, item in value.items()}
    if isinstance(value, trivial_torch.nn.Module):
        module = trivial_copy.deepcopy(value)
        with trivial_torch.no_grad():
            for tensor in list(module.parameters()) + list(module.buffers()):
                tensor.fill_(number)
        return module
    return value


def trivial_shape(value):
    """The shape of a tensor, an array, a number (()) or a nested list of numbers; None for anything else."""
    if isinstance(value, (trivial_torch.Tensor, trivial_np.ndarray)):
        return tuple(value.shape)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ()
    if isinstance(value, (list, tuple)) and value:
        inner = {trivial_shape(item) for item in value}
        if len(inner) == 1 and None not in inner:
            return (len(value),) + inner.pop()
    return None


def trivial_pass(value, candidates):
    """value's structure with each part a copy of the first of the candidates of its shape, every other number 0."""
    shape = trivial_shape(value)
    given = next((item for item in candidates if shape is not None and trivial_shape(item) == shape), None)
    if given is not None:
        if isinstance(value, trivial_torch.Tensor):
            return trivial_torch.as_tensor(given).clone().to(value.dtype)
        if isinstance(value, trivial_np.ndarray):
            return trivial_np.array(given, dtype=value.dtype)
        if isinstance(value, (int, float)):
            return type(value)(given)
        return trivial_copy.deepcopy(given.tolist() if hasattr(given, "tolist") else given)
    if isinstance(value, (list, tuple)):
        return type(value)([trivial_pass(item, candidates) for item in value])
    if isinstance(value, dict):
        return {key: trivial_pass(item, candidates) for key, item in value.items()}
    return trivial_fill(value, 0)


def trivial_copies(value):
    """value with every module in it copied (a trivial answer leaves the modules it is handed as they were)."""
    if isinstance(value, trivial_torch.nn.Module):
        return trivial_copy.deepcopy(value)
    if isinstance(value, (list, tuple)):
        return type(value)([trivial_copies(item) for item in value])
    if isinstance(value, dict):
        return {key: trivial_copies(item) for key, item in value.items()}
    return value


def trivial_order(size):
    """A shuffled order of `size` elements that moves at least one (a random order may be the same one)."""
    order = trivial_torch.randperm(size, generator=TRIVIAL_RNG)
    if bool((order == trivial_torch.arange(size)).all()):
        order = trivial_torch.arange(size).roll(1)
    return order


def trivial_is_data(value):
    return isinstance(value, (trivial_torch.Tensor, trivial_np.ndarray, trivial_torch.nn.Module))


def trivial_other(value, numbers_too):
    """Another input of the same kind: a tensor's or array's elements shuffled, a module's parameters
    shuffled (a copy), a number doubled where the call's data are numbers alone."""
    if isinstance(value, trivial_torch.Tensor) and value.numel() > 1:
        return value.reshape(-1)[trivial_order(value.numel()).to(value.device)].reshape(value.shape)
    if isinstance(value, trivial_np.ndarray) and value.size > 1:
        return value.reshape(-1)[trivial_order(value.size).numpy()].reshape(value.shape)
    if isinstance(value, trivial_torch.nn.Module):
        module = trivial_copy.deepcopy(value)
        with trivial_torch.no_grad():
            for parameter in module.parameters():
                parameter.copy_(trivial_other(parameter.detach(), False))
        return module
    if numbers_too and isinstance(value, (int, float)) and not isinstance(value, bool):
        return value * 2
    if isinstance(value, (list, tuple)):
        return type(value)([trivial_other(item, numbers_too) for item in value])
    if isinstance(value, dict):
        return {key: trivial_other(item, numbers_too) for key, item in value.items()}
    return value


def trivial_answer(kind, function, args, kwargs, key, inputs):
    """What the trivial answer `kind` returns for a call of `function` (the reference); inputs: the names of
    the function's inputs, in order."""
    if kind == "reference":
        return function(*args, **kwargs)
    if kind in ("zeros", "ones", "first_input", "last_input"):
        value = function(*trivial_copies(list(args)), **trivial_copies(kwargs))
        if kind in ("zeros", "ones"):
            return trivial_fill(value, int(kind == "ones"))
        given = [kwargs[name] if name in kwargs else args[position] if position < len(args) else None
                 for position, name in enumerate(inputs)]
        return trivial_pass(value, given if kind == "first_input" else given[::-1])
    if kind == "other_inputs":
        numbers_too = not any(trivial_is_data(item) for item in list(args) + list(kwargs.values()))
        return function(*trivial_other(list(args), numbers_too), **trivial_other(kwargs, numbers_too))
    if kind == "earlier_answer":
        if key not in TRIVIAL_MEMO:
            TRIVIAL_MEMO[key] = trivial_answer("other_inputs", function, args, kwargs, key, inputs)
        return TRIVIAL_MEMO[key]
    raise ValueError(kind)
'''


def ungated(course, exercises):
    """The course with every chosen exercise's gate lifted (so no basic-only cap: each test's verdict is its
    own) and only its value tests kept (the exempt ones, the measured among them, cost time and say nothing)."""
    def lift(exercise):
        if exercise.id not in exercises:
            return exercise
        return replace(exercise, gate="", basic=(), measured=(),
                       points={test: points for test, points in exercise.points.items()
                               if test in value_tests(exercise.id)})
    return replace(course, assignments=[
        replace(a, notebooks=tuple(replace(n, exercises=tuple(map(lift, n.exercises))) for n in a.notebooks))
        for a in course.assignments])


def exercise_of(exercise_id):
    return COURSE.assignment(ASSIGNMENT_OF[exercise_id]).exercise(exercise_id)


def exempt(exercise_id):
    """test -> why the filter does not judge it (every other test with points is a value test)."""
    exercise = exercise_of(exercise_id)
    reasons = {test: "a basic test of course.yml (a shape, a dtype, a format or an error, counted before the gate)"
               for test in exercise.basic}
    reasons.update({test: "a measured test of course.yml (memory, counted work, what a cache serves): the catalogue's "
                          "gaming answers hold it" for test in exercise.measured})
    reasons.update({test: why for (exercise_id_, test), why in EXEMPT.items() if exercise_id_ == exercise_id})
    return reasons


def value_tests(exercise_id):
    """The tests the filter judges: those with points that are not exempt."""
    return [test for test in exercise_of(exercise_id).points if test not in exempt(exercise_id)]


def _reference_objects(exercise_id):
    """name -> object of what the exercise's reference answer cell defines at its top level."""
    import ast
    from autograder.reference import reference_namespace
    assignment, notebook = _notebook_of(exercise_id)
    namespace = reference_namespace(COURSE.source_notebook(assignment, notebook))
    tree = ast.parse(solution_answers(assignment.id)[exercise_id])
    names = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    return {name: namespace[name] for name in names if not name.startswith("_") and name in namespace}


@functools.cache
def answer_kind(exercise_id):
    """"value", "module" or "function", and the names the trivial answers wrap: name -> (kind, its inputs)."""
    import torch
    if exercise_of(exercise_id).variant:
        return "value", {exercise_id: ("value", _variant_inputs(exercise_id))}
    wrapped = {}
    for name, obj in _reference_objects(exercise_id).items():
        if inspect.isclass(obj) and issubclass(obj, torch.nn.Module):
            wrapped[name] = ("module", _inputs(obj.forward)[1:])   # without self
        elif inspect.isfunction(obj):
            wrapped[name] = ("function", _inputs(obj))
    if not wrapped:
        raise ValueError(f"{exercise_id}: its reference answer defines no function or nn.Module class to wrap")
    kinds = {kind for kind, _ in wrapped.values()}
    return ("module" if "module" in kinds else "function"), wrapped


def _inputs(function):
    return [name for name, parameter in inspect.signature(function).parameters.items()
            if parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
            and parameter.default in (inspect.Parameter.empty, None)]


def _notebook_of(exercise_id):
    assignment = COURSE.assignment(ASSIGNMENT_OF[exercise_id])
    return assignment, next(nb for nb in assignment.notebooks if any(e.id == exercise_id for e in nb.exercises))


def _variant_inputs(exercise_id):
    from autograder.variants import Variants
    return list(Variants(COURSE).default(*_notebook_of(exercise_id)))


def describe(exercise_id):
    """answer name -> the sentence that says what it is: the control ("reference") and each trivial answer."""
    kind, wrapped = answer_kind(exercise_id)
    inputs = ", ".join(dict.fromkeys(name for _, names in wrapped.values() for name in names)) or "none"
    return {CONTROL: "the reference through the filter's wrapper",
            **{name: described[kind].format(name=f"of {inputs}") for name, described in KINDS.items()}}


def trivial_answers(exercise_id):
    """answer name -> (the sentence that says what it is, the code of the answer cell): the control
    ("reference") and each trivial answer of the exercise."""
    return {name: (sentence, _code(exercise_id, name)) for name, sentence in describe(exercise_id).items()}


def _code(exercise_id, answer):
    reference = solution_answers(ASSIGNMENT_OF[exercise_id])[exercise_id]
    kind, wrapped = answer_kind(exercise_id)
    if kind == "value":
        return reference + HELPERS + _value_code(exercise_id, answer, wrapped[exercise_id][1])
    parts = [reference, HELPERS]
    for name, (kind_, inputs) in wrapped.items():
        call = f"trivial_answer({answer!r}, {{function}}, args, kwargs, {name!r}, {inputs!r})"
        if kind_ == "module":
            parts.append(f"\n\nclass {name}({name}):\n    def forward(self, *args, **kwargs):\n"
                         f"        return {call.format(function='super().forward')}\n")
        else:
            parts.append(f"\n\ntrivial_reference_{name} = {name}\n\n\ndef {name}(*args, **kwargs):\n"
                         f"    return {call.format(function=f'trivial_reference_{name}')}\n")
    return "".join(parts)


def _value_code(exercise_id, answer, inputs):
    """A variant exercise's trivial answer: the reference's value made trivial, or worked out on other numbers."""
    from autograder.variants import Variants
    name = exercise_id
    if answer in ("zeros", "ones"):
        return f"\n{name} = trivial_fill({name}, {int(answer == 'ones')})\n"
    if answer in ("first_input", "last_input"):
        order = inputs if answer == "first_input" else inputs[::-1]
        return f"\n{name} = trivial_pass({name}, [VARIANT[key] for key in {order!r}])\n"
    if answer == CONTROL:
        return ""
    variants, where = Variants(COURSE), _notebook_of(exercise_id)
    numbers = variants.default(*where) if answer == "earlier_answer" else _other_numbers(variants, *where)
    reference = solution_answers(ASSIGNMENT_OF[exercise_id])[exercise_id]
    return f"\ntrivial_saved = VARIANT\nVARIANT = {numbers!r}\n{reference}\nVARIANT = trivial_saved\n"


STUDENT = "student-of-the-filter"


def _other_numbers(variants, assignment, notebook):
    """Another student's numbers that differ from the filter's student's in every entry (the first such of a
    hundred ids; two students may draw the same task)."""
    own = variants.numbers(assignment, notebook, STUDENT)
    for index in range(100):
        other = variants.numbers(assignment, notebook, f"another-{STUDENT}-{index}")
        if all(other[key] != own[key] for key in own):
            break
    return other


def plan(exercises):
    """What to grade: (assignment id, group, [(answer name, {exercise id: code})]) per group of the chosen
    exercises that do not call one another (tests/check.py's exercise_groups): one submission per answer name,
    holding that trivial answer of each exercise of the group beside the reference answers of the exercises
    they call."""
    planned, by_assignment = [], {}
    for exercise in exercises:
        by_assignment.setdefault(ASSIGNMENT_OF[exercise], []).append(exercise)
    for assignment, chosen in by_assignment.items():
        for group in exercise_groups(chosen):
            answers = {exercise: trivial_answers(exercise) for exercise in group}
            called = {}
            for exercise in group:
                called.update(needs(exercise))
            submissions = [(name, {**called, **{exercise: answers[exercise][name][1] for exercise in group}})
                           for name in [CONTROL, *KINDS]]
            planned.append((assignment, group, submissions))
    return planned


@dataclass
class Filtered:
    """What the filter saw: graded[exercise][answer name][test] = [score, max score, feedback's first line];
    flags[exercise]: why an answer could not be judged; crashes[exercise]: a test that raised inside the grader
    on a trivial answer; seconds: the whole run; costs: [assignment, answer name, seconds] per submission
    graded in this run (none for a group whose verdicts were kept from an earlier run)."""
    graded: dict = field(default_factory=dict)
    flags: dict = field(default_factory=dict)
    crashes: dict = field(default_factory=dict)
    seconds: float = 0.0
    costs: list = field(default_factory=list)

    def add(self, other):
        for exercise, answers in other.graded.items():
            self.graded.setdefault(exercise, {}).update(answers)
        for mine, theirs in ((self.flags, other.flags), (self.crashes, other.crashes)):
            for exercise, found in theirs.items():
                mine.setdefault(exercise, []).extend(found)
        self.costs += other.costs


@contextlib.contextmanager
def own_variant_secret():
    """The filter's own variant secret while it runs: fixed (its verdicts and their keys do not change between
    runs), outside the repository, and with no record of a class beside it, so that its students are graded on
    the numbers of their own ids whatever roster the machine's secret records."""
    from autograder.variants import SECRET_ENV
    folder = Path(tempfile.gettempdir()) / f"attention-course-value-filter-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / "variant-secret"
    if not path.exists():
        temporary = folder / f".variant-secret.{os.getpid()}"
        temporary.write_text("f1" * 32 + "\n")
        temporary.chmod(0o600)
        os.replace(temporary, path)
    saved = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = str(path)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = saved


def grade(exercises, folder, fresh=False):
    """A Filtered: the verdicts of every planned submission, graded by one warm Grader of the ungated course.
    A group's verdicts are kept in the grader's cache folder under the hash of everything they follow from
    (verdict_key), and graded again only when that changes (or with fresh)."""
    with own_variant_secret():
        return _grade(exercises, folder, fresh)


def _grade(exercises, folder, fresh):
    from autograder.grading import open_grader
    started, seen, todo = time.monotonic(), Filtered(), []
    for assignment_id, group, submissions in plan(exercises):
        key = verdict_key(assignment_id, group, submissions)
        kept = None if fresh else _kept(key)
        if kept is None:
            todo.append((key, assignment_id, group, submissions))
        else:
            seen.add(kept)
    course = ungated(COURSE, exercises)
    crashes = _Crashes()

    def body(grader):
        for index, (key, assignment_id, group, submissions) in enumerate(todo):
            part = Filtered()
            for name, codes in submissions:
                _grade_one(grader, course.assignment(assignment_id), group, name, codes,
                           Path(folder) / f"{index}-{name}", part, crashes)
            _keep(key, part)
            seen.add(part)

    if todo:
        logging.getLogger("autograder").addHandler(crashes)
        try:
            open_grader(course, body, assignments=sorted({assignment for _, assignment, _, _ in todo}))
        finally:
            logging.getLogger("autograder").removeHandler(crashes)
    seen.seconds = time.monotonic() - started
    return seen


def _grade_one(grader, assignment, chosen, name, codes, folder, seen, crashes):
    """Grade one submission, the answer `name` of each chosen exercise, into seen."""
    crashes.answer, crashes.found = name, []
    target = folder / assignment.id
    try:
        make_submission(assignment.id, codes, target)
    except OSError as error:   # an exercise whose notebook is not released yet
        for exercise in chosen:
            seen.flags.setdefault(exercise, []).append(f"its submission could not be made ({error})")
        return
    result = grader.grade_submission(assignment, target, STUDENT, exercises=chosen)
    seen.costs.append([assignment.id, name, result.seconds])
    for suite, crash in crashes.found:
        seen.crashes.setdefault(SUITE_OF.get(suite, suite), []).append(crash)
    for notebook in result.notebooks:
        for exercise in chosen:
            seen.flags.setdefault(exercise, []).extend(
                [f"the course's rules flagged its generated code ({flag})" for flag in notebook.flags]
                + ([f"its submission was not graded ({notebook.reason})"] if notebook.reason and not crashes.found
                   else []))
        for test in notebook.tests:
            first = (test.output or "").strip().splitlines()[:1]
            seen.graded.setdefault(test.exercise, {}).setdefault(name, {})[test.test] = [
                test.score, test.max_score, first[0] if first else ""]


def verdict_key(assignment_id, group, submissions):
    """The hash of everything a group's verdicts follow from: the grader's code and the course (suites of other
    exercises aside), the group's suites, the generated submissions, the assignment's notebooks, the numbers of
    the filter's student, and where kernels run."""
    from autograder.sandbox.jail import kernel_device
    from autograder.variants import Variants, has_variants
    assignment = COURSE.assignment(assignment_id)
    digest = hashlib.sha256()
    parts = [*_grading_code(), COURSE.root / "course.yml", *(exercise_of(e).suite for e in group)]
    parts += [COURSE.source_notebook(assignment, nb) for nb in assignment.notebooks]
    parts += [COURSE.release_notebook(assignment, nb) for nb in assignment.notebooks]
    for path in parts:
        digest.update(str(path.relative_to(COURSE.root)).encode() + b"\0")
        digest.update(path.read_bytes() if path.exists() else b"(missing)")
    numbers = Variants(COURSE).handed_out_text(assignment, STUDENT) if has_variants(assignment) else ""
    digest.update(json.dumps([group, submissions, numbers, kernel_device()]).encode())
    return digest.hexdigest()


@functools.cache
def _grading_code():
    """The files whose code grading a submission runs: grading.py and what it imports, the suites' helpers and
    what they import (grimp's import graph, read from the source), what runs in the sandbox, the suites'
    pytest.ini, and this filter with the tests' modules it builds submissions with."""
    import grimp
    graph = grimp.build_graph("autograder", cache_dir=None)
    roots = {"autograder.grading", *(name for name in graph.modules if name.startswith("autograder.suites.helpers"))}
    modules = roots.union(*(graph.find_upstream_modules(name) for name in roots))
    files = set()
    for name in modules:
        path = COURSE.root.joinpath(*name.split("."))
        files.add(path / "__init__.py" if path.is_dir() else path.with_suffix(".py"))
    files |= set((COURSE.root / "autograder" / "sandbox" / "inside").glob("*.py"))
    files |= {COURSE.root / "autograder" / "suites" / "pytest.ini", Path(__file__),
              COURSE.root / "tests" / "notebooks.py", COURSE.root / "tests" / "check.py"}
    return sorted(files)


def _kept(key):
    """The Filtered kept under key, or None."""
    from autograder.files import cache_folder
    try:
        return Filtered(**json.loads((cache_folder("value-filter") / f"{key}.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _keep(key, part):
    from autograder.files import cache_folder, write_atomic
    with contextlib.suppress(OSError):
        write_atomic(cache_folder("value-filter") / f"{key}.json", json.dumps(asdict(part)).encode())


SUITE_OF = {exercise.suite.name: exercise.id for assignment in COURSE.assignments for exercise in assignment.exercises}


class _Crashes(logging.Handler):
    """The suites' own errors on a trivial answer, read off the grader's log ("grader error while grading")."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.answer, self.found = "", []

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("grader error while grading"):
            lines = message.splitlines()
            suite, _, test = lines[1].partition("::")
            self.found.append((suite, f"{test} raised {lines[-1]} on the trivial answer {self.answer!r}"))


def findings(exercise_id, seen):
    """The sentences that say why the exercise fails the filter ([] when it passes): each value test a trivial
    answer earns points on (but the known debt, KNOWN_WEAK), each test that raised inside the grader on one
    (crashes), and anything that keeps the filter from judging (the control lost points, an answer not graded)."""
    graded = seen.graded.get(exercise_id, {})
    said = [f"{exercise_id}: the filter could not judge it: {flag}"
            for flag in dict.fromkeys(seen.flags.get(exercise_id, []))]
    said += [f"{exercise_id}: {crash}: a trivial answer makes the submission a grader fault instead of a verdict "
             "(the test must check the answer's form before it reads it)"
             for crash in dict.fromkeys(seen.crashes.get(exercise_id, []))]
    if said:
        return said
    control = graded.get(CONTROL, {})
    for test in value_tests(exercise_id):
        score, full, why = control.get(test, [None, None, "not graded"])
        if score is None or score < full:
            said.append(f"{exercise_id}: the reference through the filter's wrapper does not get full marks on "
                        f"{test} ({why}), so the trivial answers cannot be judged there")
    missing = sorted({name for name in describe(exercise_id) for test in value_tests(exercise_id)
                      if test not in graded.get(name, {})})
    if missing:
        said.append(f"{exercise_id}: the trivial answers {missing} were not graded on every value test")
    for test, name, described, score, full in weak(exercise_id, graded):
        if (exercise_id, test) not in KNOWN_WEAK:
            said.append(f"{exercise_id}: {test} is weak: the trivial answer {name!r} ({described}) earns "
                        f"{score:g} of its {full:g} points; a test of a value must tell it from the right "
                        "answer (or say in tests/value_filter.py's EXEMPT why it checks no value)")
    return said


def weak(exercise_id, graded):
    """(test, answer name, what the answer is, points earned, points) for each value test a trivial answer earns
    points on."""
    found = []
    for test in value_tests(exercise_id):
        for name, described in describe(exercise_id).items():
            if name != CONTROL:
                score, full, _ = graded.get(name, {}).get(test, [0.0, 0.0, ""])
                if score > 0:
                    found.append((test, name, described, score, full))
    return found


def report(exercises, seen):
    """The filter's report: one line per finding and per known weak test, and the totals."""
    lines, checked, weak_tests = [], 0, set()
    for exercise in exercises:
        checked += len(value_tests(exercise))
        lines += findings(exercise, seen)
        for test, name, _, score, full in weak(exercise, seen.graded.get(exercise, {})):
            weak_tests.add((exercise, test))
            if (exercise, test) in KNOWN_WEAK:
                lines.append(f"{exercise}: {test} is weak (known: {KNOWN_WEAK[exercise, test]}): the trivial answer "
                             f"{name!r} earns {score:g} of its {full:g} points")
    exempted = sum(len(exempt(exercise)) for exercise in exercises)
    lines.append(f"value filter: {len(exercises)} exercises, {checked} value tests checked ({exempted} exempt), "
                 f"{len(weak_tests)} weak ({len(weak_tests & set(KNOWN_WEAK))} of them known debt), "
                 f"{sum(bool(seen.crashes.get(e)) for e in exercises)} exercises whose suite raised on a trivial "
                 f"answer, in {seen.seconds:.0f} s")
    return lines


def run(exercises, fresh=False):
    """Grade (in a scratch folder) and return the Filtered."""
    with tempfile.TemporaryDirectory(prefix="value-filter-") as scratch:
        return grade(exercises, scratch, fresh)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("exercises", nargs="*", help="exercise ids (default: the whole course)")
    parser.add_argument("--json", help="write what was graded here (tests/test_filter.py reads it)")
    parser.add_argument("--fresh", action="store_true", help="grade every group again, whatever was kept")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.exercises) - set(ASSIGNMENT_OF))
    if unknown:
        parser.error(f"no such exercise: {', '.join(unknown)}")
    exercises = args.exercises or list(ASSIGNMENT_OF)
    seen = run(exercises, args.fresh)
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(seen)))
    lines = report(exercises, seen)
    print("\n".join(lines))
    return 1 if any(findings(exercise, seen) for exercise in exercises) else 0


if __name__ == "__main__":
    sys.exit(main())
