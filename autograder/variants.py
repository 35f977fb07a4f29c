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
"""

import hashlib
import hmac
import json
import os
import random
import secrets
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


def has_variants(assignment):
    return any(notebook_has_variants(notebook) for notebook in assignment.notebooks)


def notebook_has_variants(notebook):
    return any(exercise.variant for exercise in notebook.exercises)


def secret_path(course):
    """Where the course's secret lives: $COURSE_VARIANT_SECRET, course.yml's variant_secret, or the default."""
    return Path(os.path.expanduser(os.environ.get(SECRET_ENV) or course.variant_secret or DEFAULT_SECRET))


def make_secret(path, course, graded=False, force=False):
    """Write a new secret to `path` (mode 600); replacing one is refused once grades exist unless forced,
    because every student's numbers change with it.  Returns what was done, in words."""
    path = Path(path)
    if course.root.resolve() in path.resolve().parents:
        raise CourseError(f"{path} lies inside the course repository: keep the variant secret outside it")
    if path.exists() and graded and not force:
        raise CourseError(f"{path} exists and grades exist: a new secret gives every student new numbers, "
                          "so their graded answers would no longer be theirs (FORCE=1 replaces it anyway)")
    path.parent.mkdir(parents=True, exist_ok=True)
    replaced = path.exists()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32) + "\n")
    os.replace(temporary, path)
    return "replaced" if replaced else "made"


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

    def __init__(self, course, keys=None):
        self.course = course
        self._keys = dict(keys or {})
        self._secret = None
        self._drawn = {}   # (assignment, notebook, student) -> numbers: a class's draws, made once per process

    @classmethod
    def of(cls, course):
        """The course's variants; where a variant-key.json lies beside course.yml (Gradescope), its key."""
        shipped = course.root / KEY_FILE
        if shipped.is_file():
            raw = json.loads(shipped.read_text())
            return cls(course, {raw["assignment"]: bytes.fromhex(raw["key"])})
        return cls(course)

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
        """One student's numbers of a notebook: JSON's types, as variant.json gives them to the notebook."""
        key = (assignment.id, notebook.name, student)
        if key not in self._drawn:
            made = self._declared(assignment, notebook)["make_variant"](random.Random(self.seed(assignment, notebook, student)))
            self._drawn[key] = json.dumps(made)
        return json.loads(self._drawn[key])   # a copy: what a suite does with it changes no other's

    def others(self, assignment, notebook, student, classmates):
        """{whose: numbers} of the released notebook and of each classmate but `student`."""
        found = {DEFAULTS: self.default(assignment, notebook)}
        for other in sorted(set(classmates) - {student}):
            found[other] = self.draw(assignment, notebook, other)
        return found

    def file_text(self, assignment, student):
        """variant.json of one student's copy of an assignment."""
        notebooks = {notebook.name: self.draw(assignment, notebook, student)
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
                    write_atomic(path, self.file_text(assignment, student))
                    written.append(path)
        return written

    def key_file_text(self, assignment):
        """Gradescope's variant-key.json: the key of this one assignment, never the course's secret."""
        return json.dumps({"assignment": assignment.id, "key": self.key(assignment.id).hex()}) + "\n"
