"""The term's folder of a local hub, made as root before the hub starts (idempotent: a second run reuses
what the first made).

    <state>/hub/          root's (700): hub.json (what jupyterhub_config.py reads), the hub's database,
                          cookie secret and proxy pid, the accounts this folder created
    <state>/exchange/     nbgrader's exchange: root's, sticky and world-writable (1777), as nbgrader asks;
                          the course's folder in it (inbound, outbound, feedback) the instructor's, made
                          here before the exchange opens to everyone
    <state>/student-lib/  root's, readable by all: the only code of the course on a student's PYTHONPATH,
                          copies of what their server imports (nbgrader's fetch with variants, check.py)
    <state>/jupyter/<role>/  the Jupyter configuration of the students' and the instructor's servers
                          (JUPYTER_CONFIG_PATH): the course id, the exchange, the fetch with variants
    <state>/home/<user>/  each account's home; the instructor's holds the course: attention/

The instructor's course (their checkout, as on any machine they grade on): course.yml with this term's
dates of the assignment (its due date also in nbgrader's gradebook), solutions/ and exercises/ (the
repository's), nbgrader_config.py (the course's, pointed at this exchange), the variant secret beside it
(outside the course folder) and the roster recorded by `variants`, so each student's numbers and the
grading agree on who is who.

Deny by default: the checkout holds what no student may read (the hidden suites, the solutions, the
catalogue of mistakes, grading outputs), and every account runs its servers from the checkout's .venv.
So the checkout's root lets others enter it (o+x) but not list it, each of its entries but .venv is
closed to other accounts, and both are given to the instructor's group (close_the_checkout; `undo` restores them).
"""

import csv
import grp
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from autograder.course import ROOT, CourseError
from autograder.lms import read_roster

VENV_BIN = Path(sys.executable).parent
PROXY = Path(__file__).resolve().parent / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
COURSE_FOLDER = "attention"   # the instructor's copy of the course, in their home
DEMO_PASSWORD = "attention-demo"   # the demo's shared password (make hub PASSWORD=... to change it)
DEMO_ROSTER = [("alice", "Liddell, Alice", "alice@example.org"), ("bob", "Builder, Bob", "bob@example.org")]
ACCOUNT_COMMENT = "attention course hub"   # the comment (GECOS) of the accounts prepare makes
LATE_POLICY = {"percent_per_day": 10, "grace_minutes": 0, "max_percent": 50}   # the demo term's
# What a student's server imports of the course, at the same import names: nbgrader's fetch with variants
# (c.ExchangeFactory.fetch_assignment) and the kit's check.py (`from check import check`); neither
# imports anything else of the grader's.
STUDENT_LIB = {"autograder/hub/exchange.py": Path(__file__).resolve().parent / "exchange.py",
               "check.py": ROOT / "autograder" / "kit" / "check.py"}
# The course's folders in the exchange, with the modes nbgrader's release_assignment and release_feedback
# give them: the instructor's, entered by all, inbound writable by all but listed by none (setgid).
EXCHANGE_FOLDERS = {".": 0o755, "outbound": 0o755, "inbound": 0o2733, "feedback": 0o711}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Term:
    """What a local hub is made of; hub.json holds it for jupyterhub_config.py."""
    state: str
    roster: str = ""                 # CSV with a `student` column (lms.read_roster); "" makes the demo's
    instructor: str = "instructor"
    assignment: str = "attention_basics"
    due: str = ""                    # ISO time; "" is a week from now
    password: str = DEMO_PASSWORD
    port: int = 8000                 # where the browser goes (the proxy's public port, on loopback)
    hub_port: int = 0                # the hub's own API, the proxy's API, the check service: 0 picks free ones
    proxy_api_port: int = 0
    checks_port: int = 0
    checks_jobs: int = 1
    students: list = field(default_factory=list)
    created: list = field(default_factory=list)   # accounts this folder created (undo removes them)
    opened: list = field(default_factory=list)    # [folder, its mode] given o+x here (undo restores them)
    closed: list = field(default_factory=list)    # [entry, its mode, its group] of the checkout closed here

    @property
    def folder(self):
        return Path(self.state)

    def home(self, user):
        """The account's home: its own where it existed before this folder, else in the folder."""
        try:
            return Path(pwd.getpwnam(user).pw_dir)
        except KeyError:
            return self.folder / "home" / user

    @property
    def course(self):
        return self.home(self.instructor) / COURSE_FOLDER

    @property
    def exchange(self):
        return self.folder / "exchange"

    @property
    def student_lib(self):
        return self.folder / "student-lib"

    def config_dir(self, role):
        return self.folder / "jupyter" / role

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def save(self):
        write(self.folder / "hub" / "hub.json", json.dumps(asdict(self), indent=1) + "\n", mode=0o600)

    @classmethod
    def load(cls, state):
        return cls(**json.loads((Path(state) / "hub" / "hub.json").read_text()))


