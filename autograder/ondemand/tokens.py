"""Who is checking: each student's token, so that the check server keeps no account database; and
what the student kit carries for checks (hand_out).

    signing key = HMAC-SHA256(the course's variant secret, "check-token")
    token       = a JSON Web Token (HS256, PyJWT) whose subject is the student's id and whose
                  audience is this course's check server

The instructor's `make student-kit STUDENT=id` writes the token, with the server's address and the
student's id, into check-server.json beside the notebooks; the student's check.py sends the id and the
token; the server verifies the signature (HS256 only: a token that names another algorithm, `none`
among them, is refused) and that the token's subject is the id sent.  The key is derived, not the
secret itself, so a token reveals nothing of the numbers the secret draws.  A JWT and not a bare MAC:
it carries the id it was made for and the course it is valid for in a format with a maintained
verifier, so the server never parses a token of its own making.
"""

import hashlib
import hmac
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import jwt

from autograder.course import CourseError
from autograder.files import write_atomic
from autograder.intake import student_name_problem
from autograder.variants import read_secret

KIT_FILE = "check-server.json"   # beside the notebooks in a student's kit: the server, the id, the token
ALGORITHM = "HS256"
CLIENT = Path(__file__).resolve().parent.parent / "kit" / "check.py"   # the student's side


class Refused(Exception):
    """A check refused before any grading: an HTTP status and one line for the student."""

    def __init__(self, status, message, retry_after=None):
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


def signing_key(course):
    return hmac.new(read_secret(course), b"check-token", hashlib.sha256).digest()


def audience(course):
    return f"check-server:{course.name}"


def issue(course, student, key=None):
    """A student's token; CourseError where the id cannot name a student."""
    problem = student_name_problem(student)
    if problem:
        raise CourseError(f"{student!r} cannot name a student ({problem}): no check token was made")
    return jwt.encode({"sub": student, "aud": audience(course)}, key or signing_key(course), algorithm=ALGORITHM)


def subject(key, course, token):
    """The student `token` was made for; Refused (401) where it is missing or this course did not sign it."""
    if not token:
        raise Refused(401, "no token: check() reads it from check-server.json in your kit (ask your instructor for "
                           "your kit)")
    try:
        claims = jwt.decode(token, key, algorithms=[ALGORITHM], audience=audience(course),
                            options={"require": ["sub", "aud"]})
    except jwt.InvalidTokenError:
        raise Refused(401, "this token was not made by this course's check server (ask your instructor for "
                           "your kit)") from None
    return claims["sub"]


def verify(key, course, token, student):
    """The student a check is from: `student`, when `token` is theirs; Refused (401, 403) otherwise."""
    subject_ = subject(key, course, token)
    return Caller(subject_, (subject_,)).claims(student)


@dataclass(frozen=True)
class Caller:
    """Who sent a request, as its headers prove it: the student, and the ids a check of theirs may be sent
    with (the student's id; on a hub also the hub's name of them)."""
    student: str
    names: tuple

    def claims(self, claimed):
        """The student, where `claimed` (the id a check was sent with) is one of their names; Refused (403) otherwise."""
        if claimed not in self.names:
            raise Refused(403, f"this token is not {claimed}'s")
        return self.student


class CourseTokens:
    """Who sent a request outside a hub (`Authorization: Bearer <token>`), as hub.HubStudents on one."""

    def __init__(self, course):
        self.course, self.key = course, signing_key(course)

    async def caller(self, authorization):
        """The Caller the token names, from the request's headers alone (before any byte of its body);
        Refused (401) where it is missing or no token of this course's."""
        student = subject(self.key, self.course, (authorization or "").removeprefix("Bearer ").strip())
        return Caller(student, (student,))


def kit_file_text(course, student):
    return json.dumps({"server": course.check_server.address, "student": student,
                       "token": issue(course, student)}, indent=1) + "\n"


def write_kit_file(course, folder, student):
    """check-server.json of one student's kit, in `folder` (the kit's root, above the notebooks)."""
    path = folder / KIT_FILE
    write_atomic(path, kit_file_text(course, student))
    path.chmod(0o600)
    return path


def hand_out(course, folder, assignments, student=None):
    """What a kit carries for checks: check.py beside the notebooks of each assignment whose checks
    course.yml opens, and in one student's kit their check-server.json at the kit's root."""
    opened = [assignment for assignment in assignments if assignment.checks.open]
    for assignment in opened:
        shutil.copyfile(CLIENT, folder / assignment.id / CLIENT.name)
    if student is not None and opened:
        write_kit_file(course, folder, student)
