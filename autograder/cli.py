"""Command line: python -m autograder {grade, grade-class, merge, report, release} ..."""

import argparse
import json
import logging
import os
import shutil
import sys
from pathlib import Path

from autograder.course import CourseError, load_course
from autograder.sandbox.jail import SandboxUnavailable, probe

log = logging.getLogger("autograder")


def _grade(args, course):
    from autograder.grading import open_grader
    from autograder.results import write_json

    assignment = course.assignment(args.assignment)
    path = Path(args.notebook)
    if len(assignment.notebooks) != 1:
        by_name = {notebook.filename: notebook for notebook in assignment.notebooks}
        if path.name not in by_name:
            raise CourseError(f"{path.name} is not a notebook of {assignment.id} "
                              f"(expected one of: {', '.join(by_name)})")
        notebooks = {by_name[path.name].name: path}
    else:
        notebooks = {assignment.notebooks[0].name: path}  # any file name will do
    result = open_grader(course, lambda grader: grader.grade_submission(
        assignment, path.parent, args.student, notebooks=notebooks), assignments=[assignment.id])
    if len(assignment.notebooks) != 1:
        result.notebooks = [nb for nb in result.notebooks if nb.notebook in notebooks]
    if args.json:
        write_json(result, Path(args.json))
    print(f"{result.score:g} / {result.max_score:g}" + (f"  ({result.reason})" if result.reason else ""))
    return 0


def _shard(text):
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N (for example 2/4)") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"shard {text}: K must be between 1 and N")
    return k, n


def _grade_class(args, course):
    from autograder import classroom, gradebook
    from autograder.layout import Layout

    submitted = Path(args.submitted)
    if not submitted.is_dir():
        raise CourseError(f"no submissions folder at {submitted}")
    for assignment in args.assignment or []:
        course.assignment(assignment)  # an unknown id is an error, not an empty run
    if course.limits.sandbox != "none":
        probe()
    layout = Layout(args.out)
    layout.out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=layout.log, level=logging.INFO, force=True)
    tasks, pending = classroom.select_tasks(course, submitted, layout, assignments=args.assignment,
                                            students=args.student, shard=args.shard, force=args.force)
    if not tasks:
        raise CourseError(f"no submissions found under {submitted}/<student>/<assignment>/"
                          + (" for the given --student/--assignment/--shard" if
                             args.student or args.assignment or args.shard else ""))
    before = classroom.previous_scores(layout, pending)
    up_to_date = len(tasks) - len(pending)
    jobs = args.jobs or classroom.default_jobs()
    print(f"{len(pending)} to grade with {jobs} job(s)"
          + (f", {up_to_date} unchanged since graded (--force grades them again)" if up_to_date else ""),
          flush=True)
    update = classroom.progress(len(pending), sys.stdout if not sys.stderr.isatty() else sys.stderr)
    interrupted = False
    with gradebook.opened(args.db, course) as record:
        def on_done(task):
            result = layout.graded_one(task.student, task.assignment)
            record(result)
            update(task, result)
        try:
            classroom.run(course, layout, pending, jobs, on_done)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            update.close()
            results = classroom.publish(course, layout)
    graded = [r for r in results if (r.student, r.assignment) in {(t.student, t.assignment) for t in tasks}]
    if args.table:
        print()
        print(classroom.summary_table(graded))
    changed = classroom.changes(before, graded)
    print(("\nScores that changed:\n" + "\n".join(changed)) if changed else "\nNo score changed." if before else "")
    print(f"Grades: {layout.grades_csv} ({len(results)} submissions)   wide: {layout.wide_csv}   "
          f"feedback: {layout.feedback_root}   gradebook: {args.db}")
    if interrupted:
        print("interrupted: what was graded is saved; run the same command again to grade the rest",
              file=sys.stderr)
        return 130
    return 0


def _merge(args, course):
    from autograder import classroom, gradebook
    from autograder.layout import Layout

    layout = Layout(args.out)
    for shard in map(Layout, args.shards):
        if not shard.results.is_dir():
            raise CourseError(f"{shard.out} holds no results/ (is it a grade-class output folder?)")
        for tree in (shard.results, shard.feedback_root):
            if tree.is_dir():
                shutil.copytree(tree, layout.out / tree.name, dirs_exist_ok=True)
    results = classroom.publish(course, layout)
    gradebook.record(args.db, course, results)
    print(f"Merged {len(args.shards)} shard(s): {len(results)} submissions in {layout.grades_csv}")
    return 0


def _report(args, course):
    from autograder.report import write_report
    folder = write_report(args.out)
    print(f"Report: {folder / 'report.md'}  {folder / 'scores.png'}  {folder / 'item_analysis.csv'}")
    return 0


def _release(args, course):
    from autograder.release import release
    release(course, args.assignment)
    return 0


def parser():
    main = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    main.add_argument("--course", default=None, help="path to course.yml (default: the repository's)")
    commands = main.add_subparsers(dest="command", required=True)

    grade = commands.add_parser("grade", help="grade one notebook; print the score, write results.json")
    grade.add_argument("--assignment", required=True)
    grade.add_argument("--json", help="where to write Gradescope's results.json")
    grade.add_argument("--student", default="student")
    grade.add_argument("notebook")
    grade.set_defaults(run=_grade)

    whole = commands.add_parser("grade-class", help="grade <submitted>/<student>/<assignment>/")
    whole.add_argument("--submitted", default="submitted")
    whole.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    whole.add_argument("--student", action="append", help="only students matching this glob (repeatable)")
    whole.add_argument("--out", default="grading", help="folder for grades.csv, results, feedback")
    whole.add_argument("--db", default=None, help="nbgrader gradebook URL (default: gradebook.db in the course root)")
    whole.add_argument("--jobs", type=int, default=0, help="grading processes (default: one per core)")
    whole.add_argument("--shard", type=_shard, default=None, metavar="K/N",
                       help="grade only the K-th of N deterministic parts of the class")
    whole.add_argument("--force", action="store_true", help="grade again even what is unchanged")
    whole.add_argument("--table", action="store_true", help="print a table of the graded submissions")
    whole.set_defaults(run=_grade_class)

    merge = commands.add_parser("merge", help="combine the output folders of --shard runs into one")
    merge.add_argument("shards", nargs="+", help="output folders of grade-class --shard runs")
    merge.add_argument("--out", required=True, help="the combined output folder")
    merge.add_argument("--db", default=None, help="nbgrader gradebook URL (default: gradebook.db in the course root)")
    merge.set_defaults(run=_merge)

    report = commands.add_parser("report", help="item analysis of a graded class (after grade-class)")
    report.add_argument("--out", default="grading", help="the folder grade-class wrote")
    report.set_defaults(run=_report)

    release = commands.add_parser("release", help="regenerate exercises/ from solutions/ with nbgrader")
    release.add_argument("--assignment", action="append")
    release.set_defaults(run=_release)
    return main


def main(argv=None):
    args = parser().parse_args(argv)
    # nbgrader runs tools of its own (alembic) from PATH; they live beside this interpreter.
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    try:
        course = load_course(args.course)
        if getattr(args, "db", "") is None:
            args.db = f"sqlite:///{course.root / 'gradebook.db'}"
        return args.run(args, course)
    except SandboxUnavailable as error:
        print(f"error: the sandbox cannot be built here ({error}); install bubblewrap and allow user "
              "namespaces, or set `sandbox: none` in course.yml to run student code unsandboxed",
              file=sys.stderr)
        return 2
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
