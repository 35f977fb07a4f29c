"""Grade a class on a Slurm cluster: one array task per shard, then a merge that waits for them.

    submit: sbatch --array=1-N   each task runs grade-class --shard K/N into <out>/shards/shard-K
                                 (its log: <out>/slurm/shard-K.log)
            sbatch --dependency=afterok:<array> --kill-on-invalid-dep=yes
                                 merge of the N shard folders into <out> and the course's gradebook
    wait:   squeue until both jobs have left the queue; then each shard's shard.json and the merge
            job's state (scontrol) say what happened, shard by shard

Slurm's own commands do all the scheduling; this module only writes two small job scripts and reads
what the commands print.  A shard that dies (cancelled, out of time, node lost) keeps every
submission it finished, and writes no shard.json: the merge is cancelled by Slurm (its dependency
can never be met) and the same command, run again, grades only what is missing and merges.
"""

import hashlib
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course import CourseError
from autograder.layout import Layout

DEFAULTS = {"time": "02:00:00", "partition": "", "account": "", "mem": "", "sbatch_options": []}


@dataclass
class Plan:
    """One grading run on Slurm: what to grade, where, and what to ask the scheduler for."""
    course_path: Path
    submitted: Path
    out: Path
    db: str
    autograded: Path
    shards: int
    jobs: int = 1
    partition: str = ""
    account: str = ""
    time: str = DEFAULTS["time"]
    mem: str = ""                 # per task; default: what `jobs` grading processes may use
    sbatch_options: list = field(default_factory=list)
    assignments: list = field(default_factory=list)
    students: list = field(default_factory=list)
    force: bool = False
    python: str = sys.executable

    @property
    def scripts(self):
        return self.out / "slurm"

    def shard_folder(self, k):
        return self.out / "shards" / f"shard-{k}"

    def shard_log(self, k):
        return self.scripts / f"shard-{k}.log"

    @property
    def merge_log(self):
        return self.scripts / "merge.log"

    @property
    def job_name(self):
        """One name per output folder, so that a second run into the same folder can be refused."""
        return "grade-" + hashlib.sha256(str(self.out.resolve()).encode()).hexdigest()[:10]


def plan(course, *, submitted, out, db, autograded, shards, jobs=1, options=None, **selection):
    """A Plan from the command's arguments, with course.yml's `slurm:` section for what they leave out."""
    if shards < 1 or jobs < 1:
        raise CourseError("--shards and --jobs must be at least 1")
    settings = {**DEFAULTS, **course.slurm, **{key: value for key, value in (options or {}).items() if value}}
    mem = settings["mem"] or f"{jobs * (course.limits.memory_mb + 1024)}M"
    return Plan(course_path=Path(course.path or course.root / "course.yml").resolve(), submitted=Path(submitted).resolve(), out=Path(out).resolve(),
                db=db, autograded=Path(autograded).resolve(), shards=shards, jobs=jobs,
                partition=settings["partition"], account=settings["account"], time=settings["time"], mem=mem,
                sbatch_options=list(settings["sbatch_options"]), **selection)


def _command(tool):
    found = shutil.which(tool)
    if not found:
        raise CourseError(f"{tool} is not on PATH: run this on a Slurm login node (or use make grade on one machine)")
    return found


def _run(tool, *args):
    """A Slurm command's stdout; CourseError with its own one-line error when it refuses."""
    process = subprocess.run([_command(tool), *args], capture_output=True, text=True)
    if process.returncode != 0:
        lines = [line.strip() for line in (process.stderr or process.stdout).splitlines() if line.strip()]
        raise CourseError(f"{tool} refused: {lines[-1] if lines else f'exit status {process.returncode}'}")
    return process.stdout


def shard_script(plan):
    grade = [plan.python, "-m", "autograder", "--course", str(plan.course_path), "grade-class",
             "--submitted", str(plan.submitted), "--jobs", str(plan.jobs),
             "--no-service"]  # a shard grades within its own job's resources, never in a service elsewhere
    for assignment in plan.assignments:
        grade += ["--assignment", assignment]
    for student in plan.students:
        grade += ["--student", student]
    if plan.force:
        grade.append("--force")
    shard = shlex.quote(str(plan.out / "shards")) + '/shard-"$k"'
    return ("#!/bin/bash\n"
            "# One shard of the class, run by Slurm as array task K (written by grade-slurm).\n"
            "set -euo pipefail\n"
            "k=$SLURM_ARRAY_TASK_ID\n"
            f"shard={shard}\n"
            f"exec {shlex.join(grade)} --shard \"$k/{plan.shards}\" --out \"$shard\" "
            "--db \"sqlite:///$shard/gradebook.db\" --autograded \"$shard/autograded\"\n")


