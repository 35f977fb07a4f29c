"""Grading on push, with no secret in a student's hands.

Grading runs only in the instructor's private course repository (.github/workflows/grade-push.yml,
on a schedule and by hand); the students' own repositories hold no secret and no workflow that
could reach the course.  One run is three commands:

    collect   list the class's repositories (course.yml's github.organization and
              repository_prefix); fetch each one whose branch moved since it was last collected,
              and copy its notebooks into submitted/<student>/<assignment>/, nbgrader's layout.  A
              notebook that changed gets a timestamp.txt with the time GitHub received the push
              (GitHub's clock, not the commit's date, which the student sets); one that did not
              change keeps its own, so a late push to one assignment makes no other one late.
    grade     make grade on submitted/: what did not change is not graded again
    post      for each student whose newest commit is not answered yet and whose grades are
              made from that commit's notebooks: a commit status per assignment (the score) and a
              commit comment (the feedback), on that commit

Where an assignment has per-student variants, `variants --push` commits each student's
variant.json into their repository (send_variants); the grader never reads it back.

What a run needs from the last one is on disk: submitted/ (with each student's .commit) and the
grading output; the workflow keeps both on a branch of the course repository.
"""

import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from autograder import render
from autograder.classrun import tasks
from autograder.course import CourseError
from autograder.forge import ForgeError, GitHub, Repository
from autograder.intake import SubmissionError, read_file, student_name_problem
from autograder.variants import FILENAME
from autograder.submission import MAX_FILE_BYTES

COMMIT, REPOSITORY, POSTED = ".commit", ".repository", ".posted"   # in submitted/<student>/


def client(course, api=None):
    token = os.environ.get("COURSE_GITHUB_TOKEN", "")
    if not token:
        raise CourseError("COURSE_GITHUB_TOKEN is not set (a secret of the private course repository)")
    return GitHub(token, api or os.environ.get("GITHUB_API_URL") or "https://api.github.com")


def organization(course, name=None, prefix=None):
    """(organization, repository prefix) of grading on push: those given, else course.yml's github section."""
    name = name or course.github.get("organization")
    prefix = prefix if prefix is not None else course.github.get("repository_prefix", "")
    if not name:
        raise CourseError("no organization: set github.organization in course.yml or pass --organization")
    return name, prefix


def student_of(repository, prefix):
    return repository.full_name.split("/", 1)[1][len(prefix):]


def students(forge, organization, prefix, log):
    """(repository, student) for each of the class's repositories whose name gives a student's folder name."""
    for repository in forge.repositories(organization, prefix):
        student = student_of(repository, prefix)
        problem = student_name_problem(student)
        if problem:
            log(f"skipped {repository.full_name}: {problem}")
            continue
        yield repository, student


def _read(path):
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def collect(course, forge, submitted, *, organization, prefix, shard=None, log=print):
    """Fetch what changed since the last collect into `submitted`; returns the students collected."""
    submitted = Path(submitted)
    submitted.mkdir(parents=True, exist_ok=True)
    collected = []
    for repository, student in students(forge, organization, prefix, log):
        if not tasks.in_shard(tasks.Task(student, "", ""), shard):
            continue
        folder = submitted / student
        try:
            sha = forge.head(repository, repository.default_branch)
            if _read(folder / COMMIT) == sha:
                continue
            with tempfile.TemporaryDirectory() as scratch:
                clone = Path(scratch) / "clone"
                forge.fetch(repository, repository.default_branch, clone)
                pushed = forge.pushed_at(repository, repository.default_branch, sha) or \
                    datetime.now(timezone.utc).isoformat()
                changed = lay_out(course, clone, folder, pushed)
        except ForgeError as error:
            log(f"skipped {repository.full_name}: {error}")
            continue
        (folder / REPOSITORY).write_text(repository.full_name + "\n")
        (folder / COMMIT).write_text(sha + "\n")
        collected.append(student)
        log(f"collected {student} at {sha[:12]}" + (f": {', '.join(changed)} changed" if changed else ": nothing changed"))
    return collected


