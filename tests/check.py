"""make check EXERCISE=id: an exercise author's loop, in seconds rather than a whole `make test`.

Runs the released notebook as a student runs it, with the reference answers in, up to the
exercise's visible check (a cell that fails there fails the check).  Then grades, as one small class
with the command instructors run (`grade-class`): the reference solution, the released stub, and
every catalogue entry of the exercise (its mistakes, correct alternatives, degenerate answers and
answers that game a measured point), and the value filter's trivial answers (tests/value_filter.py).
Prints one line per answer with its points and whether it graded as the catalogue says, and exits 1
when any did not.  tests/test_catalogue.py judges the whole catalogue with the same functions.

    .venv/bin/python -m tests.check sdpa [--keep DIR]
"""

import argparse
import functools
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from autograder.sandbox.jail import kernel_device
from tests.catalogue import DEGENERATE_SHARE, DEGENERATES, GAMING, MISTAKES, ALTERNATIVES, cause_text
from tests.catalogue.entries import on_device
from tests.conftest import run_grader
from tests.notebooks import COURSE, ROOT, make_submission, solution_answers

ASSIGNMENT_OF = {exercise.id: assignment.id for assignment in COURSE.assignments for exercise in assignment.exercises}
MAX_SCORE = {exercise.id: exercise.max_score for assignment in COURSE.assignments for exercise in assignment.exercises}
SUITE_TEXT = {exercise.id: exercise.suite.read_text() for assignment in COURSE.assignments
              for exercise in assignment.exercises}
KINDS = {"mistake": MISTAKES, "alternative": ALTERNATIVES, "degenerate": DEGENERATES, "gaming": GAMING}


def student_id(kind, entry):
    """The catalogue's student who hands in the entry: the n-th entry of an assignment in a group of
    exercises (exercise_groups: one grading run each) is answer_<group>_<n>'s, so that the class is few
    students with few assignments not handed in (each of which is still a row to grade and publish, as
    for a student per entry); ENTRY.txt in the submission folder names the entry."""
    return f"answer_{_group_of()[entry.exercise]}_{_places()[kind, entry.exercise, entry.name]:03d}"


@functools.cache
def _places():
    """(kind, exercise, name) -> the entry's place among its group's entries of its assignment, in
    catalogue order."""
    counted, places = {}, {}
    for kind, entry in entries():
        key = _group_of()[entry.exercise], ASSIGNMENT_OF[entry.exercise]
        places[kind, entry.exercise, entry.name] = counted.get(key, 0)
        counted[key] = counted.get(key, 0) + 1
    return places


@functools.cache
def _group_of():
    """exercise id -> the index of its group among the whole catalogue's exercise_groups."""
    groups = exercise_groups(list(dict.fromkeys(entry.exercise for _, entry in entries())))
    return {exercise: index for index, group in enumerate(groups) for exercise in group}


def entries(exercise=None):
    """(kind, entry) for the whole catalogue, or one exercise's part of it."""
    return [(kind, entry) for kind, listed in KINDS.items() for entry in listed
            if exercise is None or entry.exercise == exercise]


@functools.cache
def needs(exercise):
    """The other exercises of its assignment whose answers an exercise's grading calls: those whose
    functions or classes its reference answer or its hidden suite names.  A catalogue entry is graded
    beside their reference answers and the released stubs of the rest, whose tests stop at once.
    Worked out once per exercise (it reads the solution notebook); callers copy what it returns."""
    assignment = ASSIGNMENT_OF[exercise]
    reference = solution_answers(assignment)
    mine = reference[exercise] + SUITE_TEXT[exercise]
    return {other: code for other, code in reference.items() if other != exercise
            and any(re.search(rf"\b{name}\b", mine) for name in re.findall(r"^(?:def|class) (\w+)", code, re.M))}


def exercise_groups(exercises):
    """The exercises in as few groups as a greedy colouring gives, no exercise in a group with one whose
    reference answer it is graded beside (needs), either way round: each group is one
    `grade-class --exercise` run, so that each entry's run grades its own exercise alone."""
    groups = []
    for exercise in exercises:
        group = next((group for group in groups if not any(other in needs(exercise) or exercise in needs(other)
                                                           for other in group)), None)
        if group is None:
            groups.append(group := [])
        group.append(exercise)
    return groups


