"""Command line: python -m autograder COMMAND ...; `--help` on each says more.

    grading       grade (one notebook), grade-class, serve (keeps both warm), check-server
                  (students' notebooks graded on demand), merge (shards),
                  grade-slurm, k8s-manifests, gradescope (inside Gradescope's image), report,
                  manual-score
    delivery      release, student-kit, gradescope-zip, collect-push, post-push, variants (each
                  student's numbers), variant-secret
    the LMS       export-lms, lms-keys, lms-push
    authoring     new-exercise

Each command parses its arguments, calls one function of the package and prints what it gave.
"""

import argparse
import json
import os
import sys
from pathlib import Path

from autograder.course import CourseError, load_course
from autograder.intake import SubmissionError, choose_notebooks, find_notebooks, gradescope_ids
from autograder.sandbox import cgroup
from autograder.sandbox.jail import SandboxUnavailable, probe



def _grade(args, course):
    from autograder import render
    from autograder.grading import grade_one
    from autograder.variants import Variants, has_variants

    assignment = course.assignment(args.assignment)
    path = Path(args.notebook)
    if not path.is_file():
        raise CourseError(f"no notebook at {path}")
    if has_variants(assignment):   # graded on whose numbers: never a default's, never an id the class lacks
        if not args.student:
            raise CourseError(f"{assignment.id} has exercises on each student's own numbers: say whose notebook it "
                              "is with --student ID (the folder name under submitted/)")
        Variants.of(course).whose([args.student], "--student: ")
    try:
        notebooks = choose_notebooks(assignment, [path])
    except SubmissionError as error:
        raise CourseError(str(error)) from None
    _check_sandbox(course, probe_it=False)
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
    print(_last_line(result))
    return 0


def _last_line(result):
    """grade's and gradescope's last line (setup.sh reads it): the score, or the grader's fault."""
    if result.faulted:
        return f"grader fault, no score: {result.fault}"
    return f"{result.score:g} / {result.max_score:g}" + (f"  ({result.reason})" if result.reason else "")


def _gradescope(args, course):
    """What run_autograder calls: grade the notebook in Gradescope's submission folder.  stdout is
    for the instructor (run_autograder's results hide it from students)."""
    from autograder.render import write_gradescope
    from autograder.results import SubmissionResult, grader_failed, not_graded
    from autograder.variants import UnknownStudent, Variants, has_variants

    assignment = course.assignment(args.assignment)
    ids = gradescope_ids(args.submission)
    student, unknown = (ids or ["student"])[0], ""
    if has_variants(assignment):   # whose numbers: the roster shipped in the zip says, from the sid or the email
        try:
            student = Variants.of(course).whose(ids, "Gradescope's submitter: ")
        except UnknownStudent as error:
            print(f"instructor: {error}")
            unknown = str(error)
    reason = fault = ""
    try:
        chosen = choose_notebooks(assignment, find_notebooks(args.submission))
        _check_sandbox(course)
    except SubmissionError as error:
        reason = str(error)
    except SandboxUnavailable as error:  # the instructor's to fix: a grader fault, never a score
        print(f"instructor: the grader's sandbox cannot be built in this container ({error}); "
              "rebuild the autograder image (setup.sh checks the sandbox)")
        fault = f"its sandbox cannot be built in this container ({error})"
    if reason:
        result = SubmissionResult(student, assignment.id, [not_graded(nb, reason) for nb in assignment.notebooks])
    elif unknown or fault:   # a grader fault, never a score (nor one on another id's numbers)
        result = SubmissionResult(student, assignment.id,
                                  [grader_failed(nb, unknown or fault) for nb in assignment.notebooks])
    else:
        from autograder.grading import grade_one  # torch: only when there is something to grade
        result = grade_one(course, assignment, args.submission, student, notebooks=chosen)
    write_gradescope(result, Path(args.results), course.visibility())   # none for a grader fault
    print(_last_line(result))
    return 0


def _student_kit(args, course):
    from autograder.course import parse_due
    from autograder.kits import build_student_kit, kit_folder
    moment = parse_due(args.at, "--at", "the date") if args.at else None
    folder = kit_folder(args.out, args.student)
    archive, chosen = build_student_kit(course, folder, moment, args.student)
    print(f"Student kit{f' of {args.student}' if args.student else ''}: {folder}/ and {archive}, with "
          f"{', '.join(a.id for a in chosen)}")
    return 0


