"""grade (one notebook) and grade-class (a class), which the grading service also runs (service.SERVED:
`served` is what it calls); serve (that service) and check-server (students' notebooks graded on demand)."""

import json
import sys
from pathlib import Path

from autograder.cli.commands import (AUTOGRADED, DB, JOBS, NO_SERVICE, SELECTION, SUBMITTED, build_parser, check_sandbox,
                                     command, option, run_command, say, shard)
from autograder.course import CourseError
from autograder.intake import SubmissionError, choose_notebooks


@command("grade", "grade one notebook; print the score, write results.json",
         option("--assignment", required=True),
         option("--json", help="where to write Gradescope's results.json"),
         option("--feedback", help="where to write the student's feedback (.md, or .html)"),
         option("--student", default=None, help="whose notebook it is: required where an exercise has each "
                "student's own numbers (variants), which are checked"),
         NO_SERVICE,
         option("notebook"),
         pool=None)
def grade(args, course):
    from autograder import render
    from autograder.grading import grade_one
    from autograder.variants import require_student

    assignment = course.assignment(args.assignment)
    path = Path(args.notebook)
    if not path.is_file():
        raise CourseError(f"no notebook at {path}")
    require_student(course, assignment, args.student)
    try:
        notebooks = choose_notebooks(assignment, [path])
    except SubmissionError as error:
        raise CourseError(str(error)) from None
    check_sandbox(course, probe_it=False)
    result = grade_one(course, assignment, path.parent, args.student or "student", notebooks,
                       started=args.pool.take_for(course, [assignment.id]) if args.pool else None)
    if len(assignment.notebooks) != 1:
        result.notebooks = [nb for nb in result.notebooks if nb.notebook in notebooks]
    if args.json:
        render.write_gradescope(result, Path(args.json), course.visibility())
    for notebook in result.notebooks:   # one line per exercise; the score stays the last line (setup.sh reads it)
        for section in render.sections(notebook):
            failed = [test.test for group, _, _ in section.groups if not section.passed(group) for test in group]
            print(f"  {section.exercise}: {section.score:g} / {section.max_score:g}"
                  + (f", failed: {', '.join(failed)}" if failed else ""))
    if args.feedback:
        page = render.html_page(result) if args.feedback.endswith(".html") else render.markdown(result)
        Path(args.feedback).write_text(page)
        print(f"  the student's feedback: {args.feedback}")
    else:
        print("  (--feedback feedback.md, or .html, writes the feedback a student would get)")
    print(render.last_line(result))
    return 0


@command("grade-class", "grade <submitted>/<student>/<assignment>/",
         SUBMITTED,
         *SELECTION,
         option("--exercise", action="append", default=[],
                help="grade only this exercise (repeatable): an author's check, with an --out of its own and no gradebook"),
         option("--out", default=None, help="folder for grades.csv, results, feedback (default: grading)"),
         DB,
         JOBS,
         option("--shard", type=shard, default=None, metavar="K/N",
                help="grade only the K-th of N deterministic parts of the class"),
         option("--force", action="store_true", help="grade again even what is unchanged"),
         option("--table", action="store_true", help="print a table of the graded submissions"),
         AUTOGRADED,
         NO_SERVICE,
         pool=None)
def grade_class(args, course):
    from autograder import render
    from autograder.classrun import fanout, run

    run.check_exercises(course, args.exercise, args.out, args.db)
    check_sandbox(course)
    chosen = run.prepare_class(course, args.submitted, args.out or "grading", assignments=args.assignment,
                               students=args.student, shard=args.shard, force=args.force, exercises=args.exercise)
    fanout.start_log(chosen.layout.log)
    if not chosen.tasks:
        print(f"Shard {args.shard[0]}/{args.shard[1]} holds none of the class's submissions: nothing to grade.")
        return 0
    jobs = args.jobs or fanout.default_jobs()
    print(render.class_plan(chosen, fanout.effective_jobs(jobs, chosen.pending)), flush=True)
    autograded = Path(args.autograded or Path(args.submitted).parent / "autograded")
    update = render.Progress(len(chosen.pending), sys.stdout if not sys.stderr.isatty() else sys.stderr)
    run.grade_class(course, chosen, args.db, autograded, jobs, update, args.pool)
    print(render.class_report(chosen, args.submitted, args.db, table=args.table))
    for line in held_lines(chosen.layout.out):
        print(line)
    if chosen.interrupted:
        print("interrupted: what was graded is saved; run the same command again to grade the rest", file=sys.stderr)
        return 130
    return 0


def held_lines(out):
    """The run's lines on manual scores held because the work changed since they were given ([] if none)."""
    from autograder.gradebook import held_manual_scores
    held = held_manual_scores(out)
    if not held:
        return []
    lines = ["Manual scores given to an earlier version of the work, not counted since it changed (keep one with "
             "manual-score --keep, drop it with --clear):"]
    for student, assignment, cell, score in held:
        exercise = cell.removeprefix("check_")
        lines.append(f"  {student}/{assignment} {exercise}: {score:g} by hand  (python -m autograder manual-score "
                     f"--assignment {assignment} --student {student} --exercise {exercise} --keep | --clear)")
    return lines


@command("serve", "a grading service that keeps torch, the suites and started sandboxes warm for grade and "
                  "grade-class (until Ctrl-C)",
         option("--jobs", type=int, default=0, help="sandboxes kept started (default: one per core)"),
         option("--status", action="store_true", help="print the running service's state and exit"))
def serve(args, course):
    from autograder import service
    from autograder.classrun.fanout import default_jobs

    if args.status:
        state = service.status(course.root)
        print(json.dumps(state) if state else f"no grading service runs for {course.root}")
        return 0 if state else 1
    if course.limits.sandboxed:
        check_sandbox(course)
    return service.serve(course, args.argv, args.jobs or default_jobs(), say, served)


def served(argv, pool):
    """What the grading service runs for a client (service.serve's `run`): its grade or grade-class, here,
    with the sandboxes of `pool`."""
    args = build_parser([sys.modules[__name__]], None).parse_args(argv)
    args.argv, args.pool = list(argv), pool
    return run_command(args)


@command("check-server", "grade students' notebooks on demand over HTTP, as they check() them (course.yml's "
                         "checks:, docs/checks.md)",
         option("--assignment", action="append", help="an assignment to check (default: those whose checks "
                                                      "course.yml opens)"),
         JOBS,
         option("--port", type=int, default=None, help="the port (default: course.yml's, 8765; 0: any free one)"),
         option("--out", default="grading", help="the output folder; checks are recorded in <out>/checks/checks.jsonl"))
def check_server(args, course):
    from autograder.classrun.fanout import default_jobs
    from autograder.ondemand import server

    if course.limits.sandboxed:
        check_sandbox(course)
    return server.serve(course, args.assignment, args.jobs or default_jobs(), args.out, args.port, say)
