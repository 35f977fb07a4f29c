"""make bench: grade one class with `nbgrader autograde` and with `make grade`, side by side.

Builds a class in nbgrader's layout (34 students x every assignment of course.yml: perfect,
untouched, and the catalogue's realistic mistakes), then grades exactly that folder with this
grader, with `nbgrader autograde` (every assignment, in nbgrader's own course folder), and with
this grader again, and prints seconds per notebook, their ratio and the peak memory (resident
set of the whole process tree) of each, beside the floor: the time the hidden checks themselves
took (recorded per notebook by the grader), spread over the cores.  The newest assignments, whose
hidden checks measure memory and count work, are also given on their own (nbgrader's seconds are
its own run of each assignment; this grader's are its wall time shared out by the seconds it
recorded per notebook).  Then the spread of the measured memory of honest answers: the memory tests
of the reference and of a correct variant written with einsum, run --spread times each in fresh
children while another process keeps a core busy.  The figures also go to bench-results.json (or
--json).  Last, the sample class through a one-node Slurm cluster started on this machine, with 1, 2
and 4 shards, beside one machine (--only-slurm: that part alone).

    .venv/bin/python -m tests.bench [--students 34] [--jobs N] [--spread 20] [--keep DIR] [--only-slurm]
"""

import argparse
from collections import defaultdict
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from tests.catalogue import MISTAKES
from tests.notebooks import COURSE, ROOT, make_submission, solution_answers

PERFECT, UNTOUCHED = 8, 6   # students 0-7 perfect, 8-13 untouched, the rest realistic mistakes


def build_class(submitted, students):
    mistakes = {assignment.id: [m for m in MISTAKES if m.exercise in {e.id for e in assignment.exercises}]
                for assignment in COURSE.assignments}
    for index in range(students):
        student = f"student{index:03d}"
        for assignment in COURSE.assignments:
            answers = solution_answers(assignment.id)
            if index < PERFECT:
                chosen = answers
            elif index < PERFECT + UNTOUCHED:
                chosen = {}
            else:
                mistake = mistakes[assignment.id][(index - PERFECT - UNTOUCHED) % len(mistakes[assignment.id])]
                chosen = {**answers, mistake.exercise: mistake.code}
            make_submission(assignment.id, chosen, submitted / student / assignment.id)
    return sum(1 for _ in submitted.rglob("*.ipynb"))


class PeakMemory:
    """Samples the resident memory of a process and all its descendants."""

    def __init__(self, process):
        self.process, self.peak, self.running = psutil.Process(process.pid), 0, True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self):
        while self.running:
            try:
                tree = [self.process] + self.process.children(recursive=True)
                total = 0
                for member in tree:
                    try:
                        total += member.memory_info().rss
                    except psutil.Error:
                        pass
                self.peak = max(self.peak, total)
            except psutil.Error:
                return
            time.sleep(0.1)

    def stop(self):
        self.running = False
        self.thread.join()
        return self.peak


def timed(command, cwd, log, failures_allowed=False):
    """(seconds, peak memory) of a command; failures_allowed: a nonzero exit is noted in the log, not
    fatal (nbgrader autograde exits 1 when the kernel of one submission dies, and grades the others)."""
    started = time.monotonic()
    with open(log, "a") as handle:
        process = subprocess.Popen(command, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
        memory = PeakMemory(process)
        code = process.wait()
        peak = memory.stop()
    if code != 0 and failures_allowed:
        print(f"note: {' '.join(map(str, command[2:4]))} exited {code} (a submission it could not grade; "
              f"see {log})", flush=True)
    elif code != 0:
        raise SystemExit(f"error: {' '.join(map(str, command))} failed (exit {code}); see {log}")
    return time.monotonic() - started, peak


def ours(work, out, jobs, log):
    return timed([sys.executable, "-m", "autograder", "grade-class", "--submitted", work / "submitted",
                  "--out", out, "--db", f"sqlite:///{out / 'gradebook.db'}", "--jobs", str(jobs), "--force"],
                 ROOT, log)


def nbgrader_course(work):
    """nbgrader's own course folder: the same solutions, released by nbgrader, the same submissions."""
    course = work / "nbgrader"
    shutil.copytree(ROOT / "solutions", course / "solutions")
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    for assignment in COURSE.assignments:
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment.id, "--force",
                        "--log-level=ERROR"], cwd=course, check=True, capture_output=True,
                       env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    (course / "submitted").symlink_to(work / "submitted")
    return course


