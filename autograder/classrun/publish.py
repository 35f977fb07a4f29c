"""A class's grades published from the records on disk: grades.csv and the wide table, which records
nbgrader's gradebook holds (recorded.json beside grade.json), the merge of a --shard run's output folders,
and the one line for an output folder that cannot take more."""

import errno
import hashlib
import json
import os
import shutil

from autograder.course import CourseError
from autograder.files import write_atomic, write_csv
from autograder.layout import Layout
from autograder.render import read_grades_csv, write_grades_csv
from autograder.results import SubmissionResult, grader_failed

DISK = "cannot write to"   # how disk_problem's line starts


def disk_problem(error, out):
    """One line for an output folder that cannot take more (its disk or quota full), else None."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"{DISK} {out}: {os.strerror(error.errno)}. What was saved before is kept whole and nothing was "
                "scored for it: free space there and run the same command again")
    return None


# -- the gradebook holds what each record says: recorded.json beside grade.json says which version

def _record_digest(layout, student, assignment):
    try:
        return hashlib.sha256(layout.record_path(student, assignment).read_bytes()).hexdigest()
    except OSError:
        return None


def mark_recorded(layout, student, assignment, db_url):
    write_atomic(layout.recorded(student, assignment),
                 json.dumps({"db": db_url, "record": _record_digest(layout, student, assignment)}))


def is_recorded(layout, student, assignment, db_url):
    """Whether `db_url`'s gradebook holds the submission's grade.json as it is now."""
    try:
        marker = json.loads(layout.recorded(student, assignment).read_text())
    except (OSError, ValueError):
        return False
    return marker == {"db": db_url, "record": _record_digest(layout, student, assignment)}


# -- publishing: everything below is made from the records on disk ----------------------------

def wide_rows(course, results):
    """One row per student: a column per assignment (late penalties applied), total and percentage."""
    assignments = [a for a in course.assignments if any(r.assignment == a.id for r in results)]
    scores = {(r.student, r.assignment): None if r.faulted else r.final_score for r in results}
    possible = sum(a.max_score for a in assignments)
    rows = []
    for student in sorted({r.student for r in results}):
        row = {"student": student}
        mine = [scores.get((student, assignment.id), 0.0) for assignment in assignments]
        for assignment, score in zip(assignments, mine):
            row[assignment.id] = "" if score is None else f"{score:g}"   # a grader fault: no score yet
        total = None if None in mine else sum(mine)
        row["total"] = "" if total is None else f"{total:g}"
        row["max_total"] = f"{possible:g}"
        row["percent"] = "" if total is None else f"{100 * total / possible:.1f}" if possible else "0.0"
        rows.append(row)
    return rows, ["student", *[a.id for a in assignments], "total", "max_total", "percent"]


def publish(course, layout, db_url=None):
    """grades.csv and grades_wide.csv for every graded submission in `layout`, with the manual
    scores and late penalties of nbgrader's gradebook when given; the feedback of a submission
    graded by hand says so."""
    results = layout.graded()
    if db_url:
        from autograder.gradebook import apply_manual_grading
        apply_manual_grading(db_url, results, course, layout)   # a manual score of changed work is held
        for result in results:
            if result.manual:
                layout.save_feedback(result)
    write_grades_csv(results, layout.grades_csv)
    rows, fields = wide_rows(course, results)
    write_csv(layout.wide_csv, fields, rows)
    return results


def has_grades(out):
    """Whether the output folder `out` holds any graded submission."""
    results = Layout(out).results
    return results.is_dir() and any(results.iterdir())


def published(course, out, db_url):
    """(layout, results) of the class graded into `out`, published with the gradebook's manual scores
    (where `db_url`'s gradebook exists) as make grade publishes it: what the LMS commands send.
    CourseError where nothing was graded there."""
    from autograder.gradebook import exists
    layout = Layout(out)
    if not layout.results.is_dir():
        raise CourseError(f"{layout.out} holds no graded submission (run make grade first)")
    return layout, publish(course, layout, db_url if exists(db_url) else None)


def previous_scores(layout):
    """(student, assignment) -> final score, as the last grades.csv gave them (None for a grader fault)."""
    try:
        return {(row["student"], row["assignment"]): float(row["final_score"]) if row["final_score"] else None
                for row in read_grades_csv(layout.grades_csv)}
    except (OSError, ValueError):
        return {}


# -- the shards of one --shard K/N run, merged ---------------------------------------------------

def started_shard(shard):
    """(k, n, submissions) of a --shard run that started but did not finish (its job failed, was
    cancelled, lost its node), from its shard-plan.json; None where there is none."""
    try:
        plan = json.loads(shard.shard_plan.read_text())
        k, n = plan["shard"]
        return int(k), int(n), [str(key) for key in plan["submissions"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_shards(shards):
    """({submission key: the shard Layout that holds it}, the shards that did not finish) for the output
    folders of one --shard K/N run, all N of them, each finished or at least started (a shard whose
    job failed); CourseError with a one-line reason otherwise (a folder that is no shard, shards of
    different runs, a shard missing or given twice, a submission in two)."""
    found, unfinished = {}, []
    for shard in shards:
        finished = shard.finished_shard() or started_shard(shard)
        if finished is None:
            raise CourseError(f"{shard.out} is not a finished shard (no {shard.shard_manifest.name}): run its "
                              "grade-class --shard K/N again (it grades only what is missing)")
        k, n, keys = finished
        if shard.finished_shard() is None:
            unfinished.append(shard)
            keys = list(keys)
        unrecorded = [key for key in keys if shard.read_record(*key.split("/", 1)) is None]
        if unrecorded and shard not in unfinished:
            raise CourseError(f"{shard.out}: shard {k}/{n} lists {unrecorded[0]} but holds no grade for it; "
                              "run its grade-class --shard again")
        if (k, n) in found:
            raise CourseError(f"shard {k}/{n} given twice ({found[k, n][0].out} and {shard.out})")
        found[k, n] = (shard, keys)
    splits = sorted({n for _, n in found})
    if len(splits) != 1:
        raise CourseError(f"the folders hold shards of different splits ({', '.join(f'{k}/{n}' for k, n in sorted(found))}): "
                          "merge the shards of one run")
    n = splits[0]
    absent = [str(k) for k in range(1, n + 1) if (k, n) not in found]
    if absent:
        raise CourseError(f"shard{'s' if len(absent) > 1 else ''} {', '.join(absent)} of {n} missing: "
                          f"merge all {n} shards of the run")
    owner = {}
    for shard, keys in found.values():
        for key in keys:
            if key in owner:
                raise CourseError(f"{key} is in two shards ({owner[key].out} and {shard.out}): merge the shards of one run")
            owner[key] = shard
    return owner, unfinished


def merge(course, folders, out, db_url, autograded):
    """The output folders of one grade-class --shard K/N run (all N) combined into `out`: each
    submission's results and feedback, the gradebook, grades.csv and the wide export, as one run of
    the whole class writes them.  Refused, with the reason, unless check_shards accepts the folders.
    A shard that did not finish gives what it graded; each of its other submissions is a grader
    fault (no score: the same grade-slurm run again grades it).  Returns (results, the shards that
    did not finish)."""
    from autograder import gradebook

    owner, unfinished = check_shards([Layout(folder) for folder in folders])
    layout = Layout(out, course.visibility())
    for key, shard in owner.items():
        for tree in (shard.results, shard.feedback_root):
            if (tree / key).is_dir():
                shutil.copytree(tree / key, layout.out / tree.name / key, dirs_exist_ok=True)
        student, assignment = key.split("/", 1)
        if shard in unfinished and shard.read_record(student, assignment) is None:
            why = f"its shard ({shard.out}) did not finish: run the same grading again"
            layout.save(SubmissionResult(student, assignment, [grader_failed(nb, why) for nb in
                                                               course.assignment(assignment).notebooks]))
    results = [result for result in layout.graded() if f"{result.student}/{result.assignment}" in owner]
    gradebook.prepare(db_url, course, {result.assignment for result in results})
    recorder = gradebook.Recorder(db_url, course, autograded)
    try:
        for result in results:
            folder = (layout.read_record(result.student, result.assignment) or {}).get("folder", "")
            recorder.record(result, folder or "/nonexistent")
            mark_recorded(layout, result.student, result.assignment, db_url)
    finally:
        recorder.close()
    return publish(course, layout, db_url), unfinished