def write(path, text, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def closed_on_the_way(path):
    """The folders on the way to `path` (itself included) that other accounts cannot enter."""
    path = Path(os.path.realpath(path))
    return [place for place in [*reversed(path.parents), path]
            if place.is_dir() and not place.stat().st_mode & stat.S_IXOTH]


def check_machine(term):
    """CourseError (one line) for what this machine lacks before a hub can start on it."""
    if os.geteuid() != 0:
        raise CourseError("make hub runs as root: the hub starts each user's server as their own system account")
    if not PROXY.exists():
        raise CourseError(f"no configurable-http-proxy at {PROXY}: run `npm ci` in {PROXY.parents[2]} (make hub does)")


def open_the_way(term):
    """Every account runs the course's Python and code (the repository, its .venv and the interpreter the
    .venv links to, which pyenv keeps in root's home): the folders on the way that others cannot enter get
    the right to enter (o+x, not to list: o+r is left as it was), recorded in hub.json for `undo`."""
    interpreter = Path(os.path.realpath(VENV_BIN / "python"))
    for needed in (ROOT, VENV_BIN, interpreter.parent.parent, term.folder):
        for place in closed_on_the_way(needed):
            mode = place.stat().st_mode & 0o7777
            term.opened.append([str(place), mode])
            place.chmod(mode | stat.S_IXOTH)


def close_the_checkout(term, checkout=ROOT):
    """Deny by default: other accounts may enter the checkout (its .venv runs every server) but not list
    it, and reach none of its entries but .venv (the hidden suites, solutions/, tests/, grading outputs,
    .git). The checkout and each entry go to the instructor's group, group write off, so their server,
    formgrader and the check service still read the course (Python lists the checkout to import from it). Modes and groups as they were are kept for `undo` (once:
    a second prepare keeps the first's). Entries made later are not closed; links are left alone.
    CourseError (one line) where another account is in that group: it would read the course too."""
    group = pwd.getpwnam(term.instructor).pw_gid
    sharing = sorted({*grp.getgrgid(group).gr_mem, *(account.pw_name for account in pwd.getpwall()
                                                     if account.pw_gid == group)} - {term.instructor})
    if sharing:
        raise CourseError(f"the instructor {term.instructor}'s group {grp.getgrgid(group).gr_name} also holds "
                          f"{', '.join(sharing)}, and the checkout is given to it: give the instructor a group of "
                          "their own")
    recorded = {place for place, _, _ in term.closed}

    def close(place, mode, gid):
        info = os.lstat(place)
        if str(place) not in recorded:
            term.closed.append([str(place), stat.S_IMODE(info.st_mode), info.st_gid])
        os.chown(place, -1, gid)
        place.chmod(mode(stat.S_IMODE(info.st_mode)))

    close(checkout, lambda mode: mode & ~0o026 | stat.S_IXOTH, group)
    for entry in sorted(checkout.iterdir()):
        if entry.name != ".venv" and not entry.is_symlink():
            close(entry, lambda mode: mode & ~0o027, group)


def write_student_lib(term):
    """The student-lib, afresh: copies of STUDENT_LIB's files, root's and readable by all."""
    shutil.rmtree(term.student_lib, ignore_errors=True)
    for name, source in STUDENT_LIB.items():
        (term.student_lib / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, term.student_lib / name)
    for path in [term.student_lib, *term.student_lib.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def environment(term, user):
    """What the course sets in a user's processes (the hub's pre_spawn, as_user): the course's Python;
    on PYTHONPATH the checkout and its kit for the instructor, the student-lib alone for a student."""
    instructor = user == term.instructor
    return {"PATH": f"{VENV_BIN}:/usr/bin:/bin",
            "PYTHONPATH": f"{ROOT}:{ROOT / 'autograder' / 'kit'}" if instructor else str(term.student_lib),
            "JUPYTER_CONFIG_PATH": str(term.config_dir("instructor" if instructor else "student")),
            "MPLBACKEND": "Agg"}


# -- accounts ------------------------------------------------------------------------------------

def ensure_account(term, user):
    """The system account `user` with its home in the term's folder; made here unless it exists."""
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        account = None
    if account is not None:   # an account of this machine's, or of an earlier run: its home, made if gone
        home = Path(account.pw_dir)
        if not home.is_dir():
            home.mkdir(parents=True, mode=0o700)
            os.chown(home, account.pw_uid, account.pw_gid)
        return False
    term.home(user).parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["useradd", "--create-home", "--home-dir", str(term.home(user)), "--user-group",
                    "--shell", "/bin/bash", "--comment", ACCOUNT_COMMENT, user],
                   check=True, capture_output=True, text=True, timeout=60)
    term.home(user).chmod(0o700)   # a student's work, the instructor's course and roster: their own
    return True


def undo(term):
    """Remove the accounts this term's folder created (their homes stay in the folder) and close again
    the folders it opened, and open again the checkout's entries it closed."""
    for user in term.created:
        subprocess.run(["userdel", user], capture_output=True, text=True, timeout=60)
    for place, mode, gid in reversed(term.closed):
        if os.path.lexists(place):
            os.chown(place, -1, gid)
            Path(place).chmod(mode)
    for place, mode in reversed(term.opened):
        Path(place).chmod(mode)
    term.created, term.opened, term.closed = [], [], []


def as_user(term, user, *command, cwd=None):
    """Run `command` as `user` with the course's Python, as the hub would start it; its output on failure."""
    account = pwd.getpwnam(user)
    env = {"HOME": account.pw_dir, "USER": user, "LANG": "C.UTF-8", **environment(term, user)}
    done = subprocess.run(["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups",
                           "env", "-i", *[f"{k}={v}" for k, v in env.items()], *map(str, command)],
                          cwd=cwd or account.pw_dir, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise CourseError(f"{' '.join(map(str, command[:4]))} as {user} failed: "
                          + (done.stderr.strip().splitlines() or ["no output"])[-1])
    return done.stdout


# -- the course, the exchange, the configuration ---------------------------------------------------

def demo_roster(term):
    path = term.folder / "hub" / "demo-roster.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "name", "email"])
        writer.writerows(DEMO_ROSTER)
    return path


def course_yml(term):
    """The course's course.yml with this term's assignment alone, its dates, a late policy and the secret's place."""
    raw = yaml.safe_load((ROOT / "course.yml").read_text())
    raw["assignments"] = [a for a in raw["assignments"] if a["id"] == term.assignment]
    if not raw["assignments"]:
        raise CourseError(f"course.yml has no assignment {term.assignment!r}")
    raw["assignments"][0].update(release=(datetime.now(timezone.utc) - timedelta(days=1)).isoformat(timespec="seconds"),
                                 due=term.due)
    raw.pop("released", None)
    raw["late_policy"] = LATE_POLICY
    raw["variant_secret"] = str(term.home(term.instructor) / ".config" / "attention-course" / "variant-secret")
    return yaml.safe_dump(raw, sort_keys=False)


INSTRUCTOR_NBGRADER = """\
# The course's own nbgrader configuration (the hidden suites in formgrader's Autograde, the late policy),
# pointed at this course folder and the hub's exchange.
c = get_config()  # noqa: F821
exec(open({config!r}).read(), {{"get_config": lambda: c, "__file__": {config!r}}})
c.CourseDirectory.root = {course!r}
c.CourseFile.course_file = {course_yml!r}
c.Exchange.root = {exchange!r}
"""

STUDENT_NBGRADER = """\
# A student's nbgrader on the course's hub: the course, its exchange, and the fetch that also brings the
# student's own variant.json from the hub's `checks` service (autograder/hub/exchange.py).
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = {course_id!r}
c.Exchange.root = {exchange!r}
c.ExchangeFactory.fetch_assignment = "autograder.hub.exchange.FetchWithVariant"
c.FetchWithVariant.service_url = {service_url!r}
"""


def course_id():
    """The course id of the course's nbgrader_config.py (the exchange's folder of the course)."""
    from traitlets.config import Config
    config = Config()
    path = ROOT / "nbgrader_config.py"
    exec(path.read_text(), {"get_config": lambda: config, "__file__": str(path)})
    return config.CourseDirectory.course_id


def write_course(term):
    course = term.course
    owner = pwd.getpwnam(term.instructor)
    course.mkdir(parents=True, exist_ok=True)
    write(course / "course.yml", course_yml(term))
    # the term's assignment alone: formgrader lists what solutions/ holds
    for name in (f"solutions/{term.assignment}", f"exercises/{term.assignment}", "requirements.txt", "autograder/kit"):
        (course / name).parent.mkdir(exist_ok=True)
        if not (course / name).is_symlink():
            (course / name).symlink_to(ROOT / name)
    write(course / "nbgrader_config.py", INSTRUCTOR_NBGRADER.format(
        config=str(ROOT / "nbgrader_config.py"), course=str(course), course_yml=str(course / "course.yml"),
        exchange=str(term.exchange)))
    shutil.copy(term.roster, course / "roster.csv")
    for path in [term.home(term.instructor), *course.rglob("*")]:
        if not path.is_symlink():
            os.chown(path, owner.pw_uid, owner.pw_gid)
    os.chown(course, owner.pw_uid, owner.pw_gid)
    write(term.config_dir("instructor") / "nbgrader_config.py",
          f"c = get_config()  # noqa: F821\nexec(open({str(course / 'nbgrader_config.py')!r}).read())\n")


def write_student_config(term):
    config = term.config_dir("student")
    write(config / "nbgrader_config.py", STUDENT_NBGRADER.format(
        course_id=course_id(), exchange=str(term.exchange), service_url=f"{term.url}/services/checks/"))
    # Formgrader is the instructor's: a student's server does not load it.
    write(config / "jupyter_server_config.json",
          json.dumps({"ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.formgrader": False}}}) + "\n")


