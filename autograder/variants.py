"""Per-student variants: each student's own numbers in a notebook, which the grader draws again.

A notebook has variants when course.yml marks some of its exercises `variant: true`.  Its solution
notebook then holds, in one locked cell, the numbers the shipped notebook shows and how each
student's are drawn (docs/authoring.md):

    DEFAULT_VARIANT = {...}        # the released notebook's numbers: nobody's variant
    def make_variant(rng): ...     # one student's numbers, drawn with rng (a random.Random)
    VARIANT = ...                  # variant.json beside the notebook, else DEFAULT_VARIANT

A student's numbers are drawn from a seed that only the course can make:

    key of an assignment = HMAC-SHA256(the course's secret, assignment id)
    seed of a student    = HMAC-SHA256(key of the assignment, notebook NUL student id)

so that knowing this scheme and another student's id is not enough.  The secret is created once, on
purpose (`make variant-secret`, mode 600, outside the repository, like the LMS key; never made
silently where it is missing, which would give every student other numbers) and goes into no
release, kit, zip or repository; Gradescope's zip carries the key of its one assignment
(`variant-key.json`), which the sandbox never shows to student code.  Each student receives
variant.json (`make variants`); the grader never reads it, and never trusts the notebook's cell:
it draws the student's numbers again from the id of the submission and writes them where the
notebook reads them.

Whose numbers a submission is graded on is one mapping, `Variants.whose`: the ids a submission comes
with (nbgrader's student id, the folder name under submitted/, which is also the push repository's
owner; Gradescope's sid and email) are looked up in the roster given to `make variants` (its
`student`, `sis_user_id` and `email` columns), recorded beside the secret and shipped in Gradescope's
zip.  An id that names no student of it, or two, is never graded on anybody's numbers: UnknownStudent,
which grading turns into a grader fault for the instructor.  It lives here because the id matters to
grading only through the seed of a student's numbers; the LMS maps graded students the other way.

The same record (`<secret>.handed-out.json`, mode 600, beside the secret and outside the repository)
says what of the secret's numbers has left the machine (variant.json files, a student's kit, a push,
Gradescope's zip): from then on `make variant-secret` refuses to replace the secret unless forced.
"""

import hashlib
import hmac
import json
import os
import random
import secrets
from datetime import datetime, timezone
from pathlib import Path

from autograder.course import CourseError
from autograder.files import PrivateFileError, read_private, write_atomic
from autograder.intake import student_name_problem
from autograder.reference import reference_namespace

FILENAME = "variant.json"            # beside the notebook, in each student's copy
KEY_FILE = "variant-key.json"        # Gradescope's zip: the key of its one assignment
SECRET_ENV = "COURSE_VARIANT_SECRET"  # another place for the secret (a path)
DEFAULT_SECRET = "~/.config/attention-course/variant-secret"
DEFAULTS = "the released notebook"   # whose numbers DEFAULT_VARIANT are, among the others'
HANDED_OUT = ".handed-out.json"      # beside the secret: the class's roster and what of its numbers left
MATCHED_BY = ("sis_user_id", "email")  # a roster's columns a submission's id may name a student by, besides `student`


_UNREAD = object()


class UnknownStudent(CourseError):
    """A submission's id names no student of the class's roster (or names two): graded on nobody's numbers."""


def has_variants(assignment):
    return any(notebook_has_variants(notebook) for notebook in assignment.notebooks)


def notebook_has_variants(notebook):
    return any(exercise.variant for exercise in notebook.exercises)


def with_variants(assignments):
    """The assignments among these that have variants; CourseError where none has."""
    chosen = [assignment for assignment in assignments if has_variants(assignment)]
    if not chosen:
        raise CourseError("no assignment with variants among " + (", ".join(a.id for a in assignments) or "those released"))
    return chosen


def secret_wanted(course):
    """Whether the course needs a variant secret it does not have yet (an assignment has variants, and none exists)."""
    return not secret_path(course).exists() and any(map(has_variants, course.assignments))


def require_student(course, assignment, student):
    """For an assignment with variants, a notebook graded on whose numbers: never a default's, never an id
    the class lacks; CourseError where `student` is not given or not of the roster."""
    if not has_variants(assignment):
        return
    if not student:
        raise CourseError(f"{assignment.id} has exercises on each student's own numbers: say whose notebook it "
                          "is with --student ID (the folder name under submitted/)")
    Variants.of(course).whose([student], "--student: ")


def secret_path(course):
    """Where the course's secret lives: $COURSE_VARIANT_SECRET, course.yml's variant_secret, or the default."""
    return Path(os.path.expanduser(os.environ.get(SECRET_ENV) or course.variant_secret or DEFAULT_SECRET))