def _variant_secret(args, course):
    from autograder import variants
    from autograder.layout import Layout
    path = variants.secret_path(course)
    if args.if_missing and (path.exists() or not any(map(variants.has_variants, course.assignments))):
        return 0
    results = Layout(args.out).results
    graded = results.is_dir() and any(results.iterdir())
    done = variants.make_secret(path, course, graded=graded, force=args.force)
    print(f"{done.capitalize()} the course's variant secret at {path} (mode 600): keep it, out of any repository, and "
          "copy it to every machine that grades; it decides every student's numbers")
    return 0


def _variants(args, course):
    from autograder import lms, schedule, variants
    assignments = ([course.assignment(a) for a in args.assignment] if args.assignment
                   else schedule.released(course, schedule.now()))
    chosen = [assignment for assignment in assignments if variants.has_variants(assignment)]
    if not chosen:
        raise CourseError("no assignment with variants among " + (", ".join(a.id for a in assignments) or "those released"))
    if args.push:   # into each student's repository of grading on push, whoever is in the organization
        from autograder import push
        organization, prefix = _organization(args, course)
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


def _gradescope_zip(args, course):
    from autograder.kits import IMAGES, build_gradescope
    archive, pythons = build_gradescope(course, course.assignment(args.assignment), Path(args.out))
    images = ", ".join(f"{IMAGES[python]} (Python {python})" for python in pythons)
    print(f"Gradescope autograder: {archive} (upload it as the assignment's autograder; base image: {images})")
    if len(pythons) < len(IMAGES):
        print(f"  its packages have no build for Python {', '.join(sorted(set(IMAGES) - set(pythons)))}: "
              "setup.sh refuses those images")
    return 0


def _organization(args, course):
    """(organization, repository prefix) of grading on push: the options, else course.yml's github section."""
    organization = args.organization or course.github.get("organization")
    prefix = args.prefix if args.prefix is not None else course.github.get("repository_prefix", "")
    if not organization:
        raise CourseError("no organization: set github.organization in course.yml or pass --organization")
    return organization, prefix


def _collect_push(args, course):
    from autograder import push
    organization, prefix = _organization(args, course)
    collected = push.collect(course, push.client(course, args.api), args.submitted, organization=organization,
                             prefix=prefix, shard=args.shard)
    print(f"{len(collected)} repositories collected into {args.submitted}/")
    return 0


def _post_push(args, course):
    from autograder import push
    from autograder.layout import Layout
    answered = push.post(course, push.client(course, args.api), args.submitted, Layout(args.out))
    print(f"{len(answered)} commits answered")
    return 0


def _shard(text):
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N (for example 2/4)") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"shard {text}: K must be between 1 and N")
    return k, n


def _check_sandbox(course, probe_it=True):
    """Before student code runs: SandboxUnavailable where the course's sandbox cannot be built (probed
    where `probe_it`), a line on stderr for the instructor about what it binds of a GPU, and the
    warning where memory cannot be accounted per child."""
    if probe_it and course.limits.sandboxed:
        line = probe()
        if line:
            print(line, file=sys.stderr)
    warning = cgroup.fallback_warning()
    if warning:
        print(warning, file=sys.stderr)


def _grade_class(args, course):
    from autograder import render
    from autograder.classrun import fanout, run as classroom

    classroom.check_exercises(course, args.exercise, args.out, args.db)
    _check_sandbox(course)
    chosen = classroom.prepare_class(course, args.submitted, args.out or "grading", assignments=args.assignment,
                                     students=args.student, shard=args.shard, force=args.force,
                                     exercises=args.exercise)
    fanout.start_log(chosen.layout.log)
    if not chosen.tasks:
        print(f"Shard {args.shard[0]}/{args.shard[1]} holds none of the class's submissions: nothing to grade.")
        return 0
    jobs = args.jobs or fanout.default_jobs()
    print(render.class_plan(chosen, fanout.effective_jobs(jobs, chosen.pending)), flush=True)
    autograded = Path(args.autograded or Path(args.submitted).parent / "autograded")
    update = render.Progress(len(chosen.pending), sys.stdout if not sys.stderr.isatty() else sys.stderr)
    classroom.grade_class(course, chosen, args.db, autograded, jobs, update, args.pool)
    print(render.class_report(chosen, args.submitted, args.db, table=args.table))
    for line in held_lines(chosen.layout.out):
        print(line)
    if chosen.interrupted:
        print("interrupted: what was graded is saved; run the same command again to grade the rest",
              file=sys.stderr)
        return 130
    return 0