def make_exchange(term):
    """nbgrader's exchange, root's, and the course's folders in it the instructor's (EXCHANGE_FOLDERS),
    made while the exchange is closed to others; then it opens to all (1777). CourseError (one line)
    where one of them exists and is not the instructor's folder: an account that makes the course's
    folder first holds the course's releases (nbgrader refuses the instructor's) and plants notebooks."""
    owner = pwd.getpwnam(term.instructor)
    term.exchange.mkdir(parents=True, exist_ok=True)
    os.chown(term.exchange, 0, 0)
    term.exchange.chmod(0o755)
    course = term.exchange / course_id()
    for name, mode in EXCHANGE_FOLDERS.items():
        place = course / name
        if not os.path.lexists(place):
            place.mkdir()
            os.chown(place, owner.pw_uid, owner.pw_gid)
        found = os.lstat(place)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != owner.pw_uid:
            raise CourseError(f"{os.path.normpath(place)} is {account_name(found.st_uid)}'s, not a folder of the "
                              f"instructor {term.instructor}'s: made before the course's first release, it would "
                              "hold the course's releases; remove it, then start the hub again")
        place.chmod(mode)
    term.exchange.chmod(0o1777)


def account_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def prepare(term):
    """Make (or reuse) everything the hub needs; returns the term, saved in hub.json."""
    for folder in (term.folder, term.folder / "home", term.folder / "jupyter"):
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o755)
    (term.folder / "hub").mkdir(exist_ok=True)
    (term.folder / "hub").chmod(0o700)
    check_machine(term)
    open_the_way(term)
    term.roster = str(term.roster or demo_roster(term))
    term.students = sorted(read_roster(term.roster))
    if term.instructor in term.students:
        raise CourseError(f"{term.instructor} is on the roster and is the instructor: give the instructor another name")
    term.due = term.due or (datetime.now(timezone.utc) + timedelta(days=7)).isoformat(timespec="seconds")
    for port in ("hub_port", "proxy_api_port", "checks_port"):
        setattr(term, port, getattr(term, port) or free_port())
    for user in (term.instructor, *term.students):
        if ensure_account(term, user) and user not in term.created:
            term.created.append(user)
    close_the_checkout(term)
    term.save()
    make_exchange(term)
    write_course(term)
    write_student_lib(term)
    write_student_config(term)
    set_due(term, term.due)
    as_user(term, term.instructor, VENV_BIN / "python", "-m", "autograder", "--course", term.course / "course.yml",
            "variant-secret", "--if-missing", "--out", term.course / "grading", cwd=term.course)
    as_user(term, term.instructor, VENV_BIN / "python", "-m", "autograder", "--course", term.course / "course.yml",
            "variants", "--roster", term.course / "roster.csv", "--assignment", term.assignment,
            "--out", term.course / "variants", cwd=term.course)
    return term


