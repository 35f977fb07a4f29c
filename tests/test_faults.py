"""Faults of the grader, injected: none of them becomes a student's score, and a run that did not finish
is finished by the next one to exactly the grades of a clean run.

Each test grades a few students of the sample class's `masks` (one small assignment) and then reads
every output: grades.csv, the wide export, the feedback, results.json and nbgrader's gradebook.
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from nbgrader.api import Gradebook

from autograder import push, render
from autograder.classrun.publish import wide_rows
from autograder import results
from autograder.results import GRADER_FAILED, SubmissionResult, NotebookResult, from_record, grader_failed, to_record
from tests.notebooks import COURSE, ROOT
from tests.sample_class import SUBMITTED

MASKS = COURSE.assignment("masks")
FULL = MASKS.max_score
STUDENTS = ("ada_perfect", "cara_no_scaling", "kim_mask_bugs")
# grade-class with a grading process per submission (SUBMISSIONS_PER_JOB = 1), so that a class of three
# is graded the way a large class is: by forked grading processes beside the run's own process.
LAUNCH = ("import sys, autograder.classrun.fanout as fanout; fanout.SUBMISSIONS_PER_JOB = 1; "
          "from autograder.__main__ import main; sys.exit(main(sys.argv[1:]))")


def grade_class(folder, students, *extra, popen=False, timeout=300, out=None):
    """grade-class of `students`' masks into folder/out (or `out`), with the gradebook in `folder`."""
    args = [sys.executable, "-c", LAUNCH, "grade-class", "--submitted", str(SUBMITTED), "--assignment", "masks",
            *[arg for student in students for arg in ("--student", student)],
            "--out", str(out or folder / "out"), "--db", f"sqlite:///{folder / 'gradebook.db'}",
            "--autograded", str(folder / "autograded"), "--no-service", *extra]
    if popen:
        return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def rows(folder):
    with open(Path(folder) / "out" / "grades.csv") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def gradebook(folder):
    """student -> (the submission's score, its cells' automatic scores) in nbgrader's gradebook."""
    with Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as book:
        return {submission.student.id: (submission.score, [grade.auto_score for notebook in submission.notebooks
                                                            for grade in sorted(notebook.grades, key=lambda g: g.name)])
                for submission in book.find_assignment("masks").submissions}


def feedback(folder, student):
    return (folder / "out" / "feedback" / student / "masks" / "feedback.md").read_text()


def outputs(folder):
    """Everything a run publishes, as text: to compare two runs."""
    out = folder / "out"
    files = {path.relative_to(out): path.read_bytes() for tree in ("feedback",) for path in (out / tree).rglob("*")
             if path.is_file()}
    files.update({Path(name): (out / name).read_bytes() for name in ("grades.csv", "grades_wide.csv")})
    return files, gradebook(folder)