def grade_entries(chosen, root, extra=(), jobs=0):
    """Grade the chosen (kind, entry) pairs, and extra (student, assignment, answers) submissions, into
    one results folder under root, with `jobs` grading processes (0: grade-class's default, one per core).
    The entries are graded with the command instructors run, one `grade-class --exercise` run per group
    of exercise_groups, so that an entry's grading runs its own exercise's tests and not those of the
    reference answers beside it; the extra submissions are graded on every chosen exercise (whole when
    no entry is chosen).  Returns the folder of results."""
    exercises = list(dict.fromkeys(entry.exercise for _, entry in chosen))
    groups = sorted({_group_of()[exercise] for exercise in exercises})
    runs = [([e for e in exercises if _group_of()[e] == group],
             [(kind, entry) for kind, entry in chosen if _group_of()[entry.exercise] == group], []) for group in groups]
    if extra and len(runs) == 1:
        runs[0][2].extend(extra)
    elif extra:
        runs.append((exercises, [], list(extra)))
    for index, (group, pairs, others) in enumerate(runs):
        submitted = root / f"submitted-{index}"
        for kind, entry in pairs:
            assignment = ASSIGNMENT_OF[entry.exercise]
            answers = {**needs(entry.exercise), entry.exercise: entry.code}
            folder = submitted / student_id(kind, entry) / assignment
            make_submission(assignment, answers, folder)
            (folder / "ENTRY.txt").write_text(f"{kind} of {entry.exercise}: {entry.name}\n")
        for student, assignment, answers in others:
            make_submission(assignment, answers, submitted / student / assignment)
        chosen_only = [option for exercise in group for option in ("--exercise", exercise)]
        process = run_grader("grade-class", *(chosen_only or ["--db", f"sqlite:///{root / 'gradebook.db'}"]),
                             "--jobs", jobs, "--submitted", submitted, "--out", root / "out", timeout=3000)
        if process.returncode != 0:
            raise RuntimeError(process.stderr)
    return root / "out" / "results"


def exercise_results(results, student, exercise):
    """(the exercise's test results, the notes at the top of the exercise) of one graded student."""
    path = results / student / ASSIGNMENT_OF[exercise] / "results.json"
    result = json.loads(path.read_text())
    tests = [test for test in result["tests"] if test["name"].split(":")[0] == exercise]
    notes = [part for part in result["output"].split("\n\n") if part.startswith(f"{exercise}: ")]
    return tests, "\n".join(notes)


def test_name(test):
    return test["name"].split(": ", 1)[1].removeprefix("test_")


def failed_tests(tests):
    """The names (without test_) of the tests that lost points."""
    return {test_name(test) for test in tests if test["score"] < test["max_score"]}


def judge(results, kind, entry, device="cpu"):
    """(points earned, what is wrong: '' when the entry graded as the catalogue says), where the
    kernels ran on `device` ("cpu": Triton's interpreter; "cuda": compiled for a GPU, where an entry
    may grade otherwise, as its on_gpu says)."""
    tests, notes = exercise_results(results, student_id(kind, entry), entry.exercise)
    earned = sum(test["score"] for test in tests)
    entry = on_device(entry, device)
    if entry is None:
        return earned, ""  # not judged on this device (the entry's on_gpu says why)
    if kind == "alternative":
        lost = [f"{test['name']}: {test.get('output', '')}" for test in tests if test["score"] < test["max_score"]]
        return earned, "\n".join(lost)
    if kind == "degenerate":
        if earned > DEGENERATE_SHARE * MAX_SCORE[entry.exercise]:
            return earned, f"earned more than {DEGENERATE_SHARE:.0%}"
        if notes.count("only its basic checks count") != 1:
            return earned, f"the feedback does not say once why it earns nothing:\n{notes}"
        return earned, ""
    failed = failed_tests(tests)
    if kind == "gaming":
        if failed != set(entry.loses):
            return earned, f"loses {sorted(failed)}, where the catalogue says {sorted(entry.loses)}"
        lost = [test for test in tests if test_name(test) in entry.loses and test["score"] > 0]
        feedback = "\n".join([notes] + [test.get("output", "") for test in tests if test_name(test) in entry.loses])
        if lost:
            return earned, f"earns part of {[test['name'] for test in lost]}"
        if entry.loses and entry.says not in feedback:   # (on a GPU some gaming cannot be seen)
            return earned, f"the feedback does not say {entry.says!r}:\n{feedback}"
        return earned, ""
    tolerated = set(entry.also_fails)
    if not failed:
        return earned, "full marks" if entry.fails else ""   # (on a GPU some mistakes cannot be seen)
    if not set(entry.fails) | tolerated <= {test_name(test) for test in tests}:
        return earned, "the catalogue names a test the exercise does not have"
    if not failed <= set(entry.fails) | tolerated:
        return earned, f"also fails {sorted(failed - set(entry.fails) - tolerated)}"
    feedback = "\n".join([notes] + [test.get("output", "") for test in tests if test["score"] < test["max_score"]])
    cause = cause_text(entry.exercise, entry.cause)
    if cause not in feedback:
        return earned, f"the feedback does not give its cause {entry.cause!r} ({cause!r}):\n{feedback}"
    others = {other.cause for other in MISTAKES if other.exercise == entry.exercise} - {entry.cause, *entry.also_named}
    wrong = [key for key in sorted(others) if cause_text(entry.exercise, key) in feedback
             and cause_text(entry.exercise, key) not in cause]
    if wrong:
        return earned, f"the feedback names other mistakes' causes {wrong}:\n{feedback}"
    return earned, ""


