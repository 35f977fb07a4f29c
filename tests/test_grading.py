"""End-to-end grading: every case below is a submission in one class folder, graded once with
`grade-class` (the command instructors run); each test then reads its own results."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.scoring import NOT_RUN

from tests.conftest import run_grader, scores_by_exercise
from tests.notebooks import COURSE, ROOT, make_submission, solution_answers
from tests.sample_class import MHA_SUBCLASS, SDPA_UNSCALED

CORRUPT = {
    "corrupt_empty": (b"", "is empty"),
    "corrupt_truncated": (b'{"cells": [', "not a readable notebook"),
    "corrupt_binary": (b"\x89PNG\r\n\x1a\n\x00\x00binary", "not a readable notebook"),
    "corrupt_not_a_notebook": (b'{"hello": "world"}', "not a readable notebook"),
    "corrupt_a_list": (b'[1, 2, 3]', "not a readable notebook"),
}

PATCHED = ("import sys, numpy\n"
           "torch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\n"
           "torch.Tensor.__eq__ = lambda *a: True\nnumpy.allclose = lambda *a, **k: True\n"
           "import builtins; builtins.isinstance = lambda *a: True\n"
           "print('score 13/13'); print('PASSED', file=sys.stderr)\n" + SDPA_UNSCALED)

BUILTIN = ("def scaled_dot_product_attention(q, k, v, mask=None):\n"
           "    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
           "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
           "    if mask is not None:\n"
           "        scores = scores.masked_fill(~mask, float('-inf'))\n"
           "    return out, torch.softmax(scores, -1).nan_to_num(0.0)\n")
BUILTIN_HIDDEN = "sdpa = getattr(F, 'scaled_' + 'dot_product_attention')\n" + BUILTIN.replace(
    "F.scaled_dot_product_attention", "sdpa")


def _looping_heads():
    return solution_answers("multi_head")["heads"].replace(
        "    B, H, S, d_k = x.shape\n", "    B, H, S, d_k = x.shape\n    while True:\n        pass\n")


def _mha_syntax_error():
    return solution_answers("multi_head")["mha"].replace(
        "def forward(self, query, key, value, mask=None):", "def forward(self, query, key, value, mask=None)")


def _printing_sdpa():
    return ("import sys, warnings\nprint('debug: defining attention')\n"
            "print('to stderr', file=sys.stderr)\nwarnings.warn('a harmless warning')\n"
            + solution_answers("scaled_attention")["sdpa"].replace(
                '    d_k = q.size(-1)\n',
                '    d_k = q.size(-1)\n    print("shapes", q.shape)\n    warnings.warn("careful")\n'))


# The instructor's own notebook graded as a submission (what Gradescope's setup.sh does with it), for
# two assignments; every assignment's reference answers get full marks in the sample class (ada_perfect,
# tests/test_sample_class.py), which grades them once for the whole suite.
SOLUTION_ASSIGNMENTS = ["scaled_attention", "multi_head"]


def build(submitted):
    for assignment in SOLUTION_ASSIGNMENTS:   # (the sample class grades every untouched release: ben_untouched)
        for notebook in COURSE.assignment(assignment).notebooks:
            folder = submitted / f"solution_{assignment}" / assignment
            folder.mkdir(parents=True)
            (folder / notebook.filename).write_bytes(
                COURSE.source_notebook(COURSE.assignment(assignment), notebook).read_bytes())
    for case, (content, _) in CORRUPT.items():
        (submitted / case / "scaled_attention").mkdir(parents=True)
        (submitted / case / "scaled_attention" / "scaled_attention.ipynb").write_bytes(content)
    cases = {
        "honest_unscaled": ("scaled_attention", {"sdpa": SDPA_UNSCALED}),
        "patched_unscaled": ("scaled_attention", {"sdpa": PATCHED}),
        "tensor_subclass": ("multi_head", {**solution_answers("multi_head"), "mha": MHA_SUBCLASS}),
        "builtin": ("scaled_attention", {"sdpa": BUILTIN}),
        "builtin_hidden": ("scaled_attention", {"sdpa": BUILTIN_HIDDEN}),
        "edited_metadata": ("scaled_attention", {"sdpa": SDPA_UNSCALED}),
        "looping_heads": ("multi_head", {**solution_answers("multi_head"), "heads": _looping_heads()}),
        "mha_syntax_error": ("multi_head", {**solution_answers("multi_head"), "mha": _mha_syntax_error()}),
        "prints_and_warns": ("scaled_attention", {**solution_answers("scaled_attention"), "sdpa": _printing_sdpa()}),
        "huge_outputs": ("scaled_attention", solution_answers("scaled_attention")),
    }
    for case, (assignment, answers) in cases.items():
        make_submission(assignment, answers, submitted / case / assignment)
    # Edited points and deleted test cells change nothing.
    path = submitted / "edited_metadata" / "scaled_attention" / "scaled_attention.ipynb"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            meta["points"] = 1000
            cell.source = "print('all good')"
    nb.cells = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("grade")]
    nbformat.write(nb, path)
    # 34 MB of cell output: outputs are never read, so they cost nothing.
    path = submitted / "huge_outputs" / "scaled_attention" / "scaled_attention.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * (34 << 20))]
    nbformat.write(nb, path)
    # A masks notebook handed in as scaled_attention: it holds a working attention in a read-only
    # cell, but none of scaled_attention's answer cells.
    folder = submitted / "wrong_notebook" / "scaled_attention"
    folder.mkdir(parents=True)
    masks = COURSE.assignment("masks")
    (folder / "scaled_attention.ipynb").write_bytes(
        COURSE.source_notebook(masks, masks.notebooks[0]).read_bytes())
    build_hostile_folders(submitted)


SCALED = COURSE.assignment("scaled_attention")
SOLUTION = COURSE.source_notebook(SCALED, SCALED.notebooks[0])


def build_hostile_folders(submitted):
    """Submission folders as a hostile student (or an archive unpacked by hand) leaves them."""
    def folder(student):
        path = submitted / student / "scaled_attention"
        path.mkdir(parents=True)
        return path
    (folder("link_to_solution") / "scaled_attention.ipynb").symlink_to(SOLUTION)
    (folder("link_to_shadow") / "scaled_attention.ipynb").symlink_to("/etc/shadow")
    (submitted / "link_folder").mkdir()
    (submitted / "link_folder" / "scaled_attention").symlink_to(SOLUTION.parent, target_is_directory=True)
    stamped = folder("link_timestamp")
    (stamped / "scaled_attention.ipynb").write_bytes(SOLUTION.read_bytes())
    (stamped / "timestamp.txt").symlink_to("/etc/shadow")
    os.mkfifo(folder("fifo_notebook") / "scaled_attention.ipynb")
    with open(folder("one_gigabyte") / "scaled_attention.ipynb", "wb") as handle:
        handle.truncate(2**30)  # sparse: a gigabyte on paper, nothing on this disk
    many = folder("many_files")
    (many / "scaled_attention.ipynb").write_bytes(SOLUTION.read_bytes())
    for index in range(100_000):
        (many / f"junk{index}").touch()
    def code(source):
        return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
    empty = {"cells": [code("")] * 150_000, "metadata": {}, "nbformat": 4, "nbformat_minor": 4}
    (folder("empty_cells") / "scaled_attention.ipynb").write_text(json.dumps(empty))
    honest = json.loads(SOLUTION.read_text())
    honest["cells"] += [code(f"x{index} = {index}") for index in range(1000)]
    (folder("many_honest_cells") / "scaled_attention.ipynb").write_text(json.dumps(honest))
    (folder("-rf") / "scaled_attention.ipynb").write_bytes(SOLUTION.read_bytes())
    (folder("new\nline") / "scaled_attention.ipynb").write_bytes(SOLUTION.read_bytes())
    (submitted / "misnamed" / "scaled_atention").mkdir(parents=True)
    (submitted / "misnamed" / "scaled_atention" / "scaled_attention.ipynb").write_bytes(SOLUTION.read_bytes())
    (submitted / "notes.txt").write_text("a stray file")


@pytest.fixture(scope="module")
def class_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("grading")
    build(root / "submitted")
    process = run_grader("grade-class", "--submitted", root / "submitted", "--out", root / "out",
                         "--db", f"sqlite:///{root / 'gradebook.db'}", timeout=1800)
    assert process.returncode == 0, process.stderr
    return root, process


@pytest.fixture(scope="module")
def graded(class_run):
    root, _ = class_run

    def result(case, assignment):
        return json.loads((root / "out" / "results" / case / assignment / "results.json").read_text())
    return result


def by_name(result):
    return {test["name"]: test for test in result["tests"]}


@pytest.mark.parametrize("assignment", SOLUTION_ASSIGNMENTS)
def test_solutions_get_full_marks(graded, assignment):
    result = graded(f"solution_{assignment}", assignment)
    failed = [(t["name"], t["output"]) for t in result["tests"] if t["score"] != t["max_score"]]
    assert failed == []
    assert result["score"] == result["max_score"] == COURSE.assignment(assignment).max_score


@pytest.mark.parametrize("case", list(CORRUPT))
def test_corrupt_notebooks_score_zero_with_one_line_reason(graded, case):
    result = graded(case, "scaled_attention")
    assert result["score"] == 0 and result["max_score"] == COURSE.assignment("scaled_attention").max_score
    assert CORRUPT[case][1] in result["output"] and "\n" not in result["output"]


def test_monkeypatching_and_printing_gain_nothing(graded):
    honest, patched = graded("honest_unscaled", "scaled_attention"), graded("patched_unscaled", "scaled_attention")
    assert 0 < honest["score"] < honest["max_score"]
    assert patched["score"] <= honest["score"]


def test_tensor_subclass_outputs_gain_nothing(graded):
    tests = by_name(graded("tensor_subclass", "multi_head"))
    assert tests["mha: test_matches_torch_multihead_attention"]["score"] == 0
    assert tests["mha: test_weights_rows_sum_to_one"]["score"] == 0


@pytest.mark.parametrize("case", ["builtin", "builtin_hidden"])
def test_builtin_attention_scores_nothing_with_a_message(graded, case):
    result = graded(case, "scaled_attention")
    assert result["score"] == 0
    assert all("built-in attention" in t["output"] for t in result["tests"])


def test_edited_metadata_and_deleted_test_cells_change_nothing(graded):
    edited, baseline = graded("edited_metadata", "scaled_attention"), graded("honest_unscaled", "scaled_attention")
    assert edited["score"] == baseline["score"] and edited["max_score"] == baseline["max_score"]


def test_infinite_loop_costs_only_that_function(graded):
    tests = by_name(graded("looping_heads", "multi_head"))
    assert tests["heads: test_split_heads_layout"]["score"] == tests["heads: test_split_heads_layout"]["max_score"]
    assert tests["heads: test_merge_heads_layout"]["score"] == 0
    assert "did not finish" in tests["heads: test_merge_heads_layout"]["output"]


def test_syntax_error_costs_only_what_its_cell_defines(graded):
    result = graded("mha_syntax_error", "multi_head")
    totals = scores_by_exercise(result)
    heads = COURSE.assignment("multi_head").exercise("heads")
    assert totals["heads"] == heads.max_score
    assert totals["mha"] == 0
    # the syntax error is reported once, at the top of mha's feedback; its tests say "not run"
    assert "mha: The cell mha has a syntax error" in result["output"]
    assert all(t["output"].startswith(NOT_RUN) for t in result["tests"] if t["name"].startswith("mha"))


def test_correct_solution_that_prints_and_warns_gets_full_marks(graded):
    result = graded("prints_and_warns", "scaled_attention")
    assert result["score"] == result["max_score"]


def test_outputs_never_cost_points(graded):
    result = graded("huge_outputs", "scaled_attention")
    assert result["score"] == result["max_score"]


def test_a_notebook_of_another_assignment_is_not_graded(graded):
    result = graded("wrong_notebook", "scaled_attention")
    assert result["score"] == 0
    assert "none of the answer cells" in result["output"] and "looks like masks" in result["output"]


@pytest.mark.parametrize("case,reason", [
    ("link_to_solution", "is a link to a place outside the submission"),
    ("link_to_shadow", "is a link to a place outside the submission"),
    ("link_folder", "scaled_attention/ is a link to another folder"),
    ("link_timestamp", "timestamp.txt is a link to a place outside the submission"),
    ("fifo_notebook", "is not a regular file"),
    ("one_gigabyte", "1024 MB, over the 512 MB limit"),
    ("empty_cells", "has 150000 cells, over the limit of 5000 cells"),
])
def test_a_hostile_submission_folder_is_refused_with_its_reason_and_never_read(class_run, graded, case, reason):
    result = graded(case, "scaled_attention")
    assert result["score"] == 0 and reason in result["output"], result["output"]
    root, _ = class_run
    rows = {(row["student"], row["assignment"]): row for row in csv.DictReader(open(root / "out" / "grades.csv"))}
    assert reason in rows[(case, "scaled_attention")]["reason"]
    shadow = Path("/etc/shadow").read_text(errors="replace") if os.access("/etc/shadow", os.R_OK) else ""
    for output in (root / "out").rglob("*"):
        if output.is_file() and shadow.strip():
            assert shadow.strip().splitlines()[0] not in output.read_text(errors="replace")


@pytest.mark.parametrize("case", ["many_files", "many_honest_cells", "-rf"])
def test_many_files_many_cells_and_odd_names_are_graded_as_usual(graded, case):
    result = graded(case, "scaled_attention")
    assert result["score"] == result["max_score"], result["output"]


def test_what_is_no_submission_is_listed_at_the_end_and_its_student_gets_a_row(class_run):
    root, process = class_run
    tail = process.stdout.split("Not graded:")[1]
    assert "misnamed/scaled_atention: no such assignment in course.yml; did you mean scaled_attention?" in tail
    assert "notes.txt: not a folder" in tail and "new\\nline: the folder name" in tail
    rows = [row for row in csv.DictReader(open(root / "out" / "grades.csv")) if row["student"] == "misnamed"]
    assert rows and all(row["final_score"] == "0" and "misnamed/scaled_atention" in row["reason"] for row in rows)


@pytest.mark.parametrize("args,message", [
    (["grade", "--assignment", "scaled_attention", "/nonexistent/nb.ipynb"], "no notebook at"),
    (["grade", "--assignment", "no_such_assignment", "/nonexistent/nb.ipynb"], "unknown assignment"),
    (["grade-class", "--submitted", "/nonexistent"], "no submissions folder"),
    (["grade-class", "--submitted", "sample_class/submitted", "--assignment", "nope"], "unknown assignment"),
    (["grade-class", "--submitted", "sample_class/submitted", "--student", "nobody_*"], "no submissions found"),
])
def test_bad_input_is_one_line_and_a_nonzero_exit(args, message, tmp_path):
    out = ["--out", tmp_path / "out", "--db", f"sqlite:///{tmp_path / 'gradebook.db'}"] if args[0] == "grade-class" else []
    process = run_grader(*args, *out)
    assert process.returncode == 2
    assert message in process.stderr and len(process.stderr.strip().splitlines()) == 1
    assert "Traceback" not in process.stderr


def test_the_command_line_exits_quickly_with_its_code_its_output_and_what_runs_at_exit(tmp_path):
    """`python -m autograder` skips the interpreter's tear-down once a command has returned (a second of
    one core after a class): its exit code, its last line and every function registered to run at exit
    (here one registered before the command line started) are kept."""
    marker = tmp_path / "ran-at-exit"
    script = ("import atexit, runpy, sys\n"
              f"atexit.register(lambda: open({str(marker)!r}, 'w').write('yes'))\n"
              "sys.argv = ['autograder', 'grade-class', '--submitted', '/nonexistent']\n"
              "runpy.run_module('autograder', run_name='__main__')\n")
    process = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert process.returncode == 2
    assert process.stderr.strip().endswith("no submissions folder at /nonexistent")
    assert marker.read_text() == "yes"


def test_one_notebook_graded_says_each_exercise_and_writes_the_feedback(tmp_path):
    """`grade` on one notebook: a line per exercise of course.yml (with the tests it failed), where the
    feedback went, and the score as the last line (Gradescope's setup.sh reads it there)."""
    answers = {key: code for key, code in solution_answers("masks").items() if key != "padding_mask"}
    notebook = make_submission("masks", answers, tmp_path / "upload")[0]
    process = run_grader("grade", "--assignment", "masks", notebook, "--feedback", tmp_path / "feedback.html")
    assert process.returncode == 0, process.stderr
    lines = process.stdout.splitlines()
    assignment = COURSE.assignment("masks")
    padding = assignment.exercise("padding_mask")
    for exercise in assignment.exercises:
        score = 0 if exercise is padding else exercise.max_score
        assert any(line.startswith(f"  {exercise.id}: {score:g} / {exercise.max_score:g}") for line in lines), lines
    assert lines[-2] == f"  the student's feedback: {tmp_path / 'feedback.html'}"
    assert lines[-1] == f"{assignment.max_score - padding.max_score:g} / {assignment.max_score:g}"
    page = (tmp_path / "feedback.html").read_text()
    assert f"Score: {assignment.max_score - padding.max_score:g} / {assignment.max_score:g}" in page


def test_an_authors_check_grades_the_chosen_exercise_alone_and_writes_no_gradebook(tmp_path):
    """grade-class --exercise (what make check and the catalogue run): each submission's results hold
    the chosen exercise's tests alone, each as a whole run grades it; nothing goes into a gradebook;
    the same folder graded whole afterwards grades every submission again (a part is no whole)."""
    assignment = COURSE.assignment("masks")
    padding = assignment.exercise("padding_mask")
    answers = solution_answers("masks")
    submitted, out = tmp_path / "submitted", tmp_path / "out"
    make_submission("masks", answers, submitted / "ada" / "masks")
    make_submission("masks", {key: code for key, code in answers.items() if key != "padding_mask"},
                    submitted / "bo" / "masks")

    def results():
        return {student: json.loads((out / "results" / student / "masks" / "results.json").read_text())
                for student in ("ada", "bo")}

    process = run_grader("grade-class", "--exercise", "padding_mask", "--submitted", submitted, "--out", out)
    assert process.returncode == 0, process.stderr
    assert "only padding_mask of each" in process.stdout and "gradebook: not written (--exercise)" in process.stdout
    assert not (tmp_path / "autograded").exists()
    part = results()
    for student, points in (("ada", padding.max_score), ("bo", 0)):
        assert [test["name"] for test in part[student]["tests"]] == [f"padding_mask: {name}" for name in padding.points]
        assert scores_by_exercise(part[student]) == {"padding_mask": points}

    process = run_grader("grade-class", "--submitted", submitted, "--out", out, "--db",
                         f"sqlite:///{tmp_path / 'gradebook.db'}")
    assert process.returncode == 0, process.stderr
    assert "2 submission(s) of 2 student(s) to grade" in process.stdout
    whole = results()
    assert scores_by_exercise(whole["ada"]) == {exercise.id: exercise.max_score for exercise in assignment.exercises}
    assert scores_by_exercise(whole["bo"])["padding_mask"] == 0
    for student in ("ada", "bo"):   # the same tests, outputs and points (numbered by where they stand)
        assert [{**test, "number": ""} for test in whole[student]["tests"] if test["name"].startswith("padding_mask:")] \
            == [{**test, "number": ""} for test in part[student]["tests"]]


@pytest.mark.parametrize("case,message", [
    ("no --out", "give it an --out folder of its own"),
    ("a gradebook", "leave --db out"),
    ("another assignment's exercise", "no exercise 'sdpa' in masks"),
])
def test_an_authors_check_is_refused_where_it_would_write_part_grades(case, message, tmp_path):
    out = ["--out", tmp_path / "out"]
    extra = {"no --out": [], "a gradebook": [*out, "--db", f"sqlite:///{tmp_path / 'g.db'}"],
             "another assignment's exercise": [*out, "--assignment", "masks", "--exercise", "sdpa"]}[case]
    process = run_grader("grade-class", "--submitted", "sample_class/submitted", "--exercise", "padding_mask", *extra)
    assert process.returncode == 2
    assert message in process.stderr and len(process.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "g.db").exists()


PRIMED_FORK = """
import os, signal, torch
from autograder.classrun import fanout
from autograder.suites.helpers import tiled
from tests.notebooks import COURSE
fanout.prime(COURSE, ["flash_attention"])
made = [tiled.memory_reference.cache_info().currsize, tiled.memory_gradients.cache_info().currsize]
pid = os.fork()
if pid == 0:
    signal.alarm(100)   # a child that hangs is stopped before the test's own timeout
    torch.softmax(torch.randn(2048, 2048), dim=-1)
    os._exit(0 if tiled.memory_reference.cache_info().currsize == 2 else 3)
print(made, os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_grading_process_forked_after_the_run_is_primed_finds_its_suites_prepared_and_computes():
    """fanout.prime works out what the suites prepare (the flash suites' answers on the 4096-token
    inputs, their prepare()) once, in the process that forks the grading processes, and holds torch to
    one thread there: a forked process finds the answers made and its own tensor maths runs (OpenMP's
    threads do not survive a fork: a process that finds their team waits on it forever)."""
    import subprocess
    import sys

    from tests.notebooks import ROOT
    process = subprocess.run([sys.executable, "-c", PRIMED_FORK], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    assert process.returncode == 0, process.stderr
    assert process.stdout.split() == ["[2,", "1]", "0"]


def test_a_stored_value_is_worked_out_once_per_machine_and_again_when_the_suites_change(tmp_path, monkeypatch):
    """suites/helpers/stored.py: the first process saves the value in the grader's cache folder; a later
    process (a new wrapper here) reads it back without working it out; a file that cannot be read, and
    suites whose code changed, have it worked out again (the older file goes); a folder that cannot be
    written still gives the value."""
    import torch

    from autograder.suites.helpers import stored

    monkeypatch.setenv("COURSE_CACHE", str(tmp_path / "cache"))
    calls = []

    def answer(seed, causal=False):
        calls.append((seed, causal))
        return torch.full((3,), float(seed)), {"causal": torch.tensor(causal)}

    def value(*args, **kwargs):   # a process of its own: a fresh wrapper, nothing kept in memory
        return stored.stored(answer)(*args, **kwargs)

    first = value(4, causal=True)
    assert calls == [(4, True)] and torch.equal(first[0], torch.full((3,), 4.0))
    files = list((tmp_path / "cache" / "suites").glob("*.pt"))
    assert len(files) == 1 and files[0].name.startswith("test_grading.") and ".answer-" in files[0].name
    again = value(4, causal=True)
    assert calls == [(4, True)], "read back, not worked out again"
    assert torch.equal(again[0], first[0]) and again[1]["causal"].item() is True
    value(5)
    assert calls == [(4, True), (5, False)], "other arguments, another value"

    files[0].write_bytes(b"not a tensor file")
    assert torch.equal(value(4, causal=True)[0], first[0]) and len(calls) == 3

    monkeypatch.setattr(stored, "version", lambda: "changedsuites000")
    value(4, causal=True)
    assert len(calls) == 4
    assert not files[0].exists(), "the value of the older suites is removed"

    (tmp_path / "blocked").write_text("a file where the folder should be")
    monkeypatch.setenv("COURSE_CACHE", str(tmp_path / "blocked"))
    assert torch.equal(value(6)[0], torch.full((3,), 6.0)) and len(calls) == 5


def test_a_picture_is_drawn_once_and_read_back_by_the_next_process(tmp_path, monkeypatch):
    """pictures.png_base64: the grading process draws a picture for the feedback page; the process that
    writes nbgrader's autograded notebook (and every regrade) reads the same PNG back."""
    import base64

    import torch

    from autograder import pictures

    monkeypatch.setenv("COURSE_CACHE", str(tmp_path))
    picture = pictures.Picture.of("weights above the diagonal", torch.rand(4, 4).softmax(-1),
                                  torch.ones(4, 4).tril().bool())
    drawn = pictures.png_base64(picture)
    assert base64.b64decode(drawn).startswith(b"\x89PNG") and len(list((tmp_path / "pictures").glob("*.png"))) == 1
    pictures._png_base64.cache_clear()   # as in another process

    def no_drawing(_):
        raise AssertionError("drawn again")
    monkeypatch.setattr(pictures, "png", no_drawing)
    assert pictures.png_base64(picture) == drawn
    pictures._png_base64.cache_clear()
    other = pictures.Picture.of("another", torch.zeros(2, 2), torch.ones(2, 2).bool())
    with pytest.raises(AssertionError, match="drawn again"):
        pictures.png_base64(other)


def test_a_class_run_takes_the_costliest_submissions_first():
    """tasks.costliest_first: the assignments with kernels, then those with measured tests, then the
    rest (course.yml says which), each assignment's submissions in the order given, so that a run ends
    on short submissions and its grading processes finish together."""
    from autograder.classrun.tasks import Task, costliest_first

    tasks = [Task(f"s{index}", assignment.id, "") for index in range(2) for assignment in COURSE.assignments]
    ordered = costliest_first(COURSE, tasks)
    assert sorted(ordered, key=lambda task: task.key) == sorted(tasks, key=lambda task: task.key)
    kinds = [(bool(COURSE.assignment(task.assignment).kernel_kind),
              any(exercise.measured for exercise in COURSE.assignment(task.assignment).exercises)) for task in ordered]
    assert kinds == sorted(kinds, reverse=True) and kinds[0] == (True, True) and kinds[-1] == (False, False)
    for assignment in COURSE.assignments:
        mine = [task.student for task in ordered if task.assignment == assignment.id]
        assert mine == ["s0", "s1"]
