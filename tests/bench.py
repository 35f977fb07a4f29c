"""make bench: grade one class with `nbgrader autograde` and with `make grade`, side by side.

Builds a class in nbgrader's layout (16 students x every assignment of course.yml, made like a real
class: 13 of the 16 hand in one of the catalogue's realistic mistakes, 2 a right answer, 1 the untouched
notebook; realistic_answers), then grades exactly that folder in alternating
rounds (A B A B: this grader, then nbgrader, --rounds times), each round on the same idle machine with
its load average printed beside it:

  this grader   every assignment on its own, as after its due date (one `grade-class --assignment`
                each): handed to the course's grading service (`make serve`, started for the bench
                unless one runs; each run waits until its sandboxes are started, as they are days
                apart), and again each graded on its own (--no-service: torch, the suites and the
                sandboxes started for each run); then the whole class in one run, handed to the
                service, and again on its own;
  nbgrader      `nbgrader autograde` of every assignment (in nbgrader's own course folder).

It prints the medians over the rounds: seconds per notebook of each assignment graded on its own and
their ratio, the whole class's (nbgrader's is the sum of its assignments), the peak memory (resident set
of the whole process tree) of each, and the floor: the time the hidden checks themselves took
(recorded per notebook by the grader), spread over the cores, with the grader's wall time over it, for
the whole class served (what grading costs beside its checks) and on its own (the run's start too).
Then the spread of the measured memory of honest answers: the memory tests of the reference and of a
correct alternative written with einsum, run --spread times each in fresh children while another process
keeps a core busy.  The figures also go to bench-results.json (or --json).  Last, the sample class
through a one-node Slurm cluster started on this machine, with 1, 2 and 4 shards, beside one machine
(--only-slurm: that part alone).

    .venv/bin/python -m tests.bench [--students 16] [--rounds 2] [--assignment ID ...] [--jobs N]
                                    [--spread 20] [--keep DIR] [--only-slurm]
"""

import argparse
from collections import defaultdict
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from autograder import service
from tests.catalogue import MISTAKES
from tests.notebooks import COURSE, ROOT, make_submission, solution_answers

def realistic_answers(assignment_id, index):
    """What student number `index` of a bench's class hands in for an assignment, as in a real class:
    every tenth untouched, every fifth right, the others one of the catalogue's realistic mistakes (13 of
    16 students, 80 of 100)."""
    exercises = {exercise.id for exercise in COURSE.assignment(assignment_id).exercises}
    mistakes = [mistake for mistake in MISTAKES if mistake.exercise in exercises]
    right = solution_answers(assignment_id)
    if index % 10 == 9:
        return {}
    if index % 5 == 4:
        return right
    mistake = mistakes[index % len(mistakes)]
    return {**right, mistake.exercise: mistake.code}


def build_class(submitted, students, assignments=None):
    """Every student hands in every assignment (or those given by id); returns the notebooks' count."""
    for index in range(students):
        for assignment in COURSE.assignments:
            if assignments is None or assignment.id in assignments:
                make_submission(assignment.id, realistic_answers(assignment.id, index),
                                submitted / f"student{index:03d}" / assignment.id)
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


def ours(work, out, jobs, log, assignment=None, served=False):
    """(seconds, peak memory) of grade-class on the class, or on one assignment of it; served: handed
    to the grading service (`make serve`), else graded on its own.  Either starts once the service is
    idle: after a served run it starts new spare sandboxes, which would otherwise take the cores from
    the next run."""
    wait_for_service()
    return timed([sys.executable, "-m", "autograder", "grade-class", "--submitted", work / "submitted",
                  "--out", out, "--db", f"sqlite:///{out / 'gradebook.db'}", "--jobs", str(jobs), "--force",
                  *(["--assignment", assignment] if assignment else []), *([] if served else ["--no-service"])],
                 ROOT, log)


def wait_for_service(timeout=300):
    """Until the course's grading service runs nothing and its spare sandboxes are all ready, as between
    two assignments' due dates."""
    if service.wait_idle(ROOT, timeout) is None:
        raise SystemExit("error: the grading service did not get ready (see bench.log)")


def start_service(jobs, log):
    """The course's grading service for the bench's served runs: one already running is used as it is."""
    if service.status(ROOT) is not None:
        return None
    with open(log, "a") as handle:
        process = subprocess.Popen([sys.executable, "-m", "autograder", "serve", "--jobs", str(jobs)], cwd=ROOT,
                                   stdout=handle, stderr=subprocess.STDOUT)
    wait_for_service()
    return process


def nbgrader_course(work, assignments):
    """nbgrader's own course folder: the same solutions, released by nbgrader, the same submissions."""
    course = work / "nbgrader"
    shutil.copytree(ROOT / "solutions", course / "solutions")
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    for assignment in assignments:
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force",
                        "--log-level=ERROR"], cwd=course, check=True, capture_output=True,
                       env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    (course / "submitted").symlink_to(work / "submitted")
    return course