def merge_script(plan):
    merge = [plan.python, "-m", "autograder", "--course", str(plan.course_path), "merge",
             *[str(plan.shard_folder(k)) for k in range(1, plan.shards + 1)],
             "--out", str(plan.out), "--db", plan.db, "--autograded", str(plan.autograded)]
    return ("#!/bin/bash\n"
            "# The merge of every shard, run by Slurm once all array tasks succeeded (written by grade-slurm).\n"
            f"exec {shlex.join(merge)}\n")


def resources(plan):
    """The sbatch options every job of the run shares."""
    options = [f"--job-name={plan.job_name}", f"--time={plan.time}", f"--chdir={plan.course_path.parent}"]
    options += [f"--partition={plan.partition}"] if plan.partition else []
    options += [f"--account={plan.account}"] if plan.account else []
    return options + list(plan.sbatch_options)


def submit(plan):
    """Submit the shards' array and the merge; (array job id, merge job id)."""
    _command("sbatch")
    running = _run("squeue", "-h", "-n", plan.job_name, "-o", "%i").split()
    if running:
        raise CourseError(f"a grading run into {plan.out} is still in Slurm's queue (job {', '.join(running)}): "
                          f"wait for it, or scancel {running[0].split('_')[0]}")
    plan.scripts.mkdir(parents=True, exist_ok=True)
    (plan.scripts / "shard.sh").write_text(shard_script(plan))
    (plan.scripts / "merge.sh").write_text(merge_script(plan))
    array = _run("sbatch", "--parsable", *resources(plan), f"--array=1-{plan.shards}",
                 f"--cpus-per-task={plan.jobs}", f"--mem={plan.mem}",
                 f"--output={plan.scripts / 'shard-%a.log'}", str(plan.scripts / "shard.sh")).strip().split(";")[0]
    try:
        merge = _run("sbatch", "--parsable", *resources(plan), f"--dependency=afterok:{array}",
                     "--kill-on-invalid-dep=yes", "--cpus-per-task=1", "--mem=2G",
                     f"--output={plan.merge_log}", str(plan.scripts / "merge.sh")).strip().split(";")[0]
    except CourseError:
        _run("scancel", array)  # no shard runs without the merge that would collect it
        raise
    return array, merge


def job_state(job):
    """(state, exit code, reason) of a job Slurm still remembers, or None."""
    process = subprocess.run([_command("scontrol"), "show", "job", "-o", job], capture_output=True, text=True)
    fields = dict(re.findall(r"(\w+)=(\S*)", process.stdout)) if process.returncode == 0 else {}
    return (fields["JobState"], fields.get("ExitCode", ""), fields.get("Reason", "")) if "JobState" in fields else None


@dataclass
class Outcome:
    failed: list      # [(k, how it ended, its log)] for the shards that did not finish
    merged: bool
    merge_state: str = ""


def wait(plan, array, merge, poll=5.0, say=print):
    """Wait until both jobs have left the queue, saying each shard's end as it comes; the Outcome."""
    started = time.time()
    done = set()
    while True:
        queued = subprocess.run([_command("squeue"), "-h", "-j", f"{array},{merge}", "-o", "%i"],
                                capture_output=True, text=True).stdout.split()
        for k in range(1, plan.shards + 1):
            finished = Layout(plan.shard_folder(k)).finished_shard()
            if k not in done and finished:
                done.add(k)
                say(f"shard {k}/{plan.shards} finished: {len(finished[2])} submission(s)")
        if not queued:
            break
        time.sleep(poll)
    failed = []
    for k in range(1, plan.shards + 1):
        if k not in done:
            state = job_state(f"{array}_{k}")
            how = f"{state[0]}, exit {state[1]}" + (f", {state[2]}" if state[2] not in ("", "None") else "") \
                if state else "did not finish"
            failed.append((k, how, plan.shard_log(k)))
    state = job_state(merge)
    grades = Layout(plan.out).grades_csv
    # a job Slurm no longer remembers (its MinJobAge passed) is judged by what it wrote
    written = state is None and grades.exists() and grades.stat().st_mtime >= started - poll
    return Outcome(failed, merged=not failed and (written or (state is not None and state[0] == "COMPLETED")),
                   merge_state=state[0] if state else "unknown")
