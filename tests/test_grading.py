"""End-to-end grading of single notebooks through `python -m autograder grade`."""

import json

import nbformat
import pytest

from tests.conftest import run_grader, scores_by_exercise
from tests.notebooks import COURSE, make_submission, solution_answers
from tests.sample_class import MHA_SUBCLASS, SDPA_UNSCALED

ASSIGNMENTS = [assignment.id for assignment in COURSE.assignments]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solutions_get_full_marks(grade, assignment):
    for notebook in COURSE.assignment(assignment).notebooks:
        result, _ = grade(assignment, COURSE.source_notebook(COURSE.assignment(assignment), notebook))
        failed = [(t["name"], t["output"]) for t in result["tests"] if t["score"] != t["max_score"]]
        assert failed == []
        assert result["score"] == result["max_score"] > 0


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_untouched_release_gets_zero(grade, assignment):
    for notebook in COURSE.assignment(assignment).notebooks:
        result, _ = grade(assignment, COURSE.release_notebook(COURSE.assignment(assignment), notebook))
        assert result["score"] == 0 and result["max_score"] > 0
        assert all("NotImplementedError" in t["output"] for t in result["tests"])


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("content,reason", [
    (b"", "is empty"),
    (b'{"cells": [', "not a readable notebook"),
    (b"\x89PNG\r\n\x1a\n\x00\x00binary", "not a readable notebook"),
    (b'{"hello": "world"}', "not a readable notebook"),
    (b'[1, 2, 3]', "not a readable notebook"),
])
def test_corrupt_notebooks_score_zero_with_one_line_reason(tmp_path, content, reason):
    path = write(tmp_path, "scaled_attention.ipynb", content)
    out = tmp_path / "results.json"
    process = run_grader("grade", "--assignment", "scaled_attention", path, "--json", out)
    assert process.returncode == 0
    assert "Traceback" not in process.stdout + process.stderr
    result = json.loads(out.read_text())
    assert result["score"] == 0 and result["max_score"] == COURSE.assignment("scaled_attention").max_score
    assert reason in result["output"] and "\n" not in result["output"]


def test_missing_notebook_and_bad_arguments_give_clean_errors(tmp_path):
    process = run_grader("grade", "--assignment", "scaled_attention", tmp_path / "nope.ipynb",
                         "--json", tmp_path / "r.json")
    assert process.returncode == 0 and "missing" in json.loads((tmp_path / "r.json").read_text())["output"]
    process = run_grader("grade", "--assignment", "no_such_assignment", tmp_path / "nope.ipynb")
    assert process.returncode == 2 and process.stderr.startswith("error: unknown assignment")
    assert "Traceback" not in process.stderr


def test_monkeypatching_and_printing_gain_nothing(grade, tmp_path):
    honest = make_submission("scaled_attention", {"sdpa": SDPA_UNSCALED}, tmp_path / "honest")[0]
    patched_code = ("import sys, numpy\n"
                    "torch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"
                    "torch.Tensor.__eq__ = lambda *a: True\nnumpy.allclose = lambda *a, **k: True\n"
                    "import builtins; builtins.isinstance = lambda *a: True\n"
                    "print('score 13/13'); print('PASSED', file=sys.stderr)\n" + SDPA_UNSCALED)
    patched = make_submission("scaled_attention", {"sdpa": patched_code}, tmp_path / "patched")[0]
    honest_result, _ = grade("scaled_attention", honest)
    patched_result, _ = grade("scaled_attention", patched)
    assert 0 < honest_result["score"] < honest_result["max_score"]
    assert patched_result["score"] <= honest_result["score"]


def test_tensor_subclass_outputs_gain_nothing(grade, tmp_path):
    answers = {**solution_answers("multi_head"), "mha": MHA_SUBCLASS}
    path = make_submission("multi_head", answers, tmp_path)[0]
    result, _ = grade("multi_head", path)
    by_name = {t["name"]: t for t in result["tests"]}
    assert by_name["mha: test_matches_torch_multihead_attention"]["score"] == 0
    assert by_name["mha: test_weights_rows_sum_to_one"]["score"] == 0


def test_builtin_attention_scores_nothing_with_a_message(grade, tmp_path):
    code = ("def scaled_dot_product_attention(q, k, v, mask=None):\n"
            "    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
            "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(~mask, float('-inf'))\n"
            "    return out, torch.softmax(scores, -1).nan_to_num(0.0)\n")
    hidden = "sdpa = getattr(F, 'scaled_' + 'dot_product_attention')\n" + code.replace(
        "F.scaled_dot_product_attention", "sdpa")
    for source in (code, hidden):
        path = make_submission("scaled_attention", {"sdpa": source}, tmp_path / str(len(source)))[0]
        result, _ = grade("scaled_attention", path)
        assert result["score"] == 0
        assert all("built-in attention" in t["output"] for t in result["tests"])


def test_edited_metadata_and_deleted_test_cells_change_nothing(grade, tmp_path):
    path = make_submission("scaled_attention", {"sdpa": SDPA_UNSCALED}, tmp_path)[0]
    baseline, _ = grade("scaled_attention", path)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            meta["points"] = 1000
            cell.source = "print('all good')"
    nb.cells = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("grade")]
    nbformat.write(nb, path)
    edited, _ = grade("scaled_attention", path)
    assert edited["score"] == baseline["score"] and edited["max_score"] == baseline["max_score"]


def test_infinite_loop_costs_only_that_function(grade, tmp_path):
    looping = solution_answers("multi_head")["heads"].replace(
        "    B, H, S, d_k = x.shape\n", "    B, H, S, d_k = x.shape\n    while True:\n        pass\n")
    path = make_submission("multi_head", {**solution_answers("multi_head"), "heads": looping}, tmp_path)[0]
    result, _ = grade("multi_head", path)
    by_name = {t["name"]: t for t in result["tests"]}
    assert by_name["heads: test_split_heads_layout"]["score"] == 1
    assert by_name["heads: test_merge_heads_layout"]["score"] == 0
    assert "did not finish" in by_name["heads: test_merge_heads_layout"]["output"]


def test_syntax_error_costs_only_what_its_cell_defines(grade, tmp_path):
    answers = solution_answers("multi_head")
    answers["mha"] = answers["mha"].replace("def forward(self, query, key, value, mask=None):",
                                            "def forward(self, query, key, value, mask=None)")
    result, _ = grade("multi_head", make_submission("multi_head", answers, tmp_path)[0])
    totals = scores_by_exercise(result)
    heads = next(e for e in COURSE.assignment("multi_head").exercises if e.id == "heads")
    assert totals["heads"] == heads.max_score
    assert totals["mha"] == 0
    assert any("syntax error" in t["output"] for t in result["tests"] if t["name"].startswith("mha"))


def test_correct_solution_that_prints_and_warns_gets_full_marks(grade, tmp_path):
    answers = solution_answers("scaled_attention")
    answers["sdpa"] = ("import sys, warnings\nprint('debug: defining attention')\n"
                       "print('to stderr', file=sys.stderr)\nwarnings.warn('a harmless warning')\n"
                       + answers["sdpa"].replace('    d_k = q.size(-1)\n',
                                                 '    d_k = q.size(-1)\n    print("shapes", q.shape)\n'
                                                 '    warnings.warn("careful")\n'))
    result, _ = grade("scaled_attention", make_submission("scaled_attention", answers, tmp_path)[0])
    assert result["score"] == result["max_score"]
