"""A class run's tasks: the submissions under submitted/ (read once), what each one's grade depends
on (its fingerprint), the selection (students, assignments, shard, what changed), the faults set
aside, and the order the grading processes take them in."""

import difflib
import fnmatch
import hashlib
from dataclasses import dataclass
from pathlib import Path

from autograder.course import CourseError
from autograder.intake import SubmissionError, printable, submission_folders
from autograder.results import NOT_SUBMITTED, from_record
from autograder.submission import digest_files  # a fingerprint reads what the grader reads
from autograder.variants import Variants, has_variants


@dataclass(frozen=True)
class Task:
    student: str
    assignment: str
    folder: str
    fingerprint: str = ""
    problem: str = ""      # why the folder is not graded at all (a link, an odd name), or ""
    missing: bool = False  # the student handed in nothing for this assignment (others of the class did)
    exercises: tuple = ()  # the only exercises to grade (grade-class --exercise: an author's check), or () for all

    @property
    def key(self):
        return f"{self.student}/{self.assignment}"

    @property
    def handed_in(self):
        """Whether there is a submission folder to grade (not an assignment the student never handed in)."""
        return not self.missing and Path(self.folder).is_dir()


@dataclass(frozen=True)
class Stray:
    """Something under submitted/ that is no submission: shown at the end of the run."""
    path: str
    reason: str


def read_class(submitted):
    """What is under `submitted`, read from the disk once for a run (intake.submission_folders):
    (student, folder name, folder, problem) for each entry; CourseError where it cannot be read."""
    try:
        return submission_folders(submitted)
    except SubmissionError as error:
        raise CourseError(str(error)) from None


def find_submissions(course, submitted, assignment_ids=None, folders=None):
    """([(student, assignment, folder, problem, missing)], [Stray]) for the class under `submitted`, sorted;
    folders: read_class(submitted), where the caller read it already.

    `problem` is "" for a folder to grade, or why it cannot be graded (a link, an odd name): such a
    submission gets a row with score 0 and the reason.  A student who handed in some assignments
    gets a row for each other one that the class handed in, saying it was not submitted (`missing`)."""
    known = {assignment.id for assignment in course.assignments}
    found, strays, misnamed = [], [], {}
    for student, name, folder, problem in read_class(submitted) if folders is None else folders:
        where = f"{printable(student)}/{printable(name)}" if name else printable(student)
        if not name or (problem and name not in known):
            strays.append(Stray(where, problem))
        elif name not in known:
            guess = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.5)
            reason = "no such assignment in course.yml" + (f"; did you mean {guess[0]}?" if guess else "")
            strays.append(Stray(where, reason))
            misnamed.setdefault(student, []).append(f"{where} ({reason})")
        elif not assignment_ids or name in assignment_ids:
            found.append((student, course.assignment(name), folder, problem, False))
    students = sorted({entry[0] for entry in found} | set(misnamed))
    assignments = {entry[1].id: entry[1] for entry in found}
    if not assignments and misnamed:
        assignments = {a.id: a for a in course.assignments if not assignment_ids or a.id in assignment_ids}
    present = {(entry[0], entry[1].id) for entry in found}
    for student in students:
        for assignment_id, assignment in assignments.items():
            if (student, assignment_id) not in present:
                note = "; ".join(misnamed.get(student, []))
                found.append((student, assignment, Path(submitted) / student / assignment_id,
                              f"{NOT_SUBMITTED}; found {note} instead" if note else "", True))
    return sorted(found, key=lambda entry: (entry[0], entry[1].id)), strays


def class_students(course, submitted, folders=None):
    """Every student of the class under `submitted`, whatever they handed in (folders: as find_submissions)."""
    return tuple(sorted({student for student, *_ in find_submissions(course, submitted, folders=folders)[0]}))


def check_selection(course, submitted, assignments=None, exercises=()):
    """The submissions folder as a Path; CourseError when it is missing or an assignment or exercise id
    is unknown (an unknown id is an error, not an empty run)."""
    submitted = Path(submitted)
    if not submitted.is_dir():
        raise CourseError(f"no submissions folder at {submitted}")
    for assignment in assignments or []:
        course.assignment(assignment)
    known = {exercise.id for assignment in course.assignments for exercise in assignment.exercises
             if not assignments or assignment.id in assignments}
    for exercise in exercises:
        if exercise not in known:
            raise CourseError(f"no exercise {exercise!r} in {', '.join(assignments) if assignments else 'the course'}")
    return submitted


# -- what a grade depends on ----------------------------------------------------------------------

def in_shard(task, shard):
    """shard = (k, n), 1-based: a deterministic 1/n of the submissions, by a hash of their key."""
    if shard is None:
        return True
    k, n = shard
    return int(hashlib.sha256(task.key.encode()).hexdigest(), 16) % n == k - 1


def _hash_files(digest, paths):
    for path in paths:
        digest.update(str(path).encode())
        try:
            digest.update(Path(path).read_bytes())
        except OSError:
            digest.update(b"<missing>")


