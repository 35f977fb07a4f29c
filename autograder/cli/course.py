"""The course itself: report (item analysis of a graded class), new-exercise, manual-score (a score by
hand in nbgrader's gradebook) and release (exercises/ from solutions/)."""

from autograder.cli.commands import DB, GRADED, command, one_of, option


@command("report", "item analysis of a graded class (after grade-class)",
         GRADED)
def report(args, course):
    from autograder.report import write_report
    folder = write_report(args.out, order=[assignment.id for assignment in course.assignments], course=course)
    print(f"Report: {folder / 'report.md'}  {folder / 'scores.png'}  {folder / 'item_analysis.csv'}  "
          f"{folder / 'integrity.html'}  {folder / 'integrity.csv'}")
    return 0


@command("new-exercise", "scaffold an exercise: notebook cells, course.yml, suite, catalogue",
         option("id", help="the exercise id (its answer cell's grade_id)"),
         option("--assignment", required=True, help="an assignment of course.yml, or a new one"),
         option("--function", required=True, help="the student function the exercise asks for"),
         option("--title", default=None),
         option("--notebook", default=None, help="the notebook (default: named as the assignment)"))
def new_exercise(args, course):
    from autograder.scaffold import scaffold
    for path in scaffold(args.id, args.assignment, args.function, args.title, args.notebook, course.root):
        print(f"wrote {path.relative_to(course.root)}")
    print(f"next: fill in the TODOs (the statement, the reference answer, the suite's tests and causes, the "
          f"catalogue's mistakes), then\n  make release ASSIGNMENT={args.assignment} && make check EXERCISE={args.id}"
          f" && make sample-class && make test")
    return 0


@command("manual-score", "set one exercise's score by hand in nbgrader's gradebook (what formgrader's score box does)",
         option("--assignment", required=True),
         option("--student", required=True),
         option("--exercise", required=True, help="an exercise id of the assignment (course.yml)"),
         one_of(option("--score", type=float, help="the exercise's points, replacing the automatic ones"),
                option("--clear", action="store_true", help="remove the manual score (one held since the work "
                       "changed: drop it)"),
                option("--keep", action="store_true", help="count again the manual score held since the work "
                       "changed, for the work graded now"),
                required=True),
         DB,
         GRADED)
def manual_score(args, course):
    from autograder.gradebook import set_manual_score
    from autograder.layout import Layout
    assignment = course.assignment(args.assignment)
    exercise = assignment.exercise(args.exercise)
    automatic, points, score = set_manual_score(args.db, assignment, exercise, args.student,
                                                None if args.clear else args.score, Layout(args.out), keep=args.keep)
    said = ("cleared: the automatic score counts" if score is None else
            f"{'kept at' if args.keep else 'set to'} {score:g}. It counts for the work graded now")
    print(f"{args.student}/{assignment.id} {exercise.id}: automatic {automatic:g} / {points:g}, by hand {said}. "
          f"`make grade` puts it into grades.csv and the feedback (nothing is graded again).")
    return 0


@command("release", "regenerate exercises/ from solutions/ with nbgrader",
         option("--assignment", action="append"))
def release(args, course):
    from autograder.release import release
    release(course, args.assignment)
    return 0