def left_behind(folder):
    """Half-written files: temporary files of an atomic write, or records that do not parse."""
    found = [path for path in folder.rglob(".*.tmp")]
    for path in folder.rglob("grade.json"):
        try:
            json.loads(path.read_text())
        except ValueError:
            found.append(path)
    return found


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The three students graded by one run that nothing disturbed: what every other run must equal."""
    folder = tmp_path_factory.mktemp("clean")
    process = grade_class(folder, STUDENTS, "--jobs", "1")
    assert process.returncode == 0, process.stderr
    return folder


def test_the_clean_run_gives_each_student_their_score(clean):
    scores = {student: (row["final_score"], row["status"]) for student, row in rows(clean).items()}
    assert scores == {"ada_perfect": ("22", "graded"), "cara_no_scaling": ("22", "graded"), "kim_mask_bugs": ("14", "graded")}
    assert {student: score for student, (score, _) in gradebook(clean).items()} == \
        {student: float(row["final_score"]) for student, row in rows(clean).items()}


# -- what a fault is, in every output (no sandbox needed) --------------------------------------------

def faulted_result():
    notebook = MASKS.notebooks[0]
    result = SubmissionResult("ada_perfect", "masks", [grader_failed(notebook, "its sandbox failed: it died")])
    return from_record(json.loads(json.dumps(to_record(result, fingerprint="f"))))   # as grade.json keeps it


def test_a_fault_is_kept_in_its_record_and_is_no_score_anywhere(tmp_path):
    result = faulted_result()
    assert (result.faulted, result.status, result.fault) == (True, "grader fault", "masks: its sandbox failed: it died")
    row = render.csv_row(result)
    assert (row["score"], row["final_score"], row["late_penalty"], row["status"]) == ("", "", "", "grader fault")
    assert row["reason"] == "masks: the grader failed: its sandbox failed: it died"
    graded = SubmissionResult("ada_perfect", "attention_basics", [NotebookResult("attention_basics", [
        results.TestResult("by_hand", "t", 3.0, 3.0)])])
    wide, _ = wide_rows(COURSE, [result, graded])
    assert (wide[0]["masks"], wide[0]["attention_basics"], wide[0]["total"], wide[0]["percent"]) == ("", "3", "", "")
    for page in (render.markdown(result), render.html_page(result)):
        assert "Not graded yet" in page and "it will be graded again" in page and "/ 22" not in page.split("(")[0]
        assert "0 / 22" not in page and "sandbox" not in page   # the instructor's reason stays the instructor's
    state, said = push.status_of(result)   # grading on push: the commit's status in the student's repository
    assert state == "error" and "graded again" in said and "sandbox" not in said and "0 /" not in said
    points, text = render.cell_text(result.notebooks[0], "causal_mask", None)
    assert points is None and "not graded yet" in text
    path = tmp_path / "results.json"
    path.write_text("{}")   # an earlier result: a fault leaves none (Gradescope: the autograder failed)
    render.write_gradescope(result, path)
    assert not path.exists()


def test_a_record_written_before_faults_were_kept_is_read_as_the_fault_it_was():
    record = to_record(faulted_result())
    nb = record["notebooks"][0]
    del nb["fault"]
    nb["reason"], nb["flags"] = "the grader could not run; your instructor has been told", \
        ["masks.ipynb: the grader failed: its sandbox failed (no answer in time); grade it again"]
    result = from_record(record)
    assert result.faulted and result.notebooks[0].flags == [] and result.notebooks[0].reason == GRADER_FAILED
    assert result.fault == "masks: its sandbox failed (no answer in time); grade it again"


def test_the_grading_process_running_out_of_memory_is_a_fault_not_a_crash_of_the_students(monkeypatch):
    """Memory exhausted on the grader's side (a MemoryError while the submission's process starts, as a
    full machine gives) is the grader's fault, said for the instructor."""
    from autograder.grading import Grader
    from autograder.sandbox import student
    from autograder.variants import Variants

    def exhausted(self):
        raise MemoryError("cannot allocate memory")
    monkeypatch.setattr(student.StudentProcess, "start", exhausted)
    idle = type("Idle", (), {"sandbox": None})()
    folder = SUBMITTED / "ada_perfect" / "masks"
    result = Grader(COURSE, idle, None, Variants.of(COURSE)).grade_notebook(
        MASKS, MASKS.notebooks[0], folder / "masks.ipynb", folder, "ada_perfect")
    assert result.fault.startswith("MemoryError: cannot allocate memory") and result.reason == GRADER_FAILED
    assert result.score == 0 and SubmissionResult("ada_perfect", "masks", [result]).status == "grader fault"


# -- faults injected into a run --------------------------------------------------------------------

def kill_sandboxes(process, log):
    """SIGKILL a sandbox of the run `process` (its process group) while it runs a submission (its warm
    worker has a child): in the run's first attempt, and again once `log` says it grades the fault
    again; the pids killed."""
    killed = []

    def sandboxes():
        try:   # the run's children that start a sandbox (each in a process group of its own)
            return [top for top in psutil.Process(process.pid).children() if top.name() in ("bwrap", "setpriv", "unshare")]
        except psutil.Error:
            return []

    def busy(top):
        try:
            return any(proc.name().startswith("python") and any(child.name().startswith("python") for child in proc.children())
                       for proc in top.children(recursive=True))   # a submission's child (not fc-list, say)
        except psutil.Error:
            return False

    def armed():
        return not killed or (len(killed) == 1 and log.exists() and "grading again" in log.read_text())

    def watch():
        while len(killed) < 2 and process.poll() is None:
            for top in sandboxes() if armed() else []:
                if top.pid not in killed and busy(top):
                    os.killpg(top.pid, signal.SIGKILL)
                    killed.append(top.pid)
                    break
            time.sleep(0.05)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return killed, thread