def grading_files(course, assignments):
    """The files grading the assignments reads besides the submissions: the grader's code (the suites
    among it), course.yml, and each notebook's solution and release."""
    package = Path(__file__).resolve().parent.parent
    files = sorted(package.rglob("*.py")) + [course.root / "course.yml"]
    for assignment in assignments:
        for notebook in assignment.notebooks:
            files += [course.source_notebook(assignment, notebook), course.release_notebook(assignment, notebook)]
    return files


def course_fingerprint(course, assignment):
    """What grading an assignment depends on, besides the submission itself."""
    digest = hashlib.sha256()
    _hash_files(digest, grading_files(course, [assignment]))
    if has_variants(assignment):   # a new secret gives every student new numbers: all is graded again
        digest.update(hashlib.sha256(Variants.of(course).key(assignment.id)).digest())
    return digest.hexdigest()


def fingerprint(course_part, assignment, folder, problem=""):
    """What a submission's grade depends on: the course's part, and its files as the grader reads them."""
    digest = hashlib.sha256(course_part.encode() + problem.encode())
    if not problem:
        digest_files(digest, folder, [notebook.filename for notebook in assignment.notebooks] + ["timestamp.txt"])
    return digest.hexdigest()[:32]


# -- the selection ---------------------------------------------------------------------------------

def select_tasks(course, submitted, layout, *, assignments=None, students=None, shard=None, force=False,
                 exercises=(), folders=None):
    """All tasks selected by the filters, those among them that need grading, and the strays.
    exercises: the only exercises to grade, or () for all (a part grades again as a whole, and back);
    folders: read_class(submitted), where the caller read it already."""
    parts = {}
    tasks = []
    found, strays = find_submissions(course, submitted, assignments, folders)
    for student, assignment, folder, problem, missing in found:
        if students and not any(fnmatch.fnmatchcase(student, pattern) for pattern in students):
            continue
        if assignment.id not in parts:
            parts[assignment.id] = course_fingerprint(course, assignment) + " ".join(sorted(exercises))
        task = Task(student, assignment.id, str(folder),
                    fingerprint(parts[assignment.id], assignment, folder, problem), problem, missing, tuple(exercises))
        if in_shard(task, shard):
            tasks.append(task)
    pending = [task for task in tasks if force or not done(layout, task)]
    return tasks, pending, strays


def done(layout, task):
    """Whether the task's stored record stands: graded as the task is now, and not a grader fault
    (unless set aside: the same fault on this work in two runs)."""
    record = layout.read_record(task.student, task.assignment)
    return (record is not None and record.get("fingerprint") == task.fingerprint
            and (bool(record.get("set_aside")) or not faulted(layout, task)))


def faulted(layout, task):
    """Whether the task's stored record is a grader fault (a record that cannot be read counts as one)."""
    record = layout.read_record(task.student, task.assignment)
    try:
        return record is not None and from_record(record).faulted
    except (KeyError, TypeError, ValueError, AttributeError):
        return True


SET_ASIDE = (" (set aside: the same fault on unchanged work in two runs; not graded again until the work "
             "changes, or make grade FORCE=1 / --force)")


def fault_on_this_work(layout, task):
    """The grader fault the stored record holds for the task's work as it is now (its fingerprint), or ""."""
    record = layout.read_record(task.student, task.assignment)
    if record is None or record.get("fingerprint") != task.fingerprint:
        return ""
    try:
        return record.get("set_aside") or from_record(record).fault
    except (KeyError, TypeError, ValueError, AttributeError):
        return ""


def set_aside(layout, task):
    """Mark the task's fault set aside for the instructor: its record stands (done) and its reason says so
    (grades.csv, the console), until the work changes or a forced run grades it again."""
    record = layout.read_record(task.student, task.assignment)
    result = from_record(record)
    fault = result.fault
    for notebook in result.notebooks:
        if notebook.fault:
            notebook.fault += SET_ASIDE
    layout.save(result, fingerprint=record["fingerprint"], folder=record.get("folder", task.folder), set_aside=fault)


def set_aside_tasks(layout, tasks):
    """The tasks whose stored fault is set aside for the instructor."""
    return [task for task in tasks if fault_on_this_work(layout, task)
            and (layout.read_record(task.student, task.assignment) or {}).get("set_aside")]


# -- the order ---------------------------------------------------------------------------------------

def costliest_first(course, tasks):
    """The tasks in the order the grading processes take them: the submissions of the assignments whose
    checks cost most first (kernels run in Triton's interpreter, then measured tests, then exercises),
    so that a run ends on short submissions and its grading processes finish together."""
    def cost(task):
        assignment = course.assignment(task.assignment)
        return (bool(assignment.kernel_kind), sum(len(exercise.measured) for exercise in assignment.exercises),
                len(assignment.exercises))
    return sorted(tasks, key=cost, reverse=True)   # stable: in the order given within an assignment