def nbgrader_autograde(course, log):
    """(seconds in all, peak memory, seconds per assignment)."""
    per_assignment, peak = {}, 0
    for assignment in COURSE.assignments:
        seconds, memory = timed([sys.executable, "-m", "nbgrader", "autograde", assignment.id, "--force",
                                 "--log-level=ERROR", "--ExecutePreprocessor.timeout=60"], course, log,
                                failures_allowed=True)
        per_assignment[assignment.id] = seconds
        peak = max(peak, memory)
    return sum(per_assignment.values()), peak, per_assignment


def recorded_seconds(out):
    """assignment id -> the seconds this grader recorded for its notebooks (loading and checks)."""
    found = defaultdict(float)
    for path in Path(out).glob("results/*/*/grade.json"):
        record = json.loads(path.read_text())
        found[path.parent.name] += sum(nb.get("load_seconds", 0.0) + nb.get("suite_seconds", 0.0)
                                       for nb in record["notebooks"])
    return found


NEWEST = 3  # the assignments given on their own: the last three, whose checks measure memory and count work


def newest_assignments(notebooks_per_assignment, theirs, ours_wall, recorded):
    """[(assignment, nbgrader s/notebook, ours s/notebook, ratio)] for the newest assignments."""
    total = sum(recorded.values()) or 1.0
    rows = []
    for assignment in COURSE.assignments[-NEWEST:]:
        count = notebooks_per_assignment
        mine = ours_wall * recorded.get(assignment.id, 0.0) / total / count
        their = theirs[assignment.id] / count
        rows.append((assignment.id, round(their, 3), round(mine, 3), round(their / mine, 1) if mine else None))
    return rows


def memory_spread(runs):
    """The charged memory of honest answers' measured calls, `runs` times each, with a core kept busy."""
    import statistics
    from autograder.harness.context import Student
    from autograder.student import Cell, StudentProcess, Worker
    from autograder.suites import helpers as A
    from tests.catalogue import VARIANTS

    answers = solution_answers("flash_attention")
    einsum = next(v.code for v in VARIANTS if v.exercise == "tiled_attention" and "einsum" in v.code)
    honest = {"reference": answers["tiled_attention"], "einsum variant": einsum}
    q, k, v, out, lse = A.memory_reference(12)
    cq, ck, cv, c_out, c_lse = A.memory_reference(12, causal=True)
    bq, bk, bv, d_out, b_out, b_lse, *_ = A.memory_gradients(20)
    matrix = A.MEMORY_N * A.MEMORY_N * 4
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    rows = []
    try:
        with Worker(COURSE.limits) as worker:
            worker.start()
            for name, code in honest.items():
                cells = [Cell("imports", "import math\nimport torch\n"), Cell("tiled_attention", code),
                         Cell("tiled_backward", answers["tiled_backward"])]
                with StudentProcess(worker, cells, COURSE.limits) as process:
                    student = Student(process)
                    for function, args, tensors in (
                            ("flash_attention", (q, k, v, False, A.MEMORY_BLOCK, A.MEMORY_BLOCK), (q, k, v, out, lse)),
                            ("flash_attention", (cq, ck, cv, True), (cq, ck, cv, c_out, c_lse)),   # default blocks
                            ("flash_attention_backward", (bq, bk, bv, b_out, b_lse, d_out, False, A.MEMORY_BLOCK,
                                                          A.MEMORY_BLOCK), (bq, bk, bv, d_out, b_out, b_lse, bq, bk, bv))):
                        if function == "flash_attention_backward" and name != "reference":
                            continue
                        allowed = A.RUNTIME_BYTES + matrix // 4 + 3 * sum(t.numel() * t.element_size() for t in tensors)
                        peaks = [student.call(function, *args, measure_memory=True)["peak_memory"].bytes / 2**20
                                 for _ in range(runs)]
                        rows.append({"answer": name, "function": function + ("(causal)" if args[3] is True else ""),
                                     "runs": runs, "min_mib": round(min(peaks), 1),
                                     "median_mib": round(statistics.median(peaks), 1), "max_mib": round(max(peaks), 1),
                                     "allowed_mib": round(allowed / 2**20, 1), "accounting": worker.accounting.describe()
                                     if worker.accounting else worker.accounting_problem})
    finally:
        busy.kill()
        busy.wait()
    return rows


