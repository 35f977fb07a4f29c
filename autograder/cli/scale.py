"""Grading past one machine: merge (a --shard run's output folders), grade-slurm (an array of shards on
Slurm, then the merge) and k8s-manifests (Kubernetes Jobs that grade the same shards)."""

import argparse
import sys
from pathlib import Path

from autograder.cli.commands import AUTOGRADED, DB, SELECTION, command, option, say


@command("merge", "combine the output folders of --shard runs into one",
         option("shards", nargs="+", help="output folders of grade-class --shard runs"),
         option("--out", required=True, help="the combined output folder"),
         DB,
         option("--autograded", default="autograded", help="nbgrader's autograded/ folder"))
def merge(args, course):
    from autograder.classrun import publish
    results, unfinished = publish.merge(course, args.shards, args.out, args.db, args.autograded)
    print(f"Merged {len(args.shards)} shard(s): {len(results)} submissions in {Path(args.out) / 'grades.csv'}")
    faulted = [result for result in results if result.faulted]
    for shard in unfinished:   # what it did not grade is a grader fault: no score until it is graded
        print(f"{shard.out} did not finish: its submissions without a grade are grader faults in grades.csv "
              f"({len(faulted)} in all, no score); run the same grading again to grade them", file=sys.stderr)
    return 1 if unfinished else 0


@command("grade-slurm", "grade-class on a Slurm cluster: an array of shards, then a merge",
         option("--submitted", default="submitted"),
         option("--out", default="grading", help="the merged output folder (shards in <out>/shards/)"),
         DB,
         AUTOGRADED,
         option("--shards", type=int, required=True, help="array tasks, one shard of the class each"),
         option("--jobs", type=int, default=1, help="grading processes (and CPUs) per shard"),
         *SELECTION,
         option("--force", action="store_true", help="grade again even what is unchanged"),
         option("--partition", default="", help="default: course.yml's slurm.partition, or the cluster's"),
         option("--account", default="", help="default: course.yml's slurm.account"),
         option("--time", default="", help="time limit per shard (default: slurm.time, or 02:00:00)"),
         option("--mem", default="", help="memory per shard (default: slurm.mem, or what --jobs need)"),
         option("--sbatch-option", action="append", default=[], metavar="OPTION",
                help="one more sbatch option for every job, such as --qos=normal (repeatable)"),
         option("--wait", action="store_true", help="wait for the jobs and print how they ended"),
         option("--poll", type=float, default=5.0, help=argparse.SUPPRESS))
def grade_slurm(args, course):
    from autograder.classrun.tasks import check_selection
    from autograder.scale import slurm
    submitted = check_selection(course, args.submitted, args.assignment)
    plan = slurm.plan(course, submitted=submitted, out=args.out, db=args.db,
                      autograded=args.autograded or submitted.parent / "autograded", shards=args.shards, jobs=args.jobs,
                      options={"partition": args.partition, "account": args.account, "time": args.time, "mem": args.mem,
                               "sbatch_options": args.sbatch_option},
                      assignments=args.assignment or [], students=args.student or [], force=args.force)
    array, merge = slurm.submit(plan)
    print(f"Submitted {plan.shards} shard(s) as Slurm array job {array} (logs: {plan.scripts}/shard-K.log) and "
          f"the merge as job {merge}, which runs once every shard succeeded.", flush=True)
    if not args.wait:
        print(f"Follow them with: squeue -j {array},{merge}   The grades will be in {plan.out / 'grades.csv'}.")
        return 0
    outcome = slurm.wait(plan, array, merge, poll=args.poll, say=say)
    for k, how, log_path in outcome.failed:
        print(f"shard {k}/{plan.shards} failed ({how}); its log: {log_path}", file=sys.stderr)
    if outcome.failed:
        print("The merge did not run. What the shards graded is kept: run the same command again to grade only "
              "what is missing and merge.", file=sys.stderr)
        return 1
    if not outcome.merged:
        print(f"The merge job {merge} ended {outcome.merge_state}; its log: {plan.merge_log}. Run the same command "
              "again (every shard is finished, so only the merge has work to do).", file=sys.stderr)
        return 1
    print(plan.merge_log.read_text().strip().splitlines()[-1])
    return 0


@command("k8s-manifests", "Kubernetes Jobs that grade the same shards (an Indexed Job, a merge)",
         option("--shards", type=int, required=True),
         option("--image", required=True, help="an image with the course's Python, bubblewrap and git"),
         option("--claim", required=True, help="the PersistentVolumeClaim holding the course checkout"),
         option("--name", default="grade", help="the Job's name (the merge is <name>-merge)"),
         option("--parallelism", type=int, default=None, help="pods at once (default: all shards)"),
         option("--jobs", type=int, default=1, help="grading processes (and CPUs) per pod"),
         option("--memory", default="6Gi", help="memory per pod"),
         option("--submitted", default="submitted", help="relative to the checkout"),
         *SELECTION,
         option("--out", default="grading", help="relative to the checkout"),
         option("--output", default="grading-k8s.yaml", help="the shards' file (the merge's: <name>-merge.yaml)"))
def k8s_manifests(args, course):
    from autograder.scale import kubernetes
    shards, merge = kubernetes.manifests(
        name=args.name, shards=args.shards, image=args.image, claim=args.claim, parallelism=args.parallelism,
        jobs=args.jobs, memory=args.memory, submitted=args.submitted, out=args.out,
        selection=[arg for option in ("assignment", "student") for value in getattr(args, option) or []
                   for arg in (f"--{option}", value)])
    first, second = kubernetes.write(shards, merge, args.output)
    print(f"Wrote {first} (the shards, and no network for them) and {second} (the merge). Run:\n"
          f"  kubectl apply -f {first} && kubectl wait --for=condition=complete job/{args.name} --timeout=6h "
          f"&& kubectl apply -f {second}")
    return 0