def _serve(args, course):
    from autograder import service
    from autograder.classrun.fanout import default_jobs

    if args.status:
        state = service.status(course.root)
        print(json.dumps(state) if state else f"no grading service runs for {course.root}")
        return 0 if state else 1
    if course.limits.sandboxed:
        _check_sandbox(course)
    return service.serve(course, args.argv, args.jobs or default_jobs(),
                         lambda line: print(line, flush=True), served)


def _check_server(args, course):
    from autograder.classrun.fanout import default_jobs
    from autograder.ondemand import server

    if course.limits.sandboxed:
        _check_sandbox(course)
    return server.serve(course, args.assignment, args.jobs or default_jobs(), args.out, args.port,
                        lambda line: print(line, flush=True))


def _merge(args, course):
    from autograder.classrun.publish import merge
    results, unfinished = merge(course, args.shards, args.out, args.db, args.autograded)
    print(f"Merged {len(args.shards)} shard(s): {len(results)} submissions in {Path(args.out) / 'grades.csv'}")
    faulted = [result for result in results if result.faulted]
    for shard in unfinished:   # what it did not grade is a grader fault: no score until it is graded
        print(f"{shard.out} did not finish: its submissions without a grade are grader faults in grades.csv "
              f"({len(faulted)} in all, no score); run the same grading again to grade them", file=sys.stderr)
    return 1 if unfinished else 0


def _grade_slurm(args, course):
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
    outcome = slurm.wait(plan, array, merge, poll=args.poll, say=lambda line: print(line, flush=True))
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


def _k8s_manifests(args, course):
    from autograder.scale import kubernetes
    shards, merge = kubernetes.manifests(
        name=args.name, shards=args.shards, image=args.image, claim=args.claim, parallelism=args.parallelism,
        jobs=args.jobs, memory=args.memory, submitted=args.submitted, out=args.out,
        selection=[arg for option in ("assignment", "student") for value in getattr(args, option) or []
                   for arg in (f"--{option}", value)])
    first = Path(args.output)
    second = first.with_name(f"{first.stem}-merge{first.suffix}")
    first.write_text(kubernetes.to_yaml(shards))
    second.write_text(kubernetes.to_yaml(merge))
    print(f"Wrote {first} (the shards, and no network for them) and {second} (the merge). Run:\n"
          f"  kubectl apply -f {first} && kubectl wait --for=condition=complete job/{args.name} --timeout=6h "
          f"&& kubectl apply -f {second}")
    return 0


def _published(args, course):
    """(layout, results) of the class graded into --out, published with the gradebook's manual scores
    (where --db exists) as make grade publishes it: what the LMS commands send."""
    from autograder.classrun.publish import published
    return published(course, args.out, args.db)


def _held_back(held, what):
    """One line per grades.csv row the LMS is not given, and why (lms.final_scores)."""
    for student, assignment, why in held:
        print(f"{student}/{assignment}: held back, {what} ({why})")


def _export_lms(args, course):
    from autograder import lms
    layout, _ = _published(args, course)
    scores, held = lms.final_scores(course, layout.grades_csv)
    paths, unknown = lms.write_exports(course, layout.out, scores, args.roster)
    _held_back(held, "its cell left empty")
    print("LMS imports: " + "  ".join(map(str, paths)))
    if unknown:
        print(f"Graded but not in {args.roster} (kept in the files; the LMS will report them): {', '.join(unknown)}")
    return 0


def _lms_keys(args, course):
    from autograder import lti
    jwks, public_pem = lti.make_keys(Path(os.path.expanduser(args.out)))
    print(f"Wrote the tool's private key to {args.out} (mode 600: keep it there, out of any repository) and name\n"
          "it in the LTI configuration (private_key:). Register the public key in the LMS: Canvas takes this\n"
          "key set (JWKS; paste the object inside \"keys\"):")
    print(json.dumps(jwks, indent=2))
    print("Moodle takes the same key as PEM (RSA key):")
    print(public_pem, end="")
    return 0