def send_variants(forge, variants, assignments, *, organization, prefix, log=print):
    """Commit each student's variant.json (variants.py) into their repository, beside the notebooks of each
    assignment (<assignment>/variant.json), where it is not there already; returns the students sent one."""
    sent = []
    for repository, student in students(forge, organization, prefix, log):
        try:
            changed = [assignment.id for assignment in assignments
                       if forge.put_file(repository, f"{assignment.id}/{FILENAME}", variants.file_text(assignment, student),
                                         f"Your own numbers of {assignment.id}")]
        except ForgeError as error:
            log(f"skipped {repository.full_name}: {error}")
            continue
        if changed:
            sent.append(student)
            log(f"sent {student} the numbers of {', '.join(changed)}")
    return sent


def lay_out(course, clone, folder, pushed):
    """Copy the course's notebooks found in a clone (<assignment>/<notebook>.ipynb) into the
    student's folder; returns the assignments whose notebooks changed."""
    changed = []
    for assignment in course.assignments:
        target = folder / assignment.id
        updates = {}
        for notebook in assignment.notebooks:
            source = clone / assignment.id / notebook.filename
            try:
                data = read_file(source, clone, MAX_FILE_BYTES) if os.path.lexists(source) else None
            except SubmissionError as error:  # graded as what it is: the grader names the problem
                data = f"not a notebook: {error}".encode()
            old = target / notebook.filename
            if data is not None and (not old.is_file() or old.read_bytes() != data):
                updates[notebook.filename] = data
        if updates:
            target.mkdir(parents=True, exist_ok=True)
            for name, data in updates.items():
                (target / name).write_bytes(data)
            (target / "timestamp.txt").write_text(pushed + "\n")
            changed.append(assignment.id)
    return changed


def status_of(result):
    """(state, description) of one assignment's commit status; a grader fault gives no score and keeps
    its reason (the instructor's) out of the student's repository."""
    if result.faulted:
        return "error", "not graded yet: the grader failed (no fault of your work); it will be graded again"
    if result.reason:
        return "error", f"not graded: {result.reason}"
    late = f" ({result.late_penalty:g} taken for lateness)" if result.late_penalty else ""
    return "success", f"{result.final_score:g} / {result.max_score:g} points{late}"


def comment_of(results, sha):
    lines = [f"Grades for commit {sha[:12]} (the grade of record is the latest graded commit before "
             "the due date, or after it with the late policy):", ""]
    lines += [f"- **{result.assignment}**: {status_of(result)[1]}" for result in results]
    for result in results:
        lines += ["", "<details><summary>" + f"Feedback: {result.assignment}" + "</summary>", "",
                  render.markdown(result), "", "</details>"]
    return "\n".join(lines)


def post(course, forge, submitted, layout, log=print):
    """Answer every collected commit whose grades are made from its notebooks; returns the students."""
    submitted = Path(submitted)
    answered = []
    parts = {}
    for folder in sorted(path for path in submitted.iterdir() if (path / COMMIT).is_file()):
        student, sha = folder.name, _read(folder / COMMIT)
        if _read(folder / POSTED) == sha:
            continue
        results = []
        for assignment in course.assignments:
            if not (folder / assignment.id).is_dir():
                continue
            record = layout.read_record(student, assignment.id)
            if assignment.id not in parts:
                parts[assignment.id] = tasks.course_fingerprint(course, assignment)
            current = tasks.fingerprint(parts[assignment.id], assignment, folder / assignment.id)
            if record is None or record.get("fingerprint") != current:
                results = None  # not graded from this commit yet: answered by a later run
                break
            results.append(layout.graded_one(student, assignment.id))
        if not results:
            continue
        repository = Repository(_read(folder / REPOSITORY), "", "")
        try:
            for result in results:
                state, description = status_of(result)
                forge.set_status(repository, sha, state, description, f"grade/{result.assignment}")
            forge.comment(repository, sha, comment_of(results, sha))
        except ForgeError as error:
            log(f"could not answer {student}: {error}")
            continue
        (folder / POSTED).write_text(sha + "\n")
        answered.append(student)
        log(f"answered {student} at {sha[:12]}: " + ", ".join(f"{r.assignment} {status_of(r)[1]}" for r in results))
    return answered