@pytest.mark.slow
def test_a_sandbox_killed_mid_submission_is_a_fault_everywhere_and_the_next_run_grades_it(tmp_path, clean):
    """The sandbox dies under ada's submission twice (the run's attempt and its one retry): no score
    anywhere, each output says why or that it will be graded again; the next run grades her on its own."""
    process = grade_class(tmp_path, ["ada_perfect"], "--jobs", "1", popen=True)
    killed, watcher = kill_sandboxes(process, tmp_path / "out" / "grader.log")
    stdout, stderr = process.communicate(timeout=300)
    watcher.join()
    assert process.returncode == 0 and len(killed) == 2, stdout + stderr
    assert "Grader faults: 1 submission(s)" in stdout and "ada_perfect / masks: masks: its sandbox failed" in stdout
    row = rows(tmp_path)["ada_perfect"]
    assert (row["status"], row["score"], row["final_score"]) == ("grader fault", "", "")
    assert "its sandbox failed" in row["reason"]
    with open(tmp_path / "out" / "grades_wide.csv") as handle:
        assert next(csv.DictReader(handle))["masks"] == ""
    assert gradebook(tmp_path)["ada_perfect"] == (0.0, [None] * len(MASKS.exercises))   # no automatic score
    text = feedback(tmp_path, "ada_perfect")
    assert "Not graded yet" in text and "graded again" in text and "Score: not yet" in text and "0 / 22" not in text
    assert not (tmp_path / "out" / "results" / "ada_perfect" / "masks" / "results.json").exists()
    log = (tmp_path / "out" / "grader.log").read_text()
    assert "grading again what the grader failed on: ada_perfect/masks" in log

    again = grade_class(tmp_path, ["ada_perfect"], "--jobs", "1")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("1 submission(s) of 1 student(s) to grade")   # the fault does not count as done
    assert "ada_perfect/masks: grader fault -> 22" in again.stdout
    assert rows(tmp_path)["ada_perfect"] == rows(clean)["ada_perfect"]
    assert gradebook(tmp_path)["ada_perfect"] == gradebook(clean)["ada_perfect"]
    assert feedback(tmp_path, "ada_perfect") == feedback(clean, "ada_perfect")
    assert json.loads((tmp_path / "out" / "results" / "ada_perfect" / "masks" / "results.json").read_text())["score"] == FULL


def run_processes(process):
    try:
        return psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        return []


def runs_a_submission(processes):
    """Whether a warm worker (a python under bwrap) among `processes` has a submission's child."""
    for proc in processes:
        try:
            if proc.name().startswith("python") and proc.parent().name() == "bwrap" and \
                    any(child.name().startswith("python") for child in proc.children()):
                return True
        except psutil.Error:   # gone meanwhile
            continue
    return False


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["first record saved", "first submission in flight"])
def test_grade_class_killed_then_run_again_equals_a_clean_run(tmp_path, clean, moment):
    """SIGKILL of grade-class (its grading processes forked, sandboxes under way): nothing of it stays
    alive; while it runs, a second run into the same folder is refused naming it; the same command run
    again gives grades.csv, the wide export, the feedback and the gradebook of a clean run."""
    process = grade_class(tmp_path, STUDENTS, "--jobs", "2", popen=True)
    saved_at = tmp_path / "out" / "results"
    deadline = time.monotonic() + 240
    seen = set()
    while True:
        assert time.monotonic() < deadline and process.poll() is None, process.communicate()
        spawned = run_processes(process)
        seen |= set(spawned)
        saved = list(saved_at.glob("*/masks/grade.json"))
        if saved if moment == "first record saved" else runs_a_submission(spawned):
            break
        time.sleep(0.02)
    seen |= set(run_processes(process))
    if moment == "first record saved":
        second = grade_class(tmp_path, STUDENTS, "--jobs", "1")
        assert second.returncode == 2
        assert second.stderr.strip() == (f"error: another grading run (pid {process.pid}) is grading into "
                                          f"{tmp_path / 'out'}: wait for it to end, or stop it (kill {process.pid}) "
                                          "and run this again")
    process.kill()
    process.communicate()
    gone, alive = psutil.wait_procs(list(seen), timeout=20)
    assert alive == [], f"left running after the run was killed: {[(p.pid, p.name()) for p in alive]}"
    assert left_behind(tmp_path) == []

    again = grade_class(tmp_path, STUDENTS, "--jobs", "1")
    assert again.returncode == 0, again.stderr
    assert outputs(tmp_path) == outputs(clean)
    assert {student: row["final_score"] for student, row in rows(tmp_path).items()} == \
        {"ada_perfect": "22", "kim_mask_bugs": "14", "cara_no_scaling": "22"}


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 2 MiB, mounted for the test (root only), nearly filled by `filler`."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system for the output folder needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"no tmpfs can be mounted here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_the_output_folders_disk_full_is_one_line_no_half_file_and_no_score(small_disk, tmp_path, clean):
    """The output folder's disk fills up (its gradebook lies elsewhere): the run stops saying so in one
    line, leaves no half-written file and no score; once space is freed the same command grades."""
    folder = small_disk
    (folder / "filler").write_bytes(b"\0" * (2 * 1024 * 1024 - 48 * 1024))   # 48 KiB left: less than her feedback page (87 KB)
    process = grade_class(tmp_path, ["kim_mask_bugs"], "--jobs", "1", out=folder / "out")
    assert process.returncode == 2, process.stdout + process.stderr
    lines = process.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: cannot write to {folder / 'out'}: No space left on device. What was saved "
                                "before is kept whole and nothing was scored for it")
    assert [line for line in lines if line.startswith("error:")] == lines[-1:] and "Traceback" not in process.stderr
    assert left_behind(folder) == []
    assert not (folder / "out" / "results" / "kim_mask_bugs" / "masks" / "grade.json").exists()
    assert not (folder / "out" / "grades.csv").exists() or "kim_mask_bugs" not in (folder / "out" / "grades.csv").read_text()

    (folder / "filler").unlink()   # the instructor frees space and runs the same command again
    again = grade_class(tmp_path, ["kim_mask_bugs"], "--jobs", "1", out=folder / "out")
    assert again.returncode == 0, again.stderr
    assert rows(folder)["kim_mask_bugs"] == rows(clean)["kim_mask_bugs"]
    assert gradebook(tmp_path)["kim_mask_bugs"] == gradebook(clean)["kim_mask_bugs"]