def make_secret(path, course, graded=False, force=False):
    """Write a new secret to `path` (mode 600); replacing one is refused once grades exist or once any
    student's numbers have left the machine (the record beside it), unless forced, because every
    student's numbers change with it.  Returns what was done, in words."""
    path = Path(path)
    if course.root.resolve() in path.resolve().parents:
        raise CourseError(f"{path} lies inside the course repository: keep the variant secret outside it")
    if path.exists() and not force:
        left = [entry["what"] for entry in _read_record(path).get("left", [])]
        if left:
            raise CourseError(f"{path} exists and students' numbers drawn from it have left this machine ("
                              f"{'; '.join(left[-3:])}{f'; {len(left) - 3} more' if len(left) > 3 else ''}): a new "
                              "secret gives every student new numbers, so what they hold would no longer be theirs "
                              "(FORCE=1 replaces it knowingly, and forgets that record)")
        if graded:
            raise CourseError(f"{path} exists and grades exist: a new secret gives every student new numbers, "
                              "so their graded answers would no longer be theirs (FORCE=1 replaces it anyway)")
    path.parent.mkdir(parents=True, exist_ok=True)
    replaced = path.exists()
    _write_private(path, secrets.token_hex(32) + "\n")
    record_path(path).unlink(missing_ok=True)   # what left was drawn from the old secret
    return "replaced" if replaced else "made"