def nbgrader_autograde(course, assignment, log):
    """(seconds, peak memory) of `nbgrader autograde` of one assignment."""
    return timed([sys.executable, "-m", "nbgrader", "autograde", assignment, "--force",
                  "--log-level=ERROR", "--ExecutePreprocessor.timeout=60"], course, log, failures_allowed=True)


def load_average():
    """The machine's load average over the last minute, as a round starts."""
    return round(os.getloadavg()[0], 2)


def round_ours(work, index, assignments, jobs, log):
    """One round of this grader: every assignment on its own, handed to the grading service and then
    graded on its own (each run starting torch and its sandboxes), then the whole class in one run."""
    figures = {"load_average": load_average(), "assignments": {}, "cold": {}}
    for assignment in assignments:
        seconds, _ = ours(work, work / f"ours-{index}-{assignment}", jobs, log, assignment, served=True)
        figures["assignments"][assignment] = round(seconds, 2)
    for assignment in assignments:
        seconds, _ = ours(work, work / f"cold-{index}-{assignment}", jobs, log, assignment)
        figures["cold"][assignment] = round(seconds, 2)
    out = work / f"served-{index}"
    figures["class_served"], _ = ours(work, out, jobs, log, served=True)
    figures["floor_served"] = floor_seconds(out) / jobs
    out = work / f"ours-{index}"
    figures["class"], figures["peak"] = ours(work, out, jobs, log)
    figures["floor"] = floor_seconds(out) / jobs
    return figures


def round_nbgrader(course, assignments, log):
    figures = {"load_average": load_average(), "assignments": {}, "peak": 0}
    for assignment in assignments:
        seconds, peak = nbgrader_autograde(course, assignment, log)
        figures["assignments"][assignment] = round(seconds, 2)
        figures["peak"] = max(figures["peak"], peak)
    figures["class"] = sum(figures["assignments"].values())
    return figures


def floor_seconds(out):
    """The hidden checks' own time, summed over notebooks (the grader records it per notebook)."""
    total = 0.0
    for path in Path(out).glob("results/*/*/grade.json"):
        record = json.loads(path.read_text())
        total += sum(nb.get("suite_seconds", 0.0) for nb in record["notebooks"])
    return total


def summary(rounds_ours, rounds_theirs, assignments, students, jobs):
    """The medians over the rounds: per assignment, the whole class, the floor."""
    def median(values):
        return statistics.median(values)
    per_assignment = []
    for assignment in assignments:
        mine = median([r["assignments"][assignment] for r in rounds_ours])
        cold = median([r["cold"][assignment] for r in rounds_ours])
        their = median([r["assignments"][assignment] for r in rounds_theirs])
        per_assignment.append({"assignment": assignment, "nbgrader_s_per_notebook": round(their / students, 3),
                               "ours_s_per_notebook": round(mine / students, 3), "ratio": round(their / mine, 1),
                               "cold_s_per_notebook": round(cold / students, 3), "cold_ratio": round(their / cold, 1)})
    notebooks = students * len(assignments)
    mine, their = median([r["class"] for r in rounds_ours]), median([r["class"] for r in rounds_theirs])
    served = median([r["class_served"] for r in rounds_ours])
    floor = median([r["floor"] for r in rounds_ours])
    floor_served = median([r["floor_served"] for r in rounds_ours])
    return {
        "students": students, "notebooks": notebooks, "jobs": jobs, "sandbox": COURSE.limits.sandbox,
        "rounds": [{"ours": a, "nbgrader": b} for a, b in zip(rounds_ours, rounds_theirs)],
        "per_assignment": per_assignment,
        "nbgrader_seconds_per_notebook": round(their / notebooks, 4),
        "ours_seconds_per_notebook": round(mine / notebooks, 4),
        "ratio": round(their / mine, 1),
        "served_seconds_per_notebook": round(served / notebooks, 4),
        "served_ratio": round(their / served, 1),
        "floor_seconds_per_notebook": round(floor / notebooks, 4),
        "overhead_over_floor": round(mine / floor, 2) if floor else None,
        "served_floor_seconds_per_notebook": round(floor_served / notebooks, 4),
        "served_overhead_over_floor": round(served / floor_served, 2) if floor_served else None,
        "nbgrader_peak_memory_mb": round(max(r["peak"] for r in rounds_theirs) / 2**20),
        "ours_peak_memory_mb": round(max(r["peak"] for r in rounds_ours) / 2**20),
    }