def test_make_report_counts_faults_apart(tmp_path):
    """A fault is left out of the pass rates and the histogram, and listed in a section of its own."""
    from autograder.layout import Layout
    from autograder.report import write_report
    layout = Layout(tmp_path)
    notebook = MASKS.notebooks[0]
    graded = SubmissionResult("cara_no_scaling", "masks", [NotebookResult("masks", results.zero_results(
        notebook.exercises, "failed"))])
    fault = SubmissionResult("ada_perfect", "masks", [grader_failed(notebook, "the grading process stopped on it")])
    for result in (graded, fault):
        layout.save(result)
    render.write_grades_csv([fault, graded], layout.grades_csv)
    report = (write_report(tmp_path) / "report.md").read_text()
    assert "## Grader faults" in report and "- ada_perfect / masks: masks: the grader failed: the grading process " \
        "stopped on it" in report
    assert "1 graded submissions; mean 0.0 / 22" in report


def test_a_fault_that_repeats_on_unchanged_work_is_set_aside_until_the_work_changes_or_is_forced(tmp_path, monkeypatch):
    """A notebook the grader always fails on costs its grading twice in the run that meets it, once in the
    next (the same reason on the same work: set aside, not tried again), and nothing after that, until
    the work changes or the instructor forces it.  A fault with another reason is tried again."""
    from dataclasses import replace
    from autograder.classrun import fanout, run as class_run, tasks as selection
    from autograder.layout import Layout
    layout, tried, reason = Layout(tmp_path / "out"), [], ["its sandbox failed: it died"]

    def always_faults(course, layout, pending, jobs, on_done, meanwhile=lambda: None, classmates=(), pool=None):
        for task in pending:   # what the grading process saves for a submission it failed on
            tried.append(task.key)
            layout.save(SubmissionResult(task.student, "masks", [grader_failed(MASKS.notebooks[0], reason[0])]),
                        fingerprint=task.fingerprint, folder=task.folder)
    monkeypatch.setattr(fanout, "grade_pending", always_faults)

    def grading_run(force=False):
        tasks, pending, _ = selection.select_tasks(COURSE, SUBMITTED, layout, assignments=["masks"],
                                                   students=["kim_mask_bugs"], force=force)
        tried.clear()
        class_run.run(COURSE, layout, pending, 1, lambda task: None)
        return tasks, list(tried)
    tasks, first = grading_run()
    assert first == ["kim_mask_bugs/masks"] * 2 and not selection.set_aside_tasks(layout, tasks)   # once more
    reason[0] = "the grading process stopped on this submission"   # another reason: tried again, in full
    assert grading_run()[1] == ["kim_mask_bugs/masks"] * 2 and not selection.set_aside_tasks(layout, tasks)
    assert grading_run()[1] == ["kim_mask_bugs/masks"]          # the same reason again: set aside at once
    assert selection.set_aside_tasks(layout, tasks) == tasks
    assert grading_run()[1] == []                               # and nothing more, run after run
    row = render.csv_row(from_record(layout.read_record("kim_mask_bugs", "masks")))
    assert row["status"] == "grader fault" and row["score"] == ""
    assert row["reason"].startswith("masks: the grader failed: the grading process stopped on this submission (set aside")
    chosen = class_run.ClassRun(layout, tasks, [], [], results=[])
    said = render.class_report(chosen, SUBMITTED, "sqlite://").splitlines()
    assert [line for line in said if line.startswith("Set aside")] == [
        "Set aside for the instructor: 1 submission(s) with the same grader fault on unchanged work in two runs, "
        "not graded again until the work changes or FORCE=1: kim_mask_bugs/masks"]
    assert grading_run(force=True)[1] == ["kim_mask_bugs/masks"]   # forced: graded, and set aside again
    changed = [replace(task, fingerprint=task.fingerprint + " changed") for task in tasks]   # the work changed
    assert not selection.done(layout, changed[0]) and not selection.set_aside_tasks(layout, changed)