def device_problems(results, exercises, device, catalogue=True):
    """What of the exercises' grading is not as the catalogue says, where their kernels ran on `device`:
    the reference below full marks, the stub above the degenerate share, and (with catalogue) each
    entry judged (judge).  Empty when everything graded as said."""
    problems = []
    for exercise in exercises:
        full = MAX_SCORE[exercise]
        for student, must_be_full in (("reference", True), ("stub", False)):
            earned, wrong = exercise_points(results, student, exercise, full, must_be_full)
            if wrong:
                problems.append(f"{exercise}, {student}: {earned:g} / {full:g}, {wrong}")
        for kind, entry in entries(exercise) if catalogue else ():
            earned, wrong = judge(results, kind, entry, device)
            if wrong:
                problems.append(f"{exercise}, {kind} {entry.name!r}: {earned:g} / {full:g}, {wrong}")
    return problems


def exactly_as_allowed(results, mistakes=MISTAKES):
    """How many mistakes fail exactly the tests they are allowed to fail (the catalogue's precision)."""
    return sum(failed_tests(exercise_results(results, student_id("mistake", m), m.exercise)[0]) == set(m.fails)
               for m in mistakes)


def run_as_a_student(exercise, folder):
    """The released notebook of the exercise, with the reference answers in, run cell by cell as a
    student runs it (demos and training included) up to the exercise's visible check: "" when every
    cell ran, else the first failure in one line (a check cell that uses a library the notebook
    never imports, a statement cell that no longer runs)."""
    import nbformat
    from nbclient import NotebookClient
    assignment = COURSE.assignment(ASSIGNMENT_OF[exercise])
    notebook = next(nb for nb in assignment.notebooks if any(e.id == exercise for e in nb.exercises))
    path, = make_submission(assignment.id, solution_answers(assignment.id), folder, notebook.name)
    nb = nbformat.read(path, as_version=4)
    ids = [cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") for cell in nb.cells]
    if f"check_{exercise}" in ids:
        nb.cells = nb.cells[:ids.index(f"check_{exercise}") + 1]
    NotebookClient(nb, timeout=600, allow_errors=True, kernel_name="python3",
                   extra_arguments=["--IPKernelApp.log_level=ERROR"],
                   resources={"metadata": {"path": str(Path(path).parent)}}).execute()
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"number {index + 1}"
                message = (output.get("evalue") or "").strip().splitlines()
                return f"{output.get('ename')}: {message[0] if message else '(no message)'} (cell {name})"
    return ""


def todos(exercise):
    """Where the exercise's parts still say TODO (an untouched scaffold): ["path (n)", ...]."""
    assignment = COURSE.assignment(ASSIGNMENT_OF[exercise])
    notebook = next(nb for nb in assignment.notebooks if any(e.id == exercise for e in nb.exercises))
    suite = assignment.exercise(exercise).suite
    parts = (suite, ROOT / "tests" / "catalogue" / f"{exercise}.py", COURSE.source_notebook(assignment, notebook))
    return [f"{path.relative_to(ROOT)} ({path.read_text().count('TODO')})" for path in parts
            if path.exists() and "TODO" in path.read_text()]


def write_readme_table(root=ROOT):
    """The README's table of assignments written again from course.yml (autograder.readme), as every
    change the authoring loop allows needs (tests/test_docs.py checks it)."""
    from autograder import readme
    readme.main(root)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("exercise", choices=sorted(ASSIGNMENT_OF))
    parser.add_argument("--keep", help="keep the graded class in this folder")
    args = parser.parse_args(argv)
    started = time.monotonic()
    write_readme_table()   # points, dates or exercises changed in course.yml: the README's table follows
    root = Path(args.keep or tempfile.mkdtemp(prefix="check-"))
    assignment = ASSIGNMENT_OF[args.exercise]
    chosen = entries(args.exercise)
    results = grade_entries(chosen, root, [("reference", assignment, solution_answers(assignment)),
                                           ("stub", assignment, {})])
    full = MAX_SCORE[args.exercise]
    problems = 0
    left = todos(args.exercise)
    print(f"{'FAIL' if left else 'ok  '} no TODO left in the exercise's parts" +
          (f"\n       still to write: {', '.join(left)}" if left else ""))
    problems += bool(left)
    failure = run_as_a_student(args.exercise, root / "as-a-student")
    print(f"{'FAIL' if failure else 'ok  '} the released notebook, run as a student runs it with the reference "
          f"answers, up to check_{args.exercise}" + (f"\n       {failure}" if failure else ""))
    problems += bool(failure)
    rows = [("reference", "", *exercise_points(results, "reference", args.exercise, full, must_be_full=True)),
            ("stub", "", *exercise_points(results, "stub", args.exercise, full, must_be_full=False))]
    device = kernel_device()  # where an assignment's kernels ran (AUTOGRADER_KERNEL_DEVICE)
    rows += [(kind, entry.name, *judge(results, kind, entry, device)) for kind, entry in chosen]
    for kind, name, earned, wrong in rows:
        problems += bool(wrong)
        print(f"{'FAIL' if wrong else 'ok  '} {kind:10s} {earned:5g} / {full:g}  {name}")
        if wrong:
            print("       " + wrong.replace("\n", "\n       "))
    problems += value_filter(args.exercise)
    mistakes = [on_device(entry, device) for kind, entry in chosen if kind == "mistake"]
    mistakes = [entry for entry in mistakes if entry is not None]
    print(f"{args.exercise}: {len(rows)} answers graded in {time.monotonic() - started:.1f} s; "
          f"{exactly_as_allowed(results, mistakes)} of {len(mistakes)} mistakes fail exactly their properties; "
          f"{problems} not as the catalogue says")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    if not problems:   # the docs' counts follow the catalogue the author just checked
        from tests.catalogue.__main__ import main as write_counts
        write_counts()
    return 1 if problems else 0


def value_filter(exercise):
    """tests/value_filter.py over the exercise: its trivial answers (zeros, ones, an input passed through, the
    answer to other inputs, an earlier answer) each lose every value test.  Prints; returns 1 if not."""
    from tests.value_filter import KNOWN_WEAK, findings, run, value_tests, weak
    try:
        seen = run([exercise])
        said, seconds = findings(exercise, seen), seen.seconds
        known = sorted({test for test, *_ in weak(exercise, seen.graded.get(exercise, {}))
                        if (exercise, test) in KNOWN_WEAK})
    except ValueError as error:   # nothing in the reference answer to wrap
        said, seconds, known = [str(error)], 0.0, []
    print(f"{'FAIL' if said else 'ok  '} the value filter: {len(value_tests(exercise))} value tests, "
          f"{len(known)} weak and known ({seconds:.0f} s)"
          + "".join(f"\n       {sentence}" for sentence in said)
          + "".join(f"\n       known: {test}: {KNOWN_WEAK[exercise, test]}" for test in known))
    return 1 if said else 0


def exercise_points(results, student, exercise, full, must_be_full):
    tests, _ = exercise_results(results, student, exercise)
    earned = sum(test["score"] for test in tests)
    if must_be_full and earned < full:
        return earned, "the reference solution lost points"
    if not must_be_full and earned > DEGENERATE_SHARE * full:
        return earned, f"the untouched stub earned more than {DEGENERATE_SHARE:.0%}"
    return earned, ""


if __name__ == "__main__":
    sys.exit(main())