def floor_seconds(out):
    """The hidden checks' own time, summed over notebooks (the grader records it per notebook)."""
    total = 0.0
    for path in Path(out).glob("results/*/*/grade.json"):
        record = json.loads(path.read_text())
        total += sum(nb.get("suite_seconds", 0.0) for nb in record["notebooks"])
    return total


def integrity_seconds(students=300):
    """The similarity search of the integrity report on a synthetic class: every catalogue answer
    (mistakes, variants) handed in by students/len(answers) students each, names renamed per student."""
    import random
    import re
    from autograder.integrity import similar_pairs, stubs
    from tests.catalogue import MISTAKES, VARIANTS

    rng = random.Random(0)
    pool = defaultdict(list)
    for entry in [*MISTAKES, *VARIANTS]:
        pool[entry.exercise].append(entry.code)
    answers = {}
    for exercise, codes in pool.items():
        answers[exercise] = {}
        for index in range(students):
            code = rng.choice(codes)
            for name in set(re.findall(r"\b(scores|weights|mask|out|x|q|k|v)\b", code)):
                code = re.sub(rf"\b{name}\b", f"{name}_{index % 7}", code)
            answers[exercise][f"s{index:03d}"] = code
    started = time.perf_counter()
    pairs = similar_pairs(answers, stubs(COURSE))
    return time.perf_counter() - started, len(answers), len(pairs)