def print_summary(figures):
    print(f"\nmedians of {len(figures['rounds'])} rounds, {figures['students']} students, "
          f"{figures['jobs']} jobs, sandbox {figures['sandbox']}")
    print(f"{'each assignment on its own':28}{'nbgrader s/nb':>14}{'served s/nb':>13}{'ratio':>8}"
          f"{'no service s/nb':>17}{'ratio':>8}")
    for row in figures["per_assignment"]:
        print(f"  {row['assignment']:26}{row['nbgrader_s_per_notebook']:>14.3f}{row['ours_s_per_notebook']:>13.3f}"
              f"{row['ratio']:>7}x{row['cold_s_per_notebook']:>17.3f}{row['cold_ratio']:>7}x")
    print(f"{'the whole class, one run':28}{figures['nbgrader_seconds_per_notebook']:>14.3f}"
          f"{figures['served_seconds_per_notebook']:>13.3f}{figures['served_ratio']:>7}x"
          f"{figures['ours_seconds_per_notebook']:>17.3f}{figures['ratio']:>7}x")
    print(f"floor (the hidden checks' own time over {figures['jobs']} cores): the whole class served takes "
          f"{figures['served_overhead_over_floor']}x its floor ({figures['served_floor_seconds_per_notebook']:.3f} s/nb), "
          f"on its own {figures['overhead_over_floor']}x ({figures['floor_seconds_per_notebook']:.3f} s/nb)")
    print(f"peak memory: nbgrader {figures['nbgrader_peak_memory_mb']} MB, make grade "
          f"{figures['ours_peak_memory_mb']} MB")


def memory_spread(runs):
    """The charged memory of honest answers' measured calls, `runs` times each, with a core kept busy."""
    from autograder.harness.context import Student
    from autograder.sandbox.student import Cell, StudentProcess, Worker
    from autograder.suites.helpers import tiled
    from tests.catalogue import ALTERNATIVES

    answers = solution_answers("flash_attention")
    einsum = next(v.code for v in ALTERNATIVES if v.exercise == "tiled_attention" and "einsum" in v.code)
    honest = {"reference": answers["tiled_attention"], "einsum alternative": einsum}
    q, k, v, out, lse = tiled.memory_reference(12)
    cq, ck, cv, c_out, c_lse = tiled.memory_reference(12, causal=True)
    bq, bk, bv, d_out, b_out, b_lse, *_ = tiled.memory_gradients(20)
    matrix = tiled.MEMORY_N * tiled.MEMORY_N * 4
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
                            ("flash_attention", (q, k, v, False, tiled.MEMORY_BLOCK, tiled.MEMORY_BLOCK), (q, k, v, out, lse)),
                            ("flash_attention", (cq, ck, cv, True), (cq, ck, cv, c_out, c_lse)),   # default blocks
                            ("flash_attention_backward", (bq, bk, bv, b_out, b_lse, d_out, False, tiled.MEMORY_BLOCK,
                                                          tiled.MEMORY_BLOCK), (bq, bk, bv, d_out, b_out, b_lse, bq, bk, bv))):
                        if function == "flash_attention_backward" and name != "reference":
                            continue
                        allowed = tiled.RUNTIME_BYTES + matrix // 4 + 3 * sum(t.numel() * t.element_size() for t in tensors)
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


def integrity_seconds(students=300):
    """The similarity search of the integrity report on a synthetic class: every catalogue answer
    (mistakes, alternatives) handed in by students/len(answers) students each, names renamed per student."""
    import random
    import re
    from autograder.integrity import similar_pairs, stubs
    from tests.catalogue import MISTAKES, ALTERNATIVES

    rng = random.Random(0)
    pool = defaultdict(list)
    for entry in [*MISTAKES, *ALTERNATIVES]:
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
    parser.add_argument("--students", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of A (this grader) then B (nbgrader)")
    parser.add_argument("--assignment", action="append", help="only these assignments (default: all)")
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
    assignments = args.assignment or [assignment.id for assignment in COURSE.assignments]
    for assignment in assignments:
        COURSE.assignment(assignment)
    log = work / "bench.log"
    notebooks = build_class(work / "submitted", args.students, assignments)
    print(f"class: {notebooks} notebooks ({args.students} students x {len(assignments)} assignments) "
          f"in {work / 'submitted'}", flush=True)
    course = nbgrader_course(work, assignments)
    rounds_ours, rounds_theirs = [], []
    server = start_service(args.jobs, log)
    for index in range(1, args.rounds + 1):
        rounds_ours.append(round_ours(work, index, assignments, args.jobs, log))
        print(f"round {index} A  make grade  (load average {rounds_ours[-1]['load_average']:.2f}): each assignment "
              f"{sum(rounds_ours[-1]['assignments'].values()):6.1f} s served, "
              f"{sum(rounds_ours[-1]['cold'].values()):6.1f} s on its own; the class in one run "
              f"{rounds_ours[-1]['class_served']:6.1f} s served, {rounds_ours[-1]['class']:6.1f} s on its own",
              flush=True)
        rounds_theirs.append(round_nbgrader(course, assignments, log))
        print(f"round {index} B  nbgrader    (load average {rounds_theirs[-1]['load_average']:.2f}): each assignment "
              f"{rounds_theirs[-1]['class']:6.1f} s", flush=True)
    if server is not None:
        server.terminate()
        server.wait(timeout=60)
    figures = summary(rounds_ours, rounds_theirs, assignments, args.students, args.jobs)
    print_summary(figures)
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
