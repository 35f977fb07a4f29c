"""The LMS: export-lms (Canvas's and Moodle's grade imports), lms-keys and lms-push (LTI 1.3)."""

import json
import os
import sys
from pathlib import Path

from autograder.cli.commands import DB, GRADED, command, option


def _held_back(held, what):
    """One line per grades.csv row the LMS is not given, and why (lms.final_scores)."""
    for student, assignment, why in held:
        print(f"{student}/{assignment}: held back, {what} ({why})")


@command("export-lms", "final scores as Canvas's and Moodle's grade imports",
         GRADED,
         option("--roster", required=True, help="CSV: student, name, email, sis_user_id, sis_login_id, section"),
         DB)
def export_lms(args, course):
    from autograder import lms
    from autograder.classrun.publish import published
    layout, _ = published(course, args.out, args.db)
    scores, held = lms.final_scores(course, layout.grades_csv)
    paths, unknown = lms.write_exports(course, layout.out, scores, args.roster)
    _held_back(held, "its cell left empty")
    print("LMS imports: " + "  ".join(map(str, paths)))
    if unknown:
        print(f"Graded but not in {args.roster} (kept in the files; the LMS will report them): {', '.join(unknown)}")
    return 0


@command("lms-keys", "make the tool's key pair for LTI 1.3; print the JWKS to register",
         option("--out", default="~/.config/attention-course/lti-private-key.pem",
                help="where the private key goes (outside the course repository)"))
def lms_keys(args, course):
    from autograder import lti
    jwks, public_pem = lti.make_keys(Path(os.path.expanduser(args.out)))
    print(f"Wrote the tool's private key to {args.out} (mode 600: keep it there, out of any repository) and name\n"
          "it in the LTI configuration (private_key:). Register the public key in the LMS: Canvas takes this\n"
          "key set (JWKS; paste the object inside \"keys\"):")
    print(json.dumps(jwks, indent=2))
    print("Moodle takes the same key as PEM (RSA key):")
    print(public_pem, end="")
    return 0


@command("lms-push", "push final scores to the LMS with LTI 1.3 (AGS and NRPS)",
         option("--config", default="lti.yml", help="the LTI configuration (docs/lms.md)"),
         option("--roster", required=True, help="CSV: student and the column that names them in the LMS"),
         GRADED,
         DB,
         option("--assignment", action="append", help="only this assignment (repeatable)"),
         option("--dry-run", action="store_true", help="print what would be sent, send nothing"),
         option("--force", action="store_true", help="send every score, not only those that changed"))
def lms_push(args, course):
    from autograder import lms, lti
    from autograder.classrun.publish import published
    platform = lti.load_platform(args.config)
    key = None if args.dry_run else lti.read_private_key(platform.private_key, course.root)
    for assignment in args.assignment or []:
        course.assignment(assignment)
    layout, _ = published(course, args.out, args.db)
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
