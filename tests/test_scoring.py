"""Scoring is a pure function of what was observed: no process, no files, no pytest session."""

from autograder.harness.plugin import Outcome
from autograder import render
from autograder.results import SubmissionResult
from autograder.scoring import NOT_COUNTED, NOT_RUN, SAME_AS_GATE, score_notebook
from autograder.sandbox.student import CellReport
from autograder.submission import Cell
from tests.notebooks import COURSE

NOTEBOOK = COURSE.assignment("multi_head").notebooks[0]
SYNTAX = CellReport("mha", "syntax", "invalid syntax", '  File "<cell mha>", line 3\n    def forward(self x):\n'
                    "SyntaxError: invalid syntax", defines=("MultiHeadAttention",))


def outcomes(exercise_id, failing, message="", missing=""):
    """Every test of the notebook passes except those of exercise_id named in failing."""
    return {(exercise.id, test): Outcome(False, message, missing) if exercise.id == exercise_id and test in failing
            else Outcome(True) for exercise in NOTEBOOK.exercises for test in exercise.points}


def test_a_syntax_error_is_reported_once_at_the_top_of_its_exercise():
    mha = next(e for e in NOTEBOOK.exercises if e.id == "mha")
    observed = outcomes("mha", set(mha.points), "Your code raised NameError: MultiHeadAttention is not "
                        "defined in the notebook.", "MultiHeadAttention")
    result = score_notebook(NOTEBOOK, observed, [SYNTAX], {})
    tests = [t for t in result.tests if t.exercise == "mha"]
    # each test says why in its own words too (Gradescope lists them one by one), the error once
    assert all(t.score == 0 and t.output.startswith(NOT_RUN) and "cell mha has a syntax error" in t.output
               for t in tests)
    assert list(result.notes) == ["mha"] and result.notes["mha"].count("SyntaxError") == 1
    feedback = render.markdown(SubmissionResult("s", "multi_head", [result]))
    assert feedback.count("SyntaxError: invalid syntax") == 1
    assert feedback.index("SyntaxError") < feedback.index("test_has_four_projections")
    # an exercise that does not use the broken cell hears nothing about it
    assert all(t.score == t.max_score for t in result.tests if t.exercise == "heads")


def test_a_later_exercise_that_needs_the_broken_cell_gets_the_note_too():
    observed = outcomes("to_torch_mha", {"test_matches_module_outputs"},
                        "Your code raised NameError: name 'MultiHeadAttention' is not defined.", "MultiHeadAttention")
    result = score_notebook(NOTEBOOK, observed, [SYNTAX], {})
    assert "SyntaxError" in result.notes["to_torch_mha"]
    failed = [t for t in result.tests if t.score < t.max_score]
    assert [t.test for t in failed] == ["test_matches_module_outputs"] and failed[0].output.startswith(NOT_RUN)


def test_a_failure_with_another_cause_keeps_its_own_message():
    raised = CellReport("mha", "error", "boom", "ValueError: boom", defines=("MultiHeadAttention",))
    observed = outcomes("mha", {"test_bias_flag"}, "MultiHeadAttention(..., bias=False) still has bias parameters.")
    result = score_notebook(NOTEBOOK, observed, [raised], {})
    failed = next(t for t in result.tests if t.test == "test_bias_flag")
    assert failed.output.startswith("MultiHeadAttention(..., bias=False)")
    assert "ValueError: boom" in result.notes["mha"] and "ValueError" not in failed.output


def test_a_broken_rule_replaces_every_outcome_of_its_exercise():
    result = score_notebook(NOTEBOOK, outcomes("mha", set()), [], {"mha": "No credit: from scratch."})
    assert {t.output for t in result.tests if t.exercise == "mha"} == {"No credit: from scratch."}
    assert sum(t.score for t in result.tests if t.exercise == "mha") == 0


def test_code_reaching_into_what_measures_a_point_costs_the_measured_points_only():
    """absorbed is not from scratch: a notebook whose code reaches into torch's dispatch modes (where the
    FLOP counter lives) loses absorbed's counted test, and nothing else."""
    from autograder import rules
    notebook = COURSE.assignment("latent_attention").notebooks[0]
    program = type("Program", (), {"written": {"absorbed": "from torch.utils._python_dispatch import _pop_mode\n"}})
    flag = rules.internals_flag(program, notebook.exercises)
    assert "torch.utils._python_dispatch" in flag
    broken = rules.broken_rules(notebook.exercises, type("Student", (), {"builtin_attention_users": set()}), flag)
    passing = {(exercise.id, test): Outcome(True) for exercise in notebook.exercises for test in exercise.points}
    result = score_notebook(notebook, passing, [], broken)
    lost = {(t.exercise, t.test) for t in result.tests if t.score < t.max_score}
    assert lost == {("absorbed", "test_never_up_projects_the_cache")}
    assert "reaches into what measures it" in next(t.output for t in result.tests if t.score < t.max_score)
    for honest in ("from collections import Counter\nlabel = 'counter'\n", "x = torch.einsum('ij,jk->ik', a, b)\n"):
        assert rules.reaches_into_internals(honest) is None
    for hostile in ("import counter\n", "torch.utils._python_dispatch._get_current_dispatch_mode()\n",
                    "from torch.utils.flop_counter import FlopCounterMode\n"):
        assert rules.reaches_into_internals(hostile) is not None


def test_cells_know_what_they_define_even_with_a_syntax_error():
    cell = Cell("mha", "import torch\nclass MultiHeadAttention(nn.Module:\n    x = 1\ndef helper(a):\n"
                       "    pass\nSCALE: float = 2.0\nflag == 3\n")
    assert cell.defines == ("MultiHeadAttention", "helper", "SCALE")


def gated(exercise_id, gate_outcome, failing=(), message=""):
    observed = outcomes(exercise_id, set(failing), message)
    exercise = next(e for e in NOTEBOOK.exercises if e.id == exercise_id)
    observed[exercise_id, exercise.gate] = gate_outcome
    return exercise, score_notebook(NOTEBOOK, observed, [], {})


def test_an_answer_that_fails_its_gate_earns_its_basic_tests_only_and_hears_why_once():
    exercise, result = gated("mha", Outcome(False, "The output does not change when the queries change."))
    tests = [t for t in result.tests if t.exercise == "mha"]
    assert sum(t.score for t in tests) == sum(exercise.points[name] for name in exercise.basic) > 0
    assert all(t.output.startswith(NOT_COUNTED) and "does not change when the queries change" in t.output
               for t in tests if t.test not in exercise.basic)
    assert result.notes["mha"].count("does not change when the queries change") == 1
    assert all(t.score == t.max_score for t in result.tests if t.exercise != "mha")


def test_an_untouched_stub_is_reported_once():
    stub = "Your code raised NotImplementedError: the stub has not been replaced yet."
    exercise, result = gated("mha", Outcome(False, stub), failing=exercise_tests("mha"), message=stub)
    outputs = [t.output for t in result.tests if t.exercise == "mha"]
    assert not any(stub in output for output in outputs) and result.notes["mha"].count(stub) == 1
    assert all(output.startswith((NOT_COUNTED, SAME_AS_GATE)) for output in outputs)


def test_a_grader_error_in_a_gate_costs_the_student_nothing():
    _, result = gated("mha", Outcome(False, "The grader could not run this check", internal=True))
    assert all(t.score == t.max_score for t in result.tests) and "mha" not in result.notes


def exercise_tests(exercise_id):
    return set(next(e for e in NOTEBOOK.exercises if e.id == exercise_id).points)