def slurm_runs(work, shard_counts=(1, 2, 4)):
    """The sample class graded on this machine (grade-class, one job per core) and through a one-node
    Slurm cluster started here (tests/slurm_cluster.py) with 1, 2 and 4 shards (grade-slurm --wait, the
    cores shared out among the shards); and a run whose one submission leaves the other shards empty: what a shard costs
    on its own (Slurm starting the task, Python, torch and the sandbox check).  None where no cluster
    can be started (not root, slurm-wlm or munge missing)."""
    from tests import slurm_cluster
    from tests.sample_class import SUBMITTED
    if slurm_cluster.why_not():
        return None

    def run(name, *args, env=None):
        started = time.perf_counter()
        process = subprocess.run([sys.executable, "-m", "autograder", *args, "--submitted", str(SUBMITTED),
                                  "--out", str(work / name), "--db", f"sqlite:///{work / name}.db",
                                  "--autograded", str(work / f"{name}-autograded")],
                                 cwd=ROOT, env=env, capture_output=True, text=True)
        if process.returncode != 0:
            raise RuntimeError(f"{name}: {process.stderr.strip()}")
        return round(time.perf_counter() - started, 1)

    figures = {"one_machine_seconds": run("one-machine", "grade-class")}
    with slurm_cluster.cluster() as env:
        for count in shard_counts:
            figures[f"slurm_{count}_shards_seconds"] = run(f"slurm-{count}", "grade-slurm", "--shards", str(count),
                                                           "--jobs", str(max(1, os.cpu_count() // count)),
                                                           "--wait", "--poll", "0.5", env=env)
        figures["slurm_shard_overhead_seconds"] = round(run(
            "slurm-overhead", "grade-slurm", "--shards", "4", "--wait", "--poll", "0.5", "--student", "ada_perfect",
            "--assignment", "masks", env=env) / 2, 1)   # 4 shards on 2 cores: two rounds of tasks
    return figures


def print_slurm(figures):
    if figures is None:
        print("sample class through Slurm: skipped (no one-node cluster can be started here)")
        return
    shards = "   ".join(f"{key.split('_')[1]} shard(s) {value:.1f} s" for key, value in figures.items()
                       if key.startswith("slurm_") and key.endswith("shards_seconds"))
    print(f"sample class through Slurm (one node, 2 cores): one machine {figures['one_machine_seconds']:.1f} s   "
          f"{shards}   one shard's own cost {figures['slurm_shard_overhead_seconds']:.1f} s")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=34)
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--json", default=str(ROOT / "bench-results.json"))
    parser.add_argument("--spread", type=int, default=20, help="runs of each honest answer's memory tests")
    parser.add_argument("--keep", default=None, help="build the class here and keep it")
    parser.add_argument("--only-slurm", action="store_true", help="only the sample class through Slurm")
    args = parser.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.only_slurm:
        print_slurm(slurm_runs(work))
        return 0
    log = work / "bench.log"
    notebooks = build_class(work / "submitted", args.students)
    print(f"class: {notebooks} notebooks ({args.students} students x {len(COURSE.assignments)} assignments) "
          f"in {work / 'submitted'}", flush=True)
    course = nbgrader_course(work)

    ours_first, ours_first_peak = ours(work, work / "ours-1", args.jobs, log)
    print(f"make grade (1/2):    {ours_first:7.1f} s", flush=True)
    theirs, theirs_peak, theirs_per_assignment = nbgrader_autograde(course, log)
    print(f"nbgrader autograde:  {theirs:7.1f} s", flush=True)
    ours_second, ours_second_peak = ours(work, work / "ours-2", args.jobs, log)
    print(f"make grade (2/2):    {ours_second:7.1f} s", flush=True)

    ours_seconds = (ours_first + ours_second) / 2
    floor = floor_seconds(work / "ours-2") / args.jobs
    figures = {
        "notebooks": notebooks, "jobs": args.jobs, "sandbox": COURSE.limits.sandbox,
        "nbgrader_seconds_per_notebook": round(theirs / notebooks, 4),
        "ours_seconds_per_notebook": round(ours_seconds / notebooks, 4),
        "ratio": round(theirs / ours_seconds, 1),
        "floor_seconds_per_notebook": round(floor / notebooks, 4),
        "nbgrader_peak_memory_mb": round(theirs_peak / 2**20),
        "ours_peak_memory_mb": round(max(ours_first_peak, ours_second_peak) / 2**20),
        "runs_seconds": {"ours": [round(ours_first, 1), round(ours_second, 1)], "nbgrader": round(theirs, 1)},
    }
    print()
    print(f"{'':24}{'s / notebook':>14}{'peak memory':>14}")
    print(f"{'nbgrader autograde':24}{figures['nbgrader_seconds_per_notebook']:>14.3f}"
          f"{figures['nbgrader_peak_memory_mb']:>11} MB")
    print(f"{'make grade':24}{figures['ours_seconds_per_notebook']:>14.3f}{figures['ours_peak_memory_mb']:>11} MB"
          f"   ({args.jobs} jobs, sandbox {figures['sandbox']})")
    print(f"{'floor (hidden checks)':24}{figures['floor_seconds_per_notebook']:>14.3f}")
    print(f"\nratio: {figures['ratio']}x faster than nbgrader autograde")
    newest = newest_assignments(args.students, theirs_per_assignment, ours_second, recorded_seconds(work / "ours-2"))
    figures["newest_assignments"] = [dict(zip(("assignment", "nbgrader_s_per_notebook", "ours_s_per_notebook",
                                              "ratio"), row)) for row in newest]
    print(f"\nthe newest {NEWEST} assignments on their own (s / notebook):")
    for assignment, their, mine, ratio in newest:
        print(f"  {assignment:20} nbgrader {their:6.3f}   make grade {mine:6.3f}   {ratio}x")
    if args.spread:
        figures["memory_spread"] = memory_spread(args.spread)
        print(f"\nmeasured memory of honest answers, {args.spread} fresh children each, one core kept busy:")
        for row in figures["memory_spread"]:
            print(f"  {row['function']:26} {row['answer']:15} min {row['min_mib']:5.1f}  median {row['median_mib']:5.1f}"
                  f"  max {row['max_mib']:5.1f} MiB   allowed {row['allowed_mib']:.1f} MiB")
        print(f"  ({figures['memory_spread'][0]['accounting']})")
    seconds, exercises, pairs = integrity_seconds()
    figures["integrity_300_students_seconds"] = round(seconds, 1)
    print(f"integrity report: 300 students x {exercises} exercises compared in {seconds:.1f} s ({pairs} pairs flagged)")
    figures["slurm"] = slurm_runs(work / "slurm")
    print_slurm(figures["slurm"])
    Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    print(f"figures: {args.json}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