def release(term):
    """The assignment in the exchange, with nbgrader's command as the instructor (formgrader's Release button)."""
    as_user(term, term.instructor, VENV_BIN / "nbgrader", "release_assignment", term.assignment, "--force",
            cwd=term.course)


GRADEBOOK = """
import sys
from nbgrader.api import Gradebook
from autograder import gradebook
from autograder.course import load_course
from autograder.lms import read_roster
course = load_course(sys.argv[1])
gradebook.prepare(course.gradebook_url, course, [sys.argv[2]], only_new=True)   # its due date, its cells once
with Gradebook(course.gradebook_url) as book:   # formgrader's names of the roster's students
    for student, row in read_roster(sys.argv[3]).items():
        last, _, first = row["name"].partition(", ")
        book.update_or_create_student(student, last_name=last or None, first_name=first or None,
                                      email=row["email"] or None)
"""


def set_due(term, due):
    """The assignment's due date, where the instructor keeps it: course.yml (the grader, the checks) and
    nbgrader's gradebook (formgrader's late penalty), with the assignment's cells as make release records
    them (gradebook.prepare; formgrader's Autograde grades no notebook the gradebook does not know)."""
    term.due = due
    term.save()
    raw = yaml.safe_load((term.course / "course.yml").read_text())
    raw["assignments"][0]["due"] = due
    write(term.course / "course.yml", yaml.safe_dump(raw, sort_keys=False))
    owner = pwd.getpwnam(term.instructor)
    os.chown(term.course / "course.yml", owner.pw_uid, owner.pw_gid)
    as_user(term, term.instructor, VENV_BIN / "python", "-c", GRADEBOOK, term.course / "course.yml", term.assignment,
            term.course / "roster.csv", cwd=term.course)
