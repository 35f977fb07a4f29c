"""What reaches students and where grading runs outside this machine: gradescope (Gradescope's runner),
collect-push and post-push (grading on push), student-kit, variants and variant-secret (each student's
numbers), gradescope-zip."""

from pathlib import Path

from autograder.cli.commands import API, GRADED, ORGANIZATION, SUBMITTED, check_sandbox, command, one_of, option, shard


@command("gradescope", "grade Gradescope's submission folder (run_autograder calls it)",
         option("--assignment", required=True),
         option("--submission", default="/autograder/submission"),
         option("--results", default="/autograder/results/results.json"))
def gradescope(args, course):
    """What run_autograder calls: grade the notebook in Gradescope's submission folder.  stdout is
    for the instructor (run_autograder's results hide it from students)."""
    from autograder.kits import gradescope_result
    from autograder.render import last_line, write_gradescope
    result, notes = gradescope_result(course, course.assignment(args.assignment), args.submission, check_sandbox)
    for line in notes:
        print(line)
    write_gradescope(result, Path(args.results), course.visibility())   # none for a grader fault
    print(last_line(result))
    return 0


@command("collect-push", "fetch the class's changed repositories into submitted/",
         SUBMITTED,
         *ORGANIZATION,
         option("--shard", type=shard, default=None, metavar="K/N"),
         API)
def collect_push(args, course):
    from autograder import push
    organization, prefix = push.organization(course, args.organization, args.prefix)
    collected = push.collect(course, push.client(course, args.api), args.submitted, organization=organization,
                             prefix=prefix, shard=args.shard)
    print(f"{len(collected)} repositories collected into {args.submitted}/")
    return 0


@command("post-push", "answer each collected commit: statuses and a feedback comment",
         SUBMITTED,
         GRADED,
         API)
def post_push(args, course):
    from autograder import push
    from autograder.layout import Layout
    answered = push.post(course, push.client(course, args.api), args.submitted, Layout(args.out))
    print(f"{len(answered)} commits answered")
    return 0


@command("student-kit", "build what students receive",
         option("--out", default="student-kit", help="the class's kit: OUT/ and OUT.zip (one student's: "
                "OUT-<id>/ and OUT-<id>.zip, never the class's)"),
         option("--at", default=None, metavar="WHEN",
                help="the kit as it stands at this ISO 8601 date and time (default: now)"),
         option("--student", default=None, help="one student's kit: their variant.json beside the notebooks"))
def student_kit(args, course):
    from autograder.course import parse_due
    from autograder.kits import build_student_kit, kit_folder
    moment = parse_due(args.at, "--at", "the date") if args.at else None
    folder = kit_folder(args.out, args.student)
    archive, chosen = build_student_kit(course, folder, moment, args.student)
    print(f"Student kit{f' of {args.student}' if args.student else ''}: {folder}/ and {archive}, with "
          f"{', '.join(a.id for a in chosen)}")
    return 0


@command("variants", "each student's variant.json: out/<student>/<assignment>/",
         one_of(option("--roster", default=None, help="CSV with a `student` column (default: the class under "
                       "--submitted)"),
                SUBMITTED),
         option("--assignment", action="append", help="this assignment (default: those released now)"),
         option("--out", default="variants"),
         option("--push", action="store_true", help="commit them into the students' repositories of "
                "grading on push instead (COURSE_GITHUB_TOKEN)"),
         *ORGANIZATION,
         API)
def variant_files(args, course):
    from autograder import lms, schedule, variants
    assignments = ([course.assignment(a) for a in args.assignment] if args.assignment
                   else schedule.released(course, schedule.now()))
    chosen = variants.with_variants(assignments)
    if args.push:   # into each student's repository of grading on push, whoever is in the organization
        from autograder import push
        organization, prefix = push.organization(course, args.organization, args.prefix)
        sent = push.send_variants(push.client(course, args.api), variants.Variants.of(course), chosen,
                                  organization=organization, prefix=prefix)
        if sent:
            variants.note_handed_out(course, f"variant.json of {', '.join(a.id for a in chosen)} pushed to "
                                     f"{organization}'s repositories", sent)
        print(f"{len(sent)} repositories sent their variant.json ({', '.join(a.id for a in chosen)})")
        return 0
    if args.roster:   # its ids and the columns Gradescope's sid or email are matched to
        students = lms.read_roster(args.roster)
    else:
        from autograder.classrun.tasks import check_selection, class_students
        students = class_students(course, check_selection(course, args.submitted))
    written = variants.Variants.of(course).write_files(chosen, students, Path(args.out))
    variants.note_handed_out(course, f"variant.json of {', '.join(a.id for a in chosen)} written to {args.out}/", students)
    print(f"{len(written)} variant.json files in {args.out}/<student>/<assignment>/ ({len(students)} students, "
          f"{', '.join(a.id for a in chosen)}): each goes beside that student's notebook")
    return 0


@command("variant-secret", "make the course's variant secret (once, outside the repository)",
         option("--if-missing", action="store_true", help="do nothing where one exists (the demo's make grade)"),
         option("--force", action="store_true", help="replace it even though grades exist or students' "
                "numbers drawn from it have left this machine (they all change)"),
         GRADED)
def variant_secret(args, course):
    from autograder import variants
    from autograder.classrun.publish import has_grades
    if args.if_missing and not variants.secret_wanted(course):
        return 0
    path = variants.secret_path(course)
    done = variants.make_secret(path, course, graded=has_grades(args.out), force=args.force)
    print(f"{done.capitalize()} the course's variant secret at {path} (mode 600): keep it, out of any repository, and "
          "copy it to every machine that grades; it decides every student's numbers")
    return 0


@command("gradescope-zip", "build Gradescope's autograder.zip for one assignment",
         option("--assignment", required=True),
         option("--out", default="autograder.zip"))
def gradescope_zip(args, course):
    from autograder.kits import IMAGES, build_gradescope
    archive, pythons = build_gradescope(course, course.assignment(args.assignment), Path(args.out))
    images = ", ".join(f"{IMAGES[python]} (Python {python})" for python in pythons)
    print(f"Gradescope autograder: {archive} (upload it as the assignment's autograder; base image: {images})")
    if len(pythons) < len(IMAGES):
        print(f"  its packages have no build for Python {', '.join(sorted(set(IMAGES) - set(pythons)))}: "
              "setup.sh refuses those images")
    return 0
