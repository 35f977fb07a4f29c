"""The integrity report, calibrated on this course: copies made the way students copy are flagged,
independently written correct answers are not, and the class's mistakes are counted."""

import os
import re
import subprocess
import sys

from autograder.course import load_course
from autograder.integrity import similar_pairs, stubs
from autograder.submission import build_program, read_notebook

from tests.catalogue import ALTERNATIVES
from tests.notebooks import COURSE, ROOT, solution_answers


def sample_class_answers():
    """exercise -> student -> answer, for every notebook of the sample class."""
    answers = {}
    for folder in sorted((ROOT / "sample_class" / "submitted").glob("*/*")):
        assignment = COURSE.assignment(folder.name)
        for notebook in assignment.notebooks:
            try:
                submitted = read_notebook(folder / notebook.filename, folder)
            except Exception:
                continue
            program = build_program(submitted, read_notebook(COURSE.release_notebook(assignment, notebook)))
            for exercise, source in program.answers.items():
                answers.setdefault(exercise, {})[folder.parent.name] = source
    return answers


def renamed(source, names):
    for old, new in names.items():
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def recommented(source):
    """Comments rewritten, blank lines moved: what a copy changes cheaply."""
    lines = [line for line in source.splitlines() if not line.strip().startswith("#")]
    return "\n\n".join(f"{line}  # step {index}" if line.strip().endswith(")") else line
                       for index, line in enumerate(lines)) + "\n"


VARIANT = {(v.exercise, v.name): v.code for v in ALTERNATIVES}
STABLE = VARIANT["sdpa", "manual stable softmax: exp, mask, renormalise"]
LOOP = VARIANT["mha", "loop over heads"]
CSA = VARIANT["causal_self_attention", "float buffer, torch.where, -1e9"]
TRAIN = VARIANT["train_model", "CrossEntropyLoss on [B, vocab, T], set_to_none"]
KV = VARIANT["kv_cache", "lists of chunks, mask from positions"]

COPIES = {  # (exercise, the student copied, the copy)
    "copy_renamed": ("sdpa", "alternative_sdpa_3", renamed(STABLE, {"scores": "logits", "exps": "unnormalised",
                                                                 "total": "denominator", "weights": "attn"})),
    "copy_recommented": ("causal_self_attention", "alternative_causal_self_attention_0", recommented(CSA)),
    "copy_reordered": ("causal_self_attention", "alternative_causal_self_attention_0", CSA.replace(
        "        q = self.W_q(x).reshape(B, T, self.h, C // self.h).permute(0, 2, 1, 3)\n"
        "        k = self.W_k(x).reshape(B, T, self.h, C // self.h).permute(0, 2, 1, 3)\n",
        "        k = self.W_k(x).reshape(B, T, self.h, C // self.h).permute(0, 2, 1, 3)\n"
        "        q = self.W_q(x).reshape(B, T, self.h, C // self.h).permute(0, 2, 1, 3)\n").replace(
        "        self.W_o = nn.Linear(d_model, d_model, bias=bias)\n        self.attn_dropout = nn.Dropout(dropout)\n",
        "        self.attn_dropout = nn.Dropout(dropout)\n        self.W_o = nn.Linear(d_model, d_model, bias=bias)\n")),
    "copy_comprehension": ("mha", "alternative_mha_0", LOOP.replace(
        "        outputs, maps = [], []\n        for h in range(self.num_heads):\n",
        "        pairs = []\n        for h in range(self.num_heads):\n").replace(
        "            outputs.append(out)\n            maps.append(w)\n",
        "            pairs.append((out, w))\n").replace(
        "        return self.W_o(torch.cat(outputs, dim=-1))",
        "        outputs = [out for out, _ in pairs]\n        maps = [w for _, w in pairs]\n"
        "        return self.W_o(torch.cat(outputs, dim=-1))")),
    "copy_of_training": ("train_model", "alternative_train_model_0", renamed(TRAIN, {"history": "losses", "criterion": "loss_fn",
                                                                             "step": "i"})),
    "copy_of_cache": ("kv_cache", "alternative_kv_cache_0", recommented(renamed(KV, {"start": "offset", "context": "out"}))),
}