def _lms_push(args, course):
    from autograder import lms, lti
    platform = lti.load_platform(args.config)
    key = None if args.dry_run else lti.read_private_key(platform.private_key, course.root)
    for assignment in args.assignment or []:
        course.assignment(assignment)
    layout, _ = _published(args, course)
    scores, held = lms.final_scores(course, layout.grades_csv, args.assignment)
    roster = lms.read_roster(args.roster)
    _held_back(held, "not sent")
    if args.dry_run:   # the roster and the state file only: no network
        outcome = lti.dry_run(course, scores, roster, layout.out, force=args.force)
        print(f"Would send {len(outcome.sent)} score(s) to {platform.issuer}; {outcome.unchanged} unchanged since the "
              "last push. (A dry run asks the LMS nothing: roster rows it does not know as learners, and line items "
              "it lacks, show at the real push.)")
        return 0
    outcome = lti.push(course, platform, key, scores, roster, layout.out, force=args.force)
    ambiguous = [(student, why) for student, why in outcome.refused if "ambiguous" in why]
    for student, why in outcome.refused:
        print(f"{student}: not sent ({why})", file=sys.stderr if (student, why) in ambiguous else sys.stdout)
    for student, assignment, why in outcome.failed:
        print(f"{student}/{assignment}: not sent: {why}" if student else f"the push stopped: {why}", file=sys.stderr)
    print(f"Sent {len(outcome.sent)} score(s) to {platform.issuer}; {outcome.unchanged} unchanged since the last "
          f"push{' (FORCE=1 sends them again)' if outcome.unchanged else ''}"
          + (f"; {len(outcome.resent)} of them sent again as the same update (with their first timestamp: no "
             "answer had confirmed them)" if outcome.resent else "")
          + (f"; {len(held)} held back" if held else "")
          + (f"; line items created: {', '.join(outcome.created)}" if outcome.created else "") + ".")
    if outcome.failed or ambiguous:
        print(f"{len(outcome.failed) + len(ambiguous)} not sent: run the same command again once fixed "
              "(only what was not sent goes).", file=sys.stderr)
        return 1
    return 0


def _report(args, course):
    from autograder.report import write_report
    folder = write_report(args.out, order=[assignment.id for assignment in course.assignments], course=course)
    print(f"Report: {folder / 'report.md'}  {folder / 'scores.png'}  {folder / 'item_analysis.csv'}  "
          f"{folder / 'integrity.html'}  {folder / 'integrity.csv'}")
    return 0


def _manual_score(args, course):
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


def _release(args, course):
    from autograder.release import release
    release(course, args.assignment)
    return 0


def _new_exercise(args, course):
    from autograder.scaffold import scaffold
    for path in scaffold(args.id, args.assignment, args.function, args.title, args.notebook, course.root):
        print(f"wrote {path.relative_to(course.root)}")
    print(f"next: fill in the TODOs (the statement, the reference answer, the suite's tests and causes, the "
          f"catalogue's mistakes), then\n  make release ASSIGNMENT={args.assignment} && make check EXERCISE={args.id}"
          f" && make sample-class && make test")
    return 0


# The options several commands share, each written once.

def _add_selection(command):
    """The options that choose part of the class, the same wherever a class is graded."""
    command.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    command.add_argument("--student", action="append", help="only students matching this glob (repeatable)")


def _add_db(command):
    command.add_argument("--db", default=None, help="nbgrader gradebook URL (default: gradebook.db in the course root)")


def _add_organization(command):
    command.add_argument("--organization", default=None, help="default: course.yml's github.organization")
    command.add_argument("--prefix", default=None, help="default: course.yml's github.repository_prefix")


def _add_graded(command):
    command.add_argument("--out", default="grading", help="the folder grade-class wrote")


def _add_autograded(command):
    command.add_argument("--autograded", default=None,
                         help="nbgrader's autograded/ folder (default: beside the submitted folder)")


def _add_no_service(command):
    command.add_argument("--no-service", action="store_true",
                         help="grade in this process even where a grading service runs (see serve)")


