"""Command line: python -m autograder {grade, grade-class, release} ..."""

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from autograder.course import CourseError, load_course

log = logging.getLogger("autograder")


def _grade(args, course):
    from autograder.grading import grade_notebook
    from autograder.results import SubmissionResult

    assignment = course.assignment(args.assignment)
    path = Path(args.notebook)
    by_name = {notebook.filename: notebook for notebook in assignment.notebooks}
    notebook = by_name.get(path.name) or (assignment.notebooks[0] if len(assignment.notebooks) == 1 else None)
    if notebook is None:
        raise CourseError(f"{path.name} is not a notebook of {assignment.id} "
                          f"(expected one of: {', '.join(by_name)})")
    result = SubmissionResult(args.student, assignment.id, [grade_notebook(course, assignment, notebook, path)])
    payload = json.dumps(result.gradescope(), indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(payload)
    print(f"{result.score:g} / {result.max_score:g}" + (f"  ({result.reason})" if result.reason else ""))
    return 0


def _grade_class(args, course):
    from autograder import gradebook, results
    from autograder.classroom import find_submissions, grade_submission, summary_table

    submitted = Path(args.submitted)
    if not submitted.is_dir():
        raise CourseError(f"no submissions folder at {submitted}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=out / "grader.log", level=logging.INFO, force=True)
    graded = []
    for student, assignment, folder in find_submissions(course, submitted, args.assignment):
        result = grade_submission(course, assignment, folder, student)
        graded.append(result)
        results.write_json(result, out / "results" / student / assignment.id / "results.json")
        feedback = out / "feedback" / student / assignment.id / "feedback.md"
        feedback.parent.mkdir(parents=True, exist_ok=True)
        feedback.write_text(result.feedback())
        print(f"graded {student}/{assignment.id}: {result.score:g} / {result.max_score:g}", flush=True)
    if not graded:
        raise CourseError(f"no submissions found under {submitted}/<student>/<assignment>/")
    results.write_csv(graded, out / "grades.csv")
    gradebook.record(args.db, course, graded)
    print()
    print(summary_table(graded))
    print(f"\nGrades: {out / 'grades.csv'}   feedback: {out / 'feedback'}   gradebook: {args.db}")
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
    whole.add_argument("--out", default="grading", help="folder for grades.csv, results, feedback")
    whole.add_argument("--db", default=None, help="nbgrader gradebook URL (default: gradebook.db in the course root)")
    whole.set_defaults(run=_grade_class)

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
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