# Built on the reference (gqa: catalogue.snippets._gqa_forward changes three lines of its class), so they are no
# independently written answer: it is rightly found alike to the reference-based sample students.
DERIVED = {("gqa", "expand and reshape"),
           # the reference's kernel with a few lines changed (tl.dot; exponentials in base 2), not written anew
           ("paged_kernel", "the group's scores by tl.dot, the group padded to 16 rows"),
           ("paged_kernel", "exp2 with log2(e) folded into the scale, the combine in base 2 too"),
           # the reference's loop, its pointer loads and stores replaced by tensor descriptors
           ("flash_kernel", "tensor descriptors made in the kernel (tl.make_tensor_descriptor, desc.load, desc.store)")}


def derived(alternative):
    """Whether a correct alternative was not written anew for its exercise: listed in DERIVED, or carrying an
    earlier exercise's answer beside its own (a name another exercise's reference answer defines: the catalogue's
    follow-through entries, a right answer on a slip of the exercise it calls, are built on the reference's code,
    and rightly alike to it and to each other)."""
    assignment = next(a.id for a in COURSE.assignments if alternative.exercise in {e.id for e in a.exercises})
    others = {name for exercise, code in solution_answers(assignment).items() if exercise != alternative.exercise
              for name in re.findall(r"^(?:def|class) (\w+)", code, re.M)}
    carried = set(re.findall(r"^(?:def|class) (\w+)", alternative.code, re.M)) & others
    return (alternative.exercise, alternative.name) in DERIVED or bool(carried)


def calibration_class():
    answers = sample_class_answers()
    counter = {}
    for alternative in (v for v in ALTERNATIVES if not derived(v)):
        index = counter.setdefault(alternative.exercise, 0)
        counter[alternative.exercise] += 1
        answers.setdefault(alternative.exercise, {})[f"alternative_{alternative.exercise}_{index}"] = alternative.code
    for student, (exercise, _, source) in COPIES.items():
        answers[exercise][student] = source
    return answers


def test_every_copy_is_flagged_and_no_independent_correct_answers_are():
    answers = calibration_class()
    assert answers["sdpa"]["alternative_sdpa_3"] == STABLE  # the copies name the right originals
    pairs = similar_pairs(answers, stubs(load_course()))
    flagged = {(pair.exercise, frozenset((pair.first, pair.second))): pair for pair in pairs}
    for student, (exercise, original, _) in COPIES.items():
        assert (exercise, frozenset((student, original))) in flagged, (student, original)
    # No independently written answer (a catalogue alternative) is paired with anything but its copy.
    for pair in pairs:
        sides = (pair.first, pair.second)
        if any(side.startswith("alternative_") for side in sides):
            assert any(side.startswith("copy_") for side in sides), pair


def test_short_answers_alike_by_nature_are_not_flagged():
    """A causal mask is one line: thirty students writing torch.tril(...) are not thirty copies."""
    one_liner = "def causal_mask(seq_len, device=None):\n    return torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=device))\n"
    answers = {"causal_mask": {f"student{i}": one_liner for i in range(30)}}
    assert similar_pairs(answers, stubs(load_course())) == []


def test_the_report_is_the_same_in_every_process():
    """copydetect hashes k-grams with Python's hash(), seeded afresh in each process: the same class once
    gave 61 to 63 pairs from run to run.  Fingerprints are now the same whatever the process's seed."""
    program = ("from autograder.integrity import _fingerprint\n"
               f"print(sorted(_fingerprint('a', {STABLE!r}).hashes))\n")
    found = [subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, check=True,
                            env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert found[0] == found[1] and len(eval(found[0])) > 20


def test_an_edited_demo_cell_is_said_to_be_skipped_and_a_locked_one_restored():
    from autograder.integrity import release_edits
    release = read_notebook(COURSE.release_notebook(COURSE.assignment("masks"), COURSE.assignment("masks").notebooks[0]))
    submitted = read_notebook(COURSE.release_notebook(COURSE.assignment("masks"), COURSE.assignment("masks").notebooks[0]))
    for cell in submitted.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") in ("demo_causal_mask_plot", "given_attention"):
            cell.source += "\nprint('mine')"
    assert release_edits(submitted, release) == [
        "edited the read-only cell given_attention (restored for grading)",
        "edited the read-only cell demo_causal_mask_plot (skipped when grading)"]