def _add_api(command):
    command.add_argument("--api", default=None, help="the REST API's URL (default: $GITHUB_API_URL or GitHub's)")


def parser():
    main = argparse.ArgumentParser(prog="python -m autograder", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    main.add_argument("--course", default=None, help="path to course.yml (default: the repository's)")
    commands = main.add_subparsers(dest="command", required=True)

    grade = commands.add_parser("grade", help="grade one notebook; print the score, write results.json")
    grade.add_argument("--assignment", required=True)
    grade.add_argument("--json", help="where to write Gradescope's results.json")
    grade.add_argument("--feedback", help="where to write the student's feedback (.md, or .html)")
    grade.add_argument("--student", default=None, help="whose notebook it is: required where an exercise has each "
                       "student's own numbers (variants), which are checked")
    _add_no_service(grade)
    grade.add_argument("notebook")
    grade.set_defaults(run=_grade)

    whole = commands.add_parser("grade-class", help="grade <submitted>/<student>/<assignment>/")
    whole.add_argument("--submitted", default="submitted")
    _add_selection(whole)
    whole.add_argument("--exercise", action="append", default=[],
                       help="grade only this exercise (repeatable): an author's check, with an --out of its own "
                            "and no gradebook")
    whole.add_argument("--out", default=None, help="folder for grades.csv, results, feedback (default: grading)")
    _add_db(whole)
    whole.add_argument("--jobs", type=int, default=0, help="grading processes (default: one per core)")
    whole.add_argument("--shard", type=_shard, default=None, metavar="K/N",
                       help="grade only the K-th of N deterministic parts of the class")
    whole.add_argument("--force", action="store_true", help="grade again even what is unchanged")
    whole.add_argument("--table", action="store_true", help="print a table of the graded submissions")
    _add_autograded(whole)
    _add_no_service(whole)
    whole.set_defaults(run=_grade_class)

    service = commands.add_parser("serve", help="a grading service that keeps torch, the suites and started "
                                                "sandboxes warm for grade and grade-class (until Ctrl-C)")
    service.add_argument("--jobs", type=int, default=0, help="sandboxes kept started (default: one per core)")
    service.add_argument("--status", action="store_true", help="print the running service's state and exit")
    service.set_defaults(run=_serve)

    checks = commands.add_parser("check-server", help="grade students' notebooks on demand over HTTP, as they "
                                                      "check() them (course.yml's checks:, docs/checks.md)")
    checks.add_argument("--assignment", action="append", help="an assignment to check (default: those whose "
                                                              "checks course.yml opens)")
    checks.add_argument("--jobs", type=int, default=0, help="grading processes (default: one per core)")
    checks.add_argument("--port", type=int, default=None, help="the port (default: course.yml's, 8765; 0: any free one)")
    checks.add_argument("--out", default="grading", help="the output folder; checks are recorded in "
                                                         "<out>/checks/checks.jsonl")
    checks.set_defaults(run=_check_server)

    merge = commands.add_parser("merge", help="combine the output folders of --shard runs into one")
    merge.add_argument("shards", nargs="+", help="output folders of grade-class --shard runs")
    merge.add_argument("--out", required=True, help="the combined output folder")
    _add_db(merge)
    merge.add_argument("--autograded", default="autograded", help="nbgrader's autograded/ folder")
    merge.set_defaults(run=_merge)

    cluster = commands.add_parser("grade-slurm", help="grade-class on a Slurm cluster: an array of shards, then a merge")
    cluster.add_argument("--submitted", default="submitted")
    cluster.add_argument("--out", default="grading", help="the merged output folder (shards in <out>/shards/)")
    _add_db(cluster)
    _add_autograded(cluster)
    cluster.add_argument("--shards", type=int, required=True, help="array tasks, one shard of the class each")
    cluster.add_argument("--jobs", type=int, default=1, help="grading processes (and CPUs) per shard")
    _add_selection(cluster)
    cluster.add_argument("--force", action="store_true", help="grade again even what is unchanged")
    cluster.add_argument("--partition", default="", help="default: course.yml's slurm.partition, or the cluster's")
    cluster.add_argument("--account", default="", help="default: course.yml's slurm.account")
    cluster.add_argument("--time", default="", help="time limit per shard (default: slurm.time, or 02:00:00)")
    cluster.add_argument("--mem", default="", help="memory per shard (default: slurm.mem, or what --jobs need)")
    cluster.add_argument("--sbatch-option", action="append", default=[], metavar="OPTION",
                         help="one more sbatch option for every job, such as --qos=normal (repeatable)")
    cluster.add_argument("--wait", action="store_true", help="wait for the jobs and print how they ended")
    cluster.add_argument("--poll", type=float, default=5.0, help=argparse.SUPPRESS)
    cluster.set_defaults(run=_grade_slurm)

    pods = commands.add_parser("k8s-manifests", help="Kubernetes Jobs that grade the same shards (an Indexed Job, a merge)")
    pods.add_argument("--shards", type=int, required=True)
    pods.add_argument("--image", required=True, help="an image with the course's Python, bubblewrap and git")
    pods.add_argument("--claim", required=True, help="the PersistentVolumeClaim holding the course checkout")
    pods.add_argument("--name", default="grade", help="the Job's name (the merge is <name>-merge)")
    pods.add_argument("--parallelism", type=int, default=None, help="pods at once (default: all shards)")
    pods.add_argument("--jobs", type=int, default=1, help="grading processes (and CPUs) per pod")
    pods.add_argument("--memory", default="6Gi", help="memory per pod")
    pods.add_argument("--submitted", default="submitted", help="relative to the checkout")
    _add_selection(pods)
    pods.add_argument("--out", default="grading", help="relative to the checkout")
    pods.add_argument("--output", default="grading-k8s.yaml", help="the shards' file (the merge's: <name>-merge.yaml)")
    pods.set_defaults(run=_k8s_manifests)

    scope = commands.add_parser("gradescope", help="grade Gradescope's submission folder (run_autograder calls it)")
    scope.add_argument("--assignment", required=True)
    scope.add_argument("--submission", default="/autograder/submission")
    scope.add_argument("--results", default="/autograder/results/results.json")
    scope.set_defaults(run=_gradescope)

    collect = commands.add_parser("collect-push", help="fetch the class's changed repositories into submitted/")
    collect.add_argument("--submitted", default="submitted")
    _add_organization(collect)
    collect.add_argument("--shard", type=_shard, default=None, metavar="K/N")
    _add_api(collect)
    collect.set_defaults(run=_collect_push)

    answer = commands.add_parser("post-push", help="answer each collected commit: statuses and a feedback comment")
    answer.add_argument("--submitted", default="submitted")
    _add_graded(answer)
    _add_api(answer)
    answer.set_defaults(run=_post_push)

    kit = commands.add_parser("student-kit", help="build what students receive")
    kit.add_argument("--out", default="student-kit", help="the class's kit: OUT/ and OUT.zip (one student's: "
                     "OUT-<id>/ and OUT-<id>.zip, never the class's)")
    kit.add_argument("--at", default=None, metavar="WHEN",
                     help="the kit as it stands at this ISO 8601 date and time (default: now)")
    kit.add_argument("--student", default=None, help="one student's kit: their variant.json beside the notebooks")
    kit.set_defaults(run=_student_kit)

    numbers = commands.add_parser("variants", help="each student's variant.json: out/<student>/<assignment>/")
    who = numbers.add_mutually_exclusive_group()
    who.add_argument("--roster", default=None, help="CSV with a `student` column (default: the class under --submitted)")
    who.add_argument("--submitted", default="submitted")
    numbers.add_argument("--assignment", action="append", help="this assignment (default: those released now)")
    numbers.add_argument("--out", default="variants")
    numbers.add_argument("--push", action="store_true", help="commit them into the students' repositories of "
                         "grading on push instead (COURSE_GITHUB_TOKEN)")
    _add_organization(numbers)
    _add_api(numbers)
    numbers.set_defaults(run=_variants)

    secret = commands.add_parser("variant-secret", help="make the course's variant secret (once, outside the repository)")
    secret.add_argument("--if-missing", action="store_true", help="do nothing where one exists (the demo's make grade)")
    secret.add_argument("--force", action="store_true", help="replace it even though grades exist or students' "
                        "numbers drawn from it have left this machine (they all change)")
    _add_graded(secret)
    secret.set_defaults(run=_variant_secret)

    zipped = commands.add_parser("gradescope-zip", help="build Gradescope's autograder.zip for one assignment")
    zipped.add_argument("--assignment", required=True)
    zipped.add_argument("--out", default="autograder.zip")
    zipped.set_defaults(run=_gradescope_zip)

    export = commands.add_parser("export-lms", help="final scores as Canvas's and Moodle's grade imports")
    _add_graded(export)
    export.add_argument("--roster", required=True, help="CSV: student, name, email, sis_user_id, sis_login_id, section")
    _add_db(export)
    export.set_defaults(run=_export_lms)

    keys = commands.add_parser("lms-keys", help="make the tool's key pair for LTI 1.3; print the JWKS to register")
    keys.add_argument("--out", default="~/.config/attention-course/lti-private-key.pem",
                      help="where the private key goes (outside the course repository)")
    keys.set_defaults(run=_lms_keys)

    send = commands.add_parser("lms-push", help="push final scores to the LMS with LTI 1.3 (AGS and NRPS)")
    send.add_argument("--config", default="lti.yml", help="the LTI configuration (docs/lms.md)")
    send.add_argument("--roster", required=True, help="CSV: student and the column that names them in the LMS")
    _add_graded(send)
    _add_db(send)
    send.add_argument("--assignment", action="append", help="only this assignment (repeatable)")
    send.add_argument("--dry-run", action="store_true", help="print what would be sent, send nothing")
    send.add_argument("--force", action="store_true", help="send every score, not only those that changed")
    send.set_defaults(run=_lms_push)

    report = commands.add_parser("report", help="item analysis of a graded class (after grade-class)")
    _add_graded(report)
    report.set_defaults(run=_report)

    new = commands.add_parser("new-exercise", help="scaffold an exercise: notebook cells, course.yml, suite, catalogue")
    new.add_argument("id", help="the exercise id (its answer cell's grade_id)")
    new.add_argument("--assignment", required=True, help="an assignment of course.yml, or a new one")
    new.add_argument("--function", required=True, help="the student function the exercise asks for")
    new.add_argument("--title", default=None)
    new.add_argument("--notebook", default=None, help="the notebook (default: named as the assignment)")
    new.set_defaults(run=_new_exercise)

    manual = commands.add_parser("manual-score", help="set one exercise's score by hand in nbgrader's gradebook "
                                 "(what formgrader's score box does)")
    manual.add_argument("--assignment", required=True)
    manual.add_argument("--student", required=True)
    manual.add_argument("--exercise", required=True, help="an exercise id of the assignment (course.yml)")
    points = manual.add_mutually_exclusive_group(required=True)
    points.add_argument("--score", type=float, help="the exercise's points, replacing the automatic ones")
    points.add_argument("--clear", action="store_true", help="remove the manual score (one held since the work "
                        "changed: drop it)")
    points.add_argument("--keep", action="store_true", help="count again the manual score held since the work "
                        "changed, for the work graded now")
    _add_db(manual)
    _add_graded(manual)
    manual.set_defaults(run=_manual_score)

    release = commands.add_parser("release", help="regenerate exercises/ from solutions/ with nbgrader")
    release.add_argument("--assignment", action="append")
    release.set_defaults(run=_release)
    return main


def served(argv, pool):
    """What the grading service runs for a client: its grade or grade-class, here, with `pool`'s sandboxes."""
    return main([*argv, "--no-service"], pool)


def main(argv=None, pool=None):
    args = parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(map(str, argv))
    args.pool = pool
    # nbgrader runs tools of its own (alembic) from PATH; they live beside this interpreter.
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    try:
        course = load_course(args.course)
        why_not = ""
        if args.command in ("grade", "grade-class") and not args.no_service:
            from autograder import service
            code, why_not = service.forward(course.root, args.argv)
            if code is not None:
                return code
        if getattr(args, "db", "") is None:
            args.db = course.gradebook_url
        code = args.run(args, course)
        if why_not and code == 0:   # after the run: an error stays the one line it is
            print(f"note: run without the course's grading service: {why_not}", file=sys.stderr)
        return code
    except SandboxUnavailable as error:
        print(f"error: the sandbox cannot be built here ({error}); install bubblewrap and allow user "
              "namespaces, or set `sandbox: none` in course.yml to run student code unsandboxed",
              file=sys.stderr)
        return 2
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