def _write_private(path, text):
    """Write a file only its owner reads (mode 600), whole."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def record_path(secret):
    """The record of what left the machine, beside the secret it was drawn from."""
    return Path(secret).with_name(Path(secret).name + HANDED_OUT)


def _fingerprint(secret_text):
    return hashlib.sha256(secret_text).hexdigest()[:16]


def _read_record(secret):
    """The record beside `secret`: {"secret", "students": {id: {column: value}}, "left": [{"what", "when"}]};
    empty where there is none, or where it was made for another secret (one replaced by hand)."""
    try:
        record = json.loads(record_path(secret).read_text())
        current = _fingerprint(Path(secret).read_bytes().strip())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) and record.get("secret") == current else {}


def note_handed_out(course, what, students=()):
    """Record that numbers drawn from the course's secret left this machine (`what`, in words), and
    the students they went to: ids, or {id: roster row} (the roster's MATCHED_BY columns are kept)."""
    path = secret_path(course)
    secret = read_secret(course)
    record = _read_record(path) or {"students": {}, "left": []}
    record["secret"] = _fingerprint(secret)
    rows = students if isinstance(students, dict) else {student: {} for student in students}
    for student, row in rows.items():
        known = record["students"].setdefault(student, {})
        known.update({column: (row.get(column) or "").strip() for column in MATCHED_BY if (row.get(column) or "").strip()})
    record["left"] = [entry for entry in record["left"] if entry["what"] != what]
    record["left"].append({"what": what, "when": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    _write_private(record_path(path), json.dumps(record, indent=1, sort_keys=True) + "\n")


def read_secret(course):
    path = secret_path(course)
    try:
        text = read_private(path, course.root, "the variant secret",
                            "make variant-secret makes the course's, once; copy it to every other machine "
                            "that grades").decode().strip()
    except PrivateFileError as error:
        raise CourseError(str(error)) from None
    if len(text) < 32:
        raise CourseError(f"{path} is not a variant secret (make variant-secret makes one)")
    return text.encode()


class Variants:
    """Every student's numbers of the course's notebooks with variants, drawn with the keys of their
    assignments (from the course's secret, or Gradescope's variant-key.json)."""

    def __init__(self, course, keys=None, roster=_UNREAD):
        self.course = course
        self._keys = dict(keys or {})
        self._secret = None
        self._drawn = {}   # (assignment, notebook, student) -> numbers: a class's draws, made once per process
        self._roster = roster   # student -> {column: value}; _UNREAD: the record beside the secret, read when asked
        self._source = ("the roster recorded by make variants" if roster is _UNREAD
                        else "the roster shipped in autograder.zip")

    @classmethod
    def of(cls, course):
        """The course's variants; where a variant-key.json lies beside course.yml (Gradescope), its key
        and the roster it was built with."""
        shipped = course.root / KEY_FILE
        if shipped.is_file():
            raw = json.loads(shipped.read_text())
            return cls(course, {raw["assignment"]: bytes.fromhex(raw["key"])}, raw.get("students") or {})
        return cls(course)

    def roster(self):
        """The students whose numbers were handed out (student -> {column: value}), as the roster given to
        `make variants` and the other ways out recorded them; None where this machine holds no record
        (a grading node given the secret alone, the demo): then the class's folders are its students."""
        if self._roster is _UNREAD:
            self._roster = _read_record(secret_path(self.course)).get("students")
        return self._roster

    def whose(self, ids, where=""):
        """The one mapping from a submission's ids (nbgrader's student id, the push repository's owner,
        Gradescope's sid then email) to the student whose numbers it is graded on: the roster's student
        named by one of them, in its `student`, `sis_user_id` or `email` column (emails compared without
        case).  UnknownStudent (one line, for the instructor, after `where`) where they name nobody, or two
        students."""
        given = [str(one).strip() for one in ids if one is not None and str(one).strip()]
        roster = self.roster()
        if roster is None:
            if not given:
                raise UnknownStudent(f"{where}no student id to draw numbers for")
            return given[0]
        found = sorted({student for one in given for student, row in roster.items()
                        if one == student or one == row.get("sis_user_id")
                        or one.casefold() == (row.get("email") or "").casefold()})
        if len(found) == 1:
            return found[0]
        named = " / ".join(repr(one) for one in given) or "no id"
        if found:
            raise UnknownStudent(f"{where}{named} names {' and '.join(found)} in {self._source}: "
                                 "graded on nobody's numbers; fix the roster, then grade it again")
        raise UnknownStudent(f"{where}{named} names no student of {self._source}, so it has no numbers of its own: "
                             "add the student (make variants ROSTER=roster.csv, and a new autograder.zip on "
                             "Gradescope), then grade it again")

    def require_keys(self, assignments):
        """The key of each of the assignments that has variants, made now: CourseError (one line) where the
        secret is missing or unsafe, before any grading starts; an assignment without variants needs none."""
        for assignment in assignments:
            if has_variants(assignment):
                self.key(assignment.id)

    def key(self, assignment_id):
        if assignment_id not in self._keys:
            if self._secret is None:
                self._secret = read_secret(self.course)
            self._keys[assignment_id] = hmac.new(self._secret, f"variant:{assignment_id}".encode(),
                                                 hashlib.sha256).digest()
        return self._keys[assignment_id]

    def seed(self, assignment, notebook, student):
        digest = hmac.new(self.key(assignment.id), f"{notebook.name}\0{student}".encode(), hashlib.sha256).digest()
        return int.from_bytes(digest[:8], "big")

    def _declared(self, assignment, notebook):
        namespace = reference_namespace(self.course.source_notebook(assignment, notebook))
        if not callable(namespace.get("make_variant")) or not isinstance(namespace.get("DEFAULT_VARIANT"), dict):
            raise CourseError(f"{assignment.id}/{notebook.name}: course.yml marks exercises `variant: true`, but "
                              "the solution notebook defines no make_variant(rng) and DEFAULT_VARIANT "
                              "(docs/authoring.md)")
        return namespace

    def default(self, assignment, notebook):
        return json.loads(json.dumps(self._declared(assignment, notebook)["DEFAULT_VARIANT"]))

    def draw(self, assignment, notebook, student):
        """The numbers a submission of `student` is graded on (JSON's types, as variant.json gives them to the
        notebook): those of the roster's student the id names (whose); UnknownStudent where it names none."""
        return self.numbers(assignment, notebook, self.whose([student]))

    def numbers(self, assignment, notebook, student):
        """One student's numbers of a notebook, whoever the id is (what is handed out to them)."""
        key = (assignment.id, notebook.name, student)
        if key not in self._drawn:
            made = self._declared(assignment, notebook)["make_variant"](random.Random(self.seed(assignment, notebook, student)))
            self._drawn[key] = json.dumps(made)
        return json.loads(self._drawn[key])   # a copy: what a suite does with it changes no other's

    def others(self, assignment, notebook, student, classmates):
        """{whose: numbers} of the released notebook and of each classmate but `student`."""
        found = {DEFAULTS: self.default(assignment, notebook)}
        for other in sorted(set(classmates) - {student}):
            found[other] = self.numbers(assignment, notebook, other)
        return found

    def file_text(self, assignment, student):
        """variant.json as the grader writes it beside a submission of `student` (whose numbers: whose)."""
        return self.handed_out_text(assignment, self.whose([student]))

    def handed_out_text(self, assignment, student):
        """variant.json of one student's copy of an assignment, whoever the id is (what is handed out)."""
        notebooks = {notebook.name: self.numbers(assignment, notebook, student)
                     for notebook in assignment.notebooks if notebook_has_variants(notebook)}
        return json.dumps({"student": student, "assignment": assignment.id, "notebooks": notebooks}) + "\n"

    def write_files(self, assignments, students, out):
        """variant.json of every student's copy of every assignment with variants, into out/<student>/<assignment>/;
        returns the paths written."""
        written = []
        for student in students:
            problem = student_name_problem(student)
            if problem:
                raise CourseError(f"{student!r} cannot name a student's folder ({problem}): no variant.json was written")
        for student in students:
            for assignment in assignments:
                if has_variants(assignment):
                    path = Path(out) / student / assignment.id / FILENAME
                    write_atomic(path, self.handed_out_text(assignment, student))
                    written.append(path)
        return written

    def key_file_text(self, assignment):
        """Gradescope's variant-key.json: the key of this one assignment, never the course's secret, and the
        roster recorded by `make variants` (the ids Gradescope's sid or email are matched to, no names);
        CourseError where no roster is recorded, since every submission would then be a grader fault."""
        roster = self.roster()
        if not roster:
            raise CourseError(f"{assignment.id} has per-student numbers and no roster is recorded beside the secret: "
                              "run `make variants ROSTER=roster.csv` first (Gradescope's sid or email are matched "
                              "to its student, sis_user_id and email columns)")
        return json.dumps({"assignment": assignment.id, "key": self.key(assignment.id).hex(),
                           "students": roster}, sort_keys=True) + "\n"
