"""course.yml: the one place that declares assignments, notebooks, exercises, points and limits."""

import functools
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from autograder.lateness import LatePolicy

ROOT = Path(__file__).resolve().parent.parent
SUITES = Path(__file__).resolve().parent / "suites"


class CourseError(Exception):
    """course.yml is missing, malformed or inconsistent."""


@dataclass
class Limits:
    cell_timeout: float = 30.0
    call_timeout: float = 10.0
    time_budget: float = 240.0   # seconds for a whole submission, loading and every call
    memory_mb: int = 4096
    restarts: int = 4
    sandbox: str = "bwrap"       # "bwrap", or "none" to run student code without the sandbox

    @property
    def sandboxed(self):
        return self.sandbox != "none"


CHECK_SHOWS = ("causes", "tests", "total")   # how much a check answers: see CheckPolicy
HUB_NAMES = ("student", "sis_user_id", "email")   # the roster's columns a hub's user names may be matched to


@dataclass(frozen=True)
class CheckPolicy:
    """course.yml's `checks:` of an assignment: whether a student may have a notebook graded on demand by
    the check server (autograder/ondemand/), until when, how often, and how much its answer shows
    (causes: each test with its feedback and named cause; tests: passed or failed per test; total: the
    score alone), and how many seconds of a grading process one student's checks of it may take an hour."""
    open: bool = False
    per_hour: int = 10
    seconds_per_hour: float = 300.0   # grading seconds per student and assignment in any hour (429 beyond)
    shows: str = "causes"
    late_hours: float = 0.0         # `until: due + 48h`: hours after the due date that checks stay open
    until: datetime = None          # `until: <ISO date>`: when checks close, whatever the due date

    def closes(self, due):
        """When checks close (an aware datetime), or None where nothing closes them."""
        if self.until is not None:
            return self.until
        return None if due is None else due + timedelta(hours=self.late_hours)


@dataclass(frozen=True)
class CheckServer:
    """course.yml's `checks: server:`: where the check server listens, what address the student kit names,
    its TLS certificate and key (none: plain HTTP, for loopback), how many checks may wait, how large a
    notebook it takes."""
    host: str = "127.0.0.1"
    port: int = 8765
    url: str = ""                   # what students' kits call; default: http(s)://host:port
    certificate: str = ""
    key: str = ""
    queue: int = 256
    max_mb: int = 16                # the largest notebook a check takes (413 beyond)
    connections: int = 1024         # connections open at once; one more is closed at once
    timeout: float = 60.0           # seconds a request's headers, and then its body, may take to arrive
    hub_names: str = "student"      # on a hub: the roster's column a hub user's name must equal (HUB_NAMES)

    @property
    def address(self):
        return self.url or f"{'https' if self.certificate else 'http'}://{self.host}:{self.port}"


@dataclass(frozen=True)
class Exercise:
    id: str                 # also the grade_id of the answer cell in the notebook
    title: str
    suite: Path
    points: dict            # hidden test name -> points
    from_scratch: bool = False  # calling torch's built-in attention scores nothing
    visibility: str = "visible"  # Gradescope: visible, after_due_date, after_published or hidden
    gate: str = ""          # the substance check: until it passes, only the `basic` tests count
    basic: tuple = ()       # cheap tests (shapes, dtypes, ValueError) counted whatever the gate says
    measured: tuple = ()    # tests whose points are measured (memory, counted work, what a cache serves):
                            # code that reaches into what measures them earns them nothing (rules.py)
    variant: bool = False   # its answers are the student's own numbers (autograder/variants.py)

    @property
    def check_cell(self):
        """grade_id of the autograded cell that carries this exercise's points in nbgrader."""
        return f"check_{self.id}"

    @property
    def max_score(self):
        return sum(self.points.values())

    @property
    def tests(self):
        """Every hidden test of the exercise, the gate first."""
        return ([self.gate] if self.gate else []) + list(self.points)


# What an answer that fails its exercise's gate may still earn, at most (see Exercise.basic).
BASIC_SHARE = 0.2


@dataclass(frozen=True)
class Notebook:
    name: str
    exercises: tuple

    @property
    def filename(self):
        return f"{self.name}.ipynb"

    def part(self, exercise_ids):
        """The notebook with only the chosen exercises (ids; () chooses all): what an author's check
        (grade-class --exercise) grades.  The notebook still runs whole, with the student's variant."""
        if not exercise_ids:
            return self
        return replace(self, exercises=tuple(e for e in self.exercises if e.id in exercise_ids))


@dataclass(frozen=True)
class Assignment:
    id: str
    title: str
    notebooks: tuple
    limits: Limits
    due: datetime = None    # with a time zone; None: no due date
    release: datetime = None  # when students get it (the student kit); None: see Course.released
    summary: str = ""         # what it teaches, in a line (the README's table of assignments)
    kernel_kind: str = ""     # course.yml's `kernels`: "triton", its answers are Triton kernels (run by Triton's interpreter without a GPU)
    packages: tuple = ()      # what it needs beyond the course's core, pinned in requirements.txt (e.g. triton)
    feedback_values: str = "after_due"  # course.yml's feedback: {values: ...}, see FEEDBACK_VALUES
    checks: CheckPolicy = field(default_factory=CheckPolicy)  # course.yml's checks: (the check server's policy)
    late_policy: LatePolicy = field(default_factory=LatePolicy)  # the course's late_policy: (when answers are final)

    @property
    def answers_final(self):
        """When the answers of this assignment are final (an aware datetime), or None where they never are:
        the latest of the due date, the checks' closing and the end of the late window the late policy
        allows; after it no hand-in earns anything and no check answers, so showing the right values
        hands nobody a mark.  An assignment without a due date never reaches it."""
        if self.due is None:
            return None
        moments = [self.due, self.checks.closes(self.due) if self.checks.open else self.due,
                   self.late_policy.window_closes(self.due)]
        return None if None in moments else max(moments)

    def feedback_values_shown(self, now):
        """Whether feedback graded at `now` (an aware datetime) may show the right values worked out from
        the student's own numbers (a variant's correct answer): `always`, `never`, or `after_due`, once
        the answers are final (answers_final; the feedback of `make grade` and the check server's alike)."""
        if now.tzinfo is None:
            raise ValueError("the time of grading needs a time zone")
        if self.feedback_values == "after_due":
            return self.answers_final is not None and now > self.answers_final
        return self.feedback_values == "always"

    @property
    def exercises(self):
        return [exercise for notebook in self.notebooks for exercise in notebook.exercises]

    @property
    def max_score(self):
        return sum(exercise.max_score for exercise in self.exercises)

    def exercise(self, exercise_id):
        for exercise in self.exercises:
            if exercise.id == exercise_id:
                return exercise
        known = ", ".join(e.id for e in self.exercises)
        raise CourseError(f"{exercise_id} is no exercise of {self.id} ({known})")


@functools.lru_cache(maxsize=None)
def _mentions(path, text):
    try:
        return text in path.read_text()
    except OSError:
        return False


@dataclass
class Course:
    name: str
    assignments: list
    root: Path = ROOT
    limits: Limits = field(default_factory=Limits)
    late_policy: LatePolicy = field(default_factory=LatePolicy)
    github: dict = field(default_factory=dict)  # grading on push: organization, repository_prefix
    path: Path = None                           # the course.yml this was loaded from
    slurm: dict = field(default_factory=dict)   # grade-slurm: partition, account, time, mem, sbatch_options
    torch_index_url: str = ""       # an extra index with PyTorch's CPU-only wheels (student kit, Gradescope)
    ai_policy: Path = None          # the student kit's rules for AI assistants (AGENTS.md, CLAUDE.md); None: none
    released: tuple = None          # course.yml's explicit list of released assignments, if given
    variant_secret: str = ""        # where the secret of per-student variants lives (variants.py's default)
    check_server: CheckServer = field(default_factory=CheckServer)  # course.yml's checks: server:

    @property
    def gradebook_url(self):
        """nbgrader's gradebook in the course root: where --db points when it is not given."""
        return f"sqlite:///{self.root / 'gradebook.db'}"

    def visibility(self):
        """exercise id -> when Gradescope shows its tests to students."""
        return {e.id: e.visibility for a in self.assignments for e in a.exercises}

    def assignment(self, assignment_id):
        for assignment in self.assignments:
            if assignment.id == assignment_id:
                return assignment
        known = ", ".join(a.id for a in self.assignments)
        raise CourseError(f"unknown assignment {assignment_id!r} (course.yml has: {known})")

    def source_notebook(self, assignment, notebook):
        return self.root / "solutions" / assignment.id / notebook.filename

    def release_notebook(self, assignment, notebook):
        return self.root / "exercises" / assignment.id / notebook.filename

    def kernel_kind(self, *assignments):
        """The kind of kernels (course.yml's `kernels`, e.g. "triton") the assignments' answers write, or
        "" where none does: what a worker that grades them prepares at its start."""
        return next((assignment.kernel_kind for assignment in assignments if assignment.kernel_kind), "")

    def uses_dynamo(self, *assignments):
        """Whether grading any of the assignments runs what imports torch's dynamo stack in the
        student's process (about a second, which the warm worker then pays once): hidden tests that
        count work (course.yml's measured tests, kernels), or a solution that trains with an optimiser."""
        return any(bool(assignment.kernel_kind) or any(exercise.measured for exercise in assignment.exercises)
                   or any(_mentions(self.source_notebook(assignment, notebook), "torch.optim")
                          for notebook in assignment.notebooks)
                   for assignment in assignments)


def parse_due(text, where, what="due"):
    """An ISO 8601 date and time with a time zone ('2026-12-01T23:59:00+01:00' or '...Z')."""
    try:
        due = datetime.fromisoformat(str(text))
    except ValueError:
        raise CourseError(f"{where}: {what} {text!r} is not an ISO 8601 date and time") from None
    if due.tzinfo is None:
        raise CourseError(f"{where}: {what} {text!r} needs a time zone (for example +00:00 or Z)")
    return due


SANDBOX_MODES = ("bwrap", "none")
# What feedback may show of the right values worked out from the student's own numbers: never, once the
# due date has passed (the default: before it, one wrong try would hand over the answer), or always.
FEEDBACK_VALUES = ("never", "after_due", "always")


def _feedback(raw, default, where):
    """course.yml's `feedback: {values: ...}` (the course's, or an assignment's override of it)."""
    if raw is None:
        return default
    if not isinstance(raw, dict) or set(raw) - {"values"}:
        raise CourseError(f"{where}: feedback takes values (one of {', '.join(FEEDBACK_VALUES)})")
    values = raw.get("values", default)
    if values not in FEEDBACK_VALUES:
        raise CourseError(f"{where}: feedback values must be one of {', '.join(FEEDBACK_VALUES)}, not {values!r}")
    return values


VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")


KERNEL_KINDS = ("triton",)


def _kernel_kind(value, where):
    if value in (None, ""):
        return ""
    if value not in KERNEL_KINDS:
        raise CourseError(f"{where}: kernels must be one of {', '.join(KERNEL_KINDS)}, not {value!r}")
    return value


def _packages(value, where):
    if value in (None, []):
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip() for item in value):
        raise CourseError(f"{where}: packages must be a list of package names (pinned in requirements.txt)")
    return tuple(item.strip().lower() for item in value)


def _limits(base, overrides, where):
    if not isinstance(overrides, dict):
        raise CourseError(f"{where}: limits must be a mapping")
    unknown = set(overrides) - set(Limits.__dataclass_fields__)
    if unknown:
        raise CourseError(f"{where}: unknown limit(s) {sorted(unknown)}")
    limits = replace(base, **overrides)
    if limits.sandbox not in SANDBOX_MODES:
        raise CourseError(f"{where}: sandbox must be one of {', '.join(SANDBOX_MODES)}, "
                          f"not {limits.sandbox!r}")
    return limits


def _exercise(raw, where):
    try:
        points = {str(name): float(value) for name, value in raw["points"].items()}
        exercise = Exercise(id=str(raw["id"]), title=str(raw.get("title", raw["id"])),
                            suite=SUITES / raw["suite"], points=points,
                            from_scratch=bool(raw.get("from_scratch", False)),
                            visibility=str(raw.get("visibility", "visible")),
                            gate=str(raw.get("gate") or ""), basic=tuple(map(str, raw.get("basic") or ())),
                            measured=tuple(map(str, raw.get("measured") or ())),
                            variant=bool(raw.get("variant", False)))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CourseError(f"{where}: an exercise needs id, suite and points ({error})") from None
    where = f"{where}/{exercise.id}"
    if set(exercise.basic) - set(exercise.points):
        raise CourseError(f"{where}: basic names tests without points: {sorted(set(exercise.basic) - set(exercise.points))}")
    if set(exercise.measured) - set(exercise.points):
        raise CourseError(f"{where}: measured names tests without points: "
                          f"{sorted(set(exercise.measured) - set(exercise.points))}")
    if exercise.gate in exercise.points:
        raise CourseError(f"{where}: the gate {exercise.gate} is a precondition, not a test with points")
    if exercise.basic and not exercise.gate:
        raise CourseError(f"{where}: basic tests need a gate")
    basic_points = sum(exercise.points[test] for test in exercise.basic)
    if basic_points > BASIC_SHARE * exercise.max_score + 1e-9:
        raise CourseError(f"{where}: the basic tests are worth {basic_points:g} of {exercise.max_score:g} points; "
                          f"at most {BASIC_SHARE:.0%} may count before the gate passes")
    if exercise.visibility not in VISIBILITIES:
        raise CourseError(f"{where}: visibility must be one of {', '.join(VISIBILITIES)}")
    if not exercise.suite.is_file():
        raise CourseError(f"{where}: suite {raw['suite']} not found in autograder/suites/")
    return exercise


CHECK_POLICY_KEYS = ("open", "until", "per_hour", "seconds_per_hour", "shows")


def _check_policy(raw, default, where):
    """course.yml's checks: policy keys (the course's defaults, or an assignment's overrides of them)."""
    if raw is None:
        return default
    if not isinstance(raw, dict) or set(raw) - set(CHECK_POLICY_KEYS) - ({"server"} if where == "checks" else set()):
        raise CourseError(f"{where}: checks takes {', '.join(CHECK_POLICY_KEYS)}"
                          + (" and server" if where == "checks" else ""))
    policy = replace(default, open=bool(raw.get("open", default.open)))
    if "per_hour" in raw:
        if type(raw["per_hour"]) is not int or raw["per_hour"] < 1:
            raise CourseError(f"{where}: checks per_hour must be a whole number of checks, 1 or more")
        policy = replace(policy, per_hour=raw["per_hour"])
    if "seconds_per_hour" in raw:
        if type(raw["seconds_per_hour"]) not in (int, float) or not 0 < raw["seconds_per_hour"] < float("inf"):
            raise CourseError(f"{where}: checks seconds_per_hour must be a number of seconds above 0")
        policy = replace(policy, seconds_per_hour=float(raw["seconds_per_hour"]))
    if "shows" in raw:
        if raw["shows"] not in CHECK_SHOWS:
            raise CourseError(f"{where}: checks shows must be one of {', '.join(CHECK_SHOWS)}, not {raw['shows']!r}")
        policy = replace(policy, shows=raw["shows"])
    if "until" in raw:
        until = str(raw["until"]).replace(" ", "")
        if until.startswith("due"):
            hours = until[3:].removeprefix("+").removesuffix("h") or "0"
            try:
                policy = replace(policy, until=None, late_hours=float(hours))
            except ValueError:
                raise CourseError(f"{where}: checks until must be due, due + <hours>h or an ISO 8601 date and "
                                  f"time, not {raw['until']!r}") from None
        else:
            policy = replace(policy, until=parse_due(raw["until"], where, "checks until"), late_hours=0.0)
    return policy


def _check_server(raw):
    """course.yml's checks: server: (where the check server listens; docs/checks.md)."""
    allowed = set(CheckServer.__dataclass_fields__)
    if not isinstance(raw, dict) or set(raw) - allowed:
        raise CourseError(f"checks: server takes {', '.join(sorted(allowed))}")
    try:
        server = CheckServer(**{key: type(getattr(CheckServer, key))(value) for key, value in raw.items()})
    except (TypeError, ValueError) as error:
        raise CourseError(f"checks: server: {error}") from None
    if bool(server.certificate) != bool(server.key):
        raise CourseError("checks: server needs both certificate and key for TLS, or neither")
    if server.hub_names not in HUB_NAMES:
        raise CourseError(f"checks: server: hub_names must be one of {', '.join(HUB_NAMES)} (the roster's column "
                          f"a hub user's name is), not {server.hub_names!r}")
    if server.connections < 1 or not 0 < server.timeout < float("inf"):
        raise CourseError("checks: server: connections must be 1 or more, and timeout a number of seconds above 0")
    return server


def _slurm_settings(raw):
    """course.yml's slurm: section (what grade-slurm asks Slurm for when its options leave it out)."""
    allowed = {"partition", "account", "time", "mem", "sbatch_options"}
    if not isinstance(raw, dict) or set(raw) - allowed:
        raise CourseError(f"slurm: takes {', '.join(sorted(allowed))}")
    options = raw.get("sbatch_options", [])
    if not isinstance(options, list) or not all(isinstance(option, str) and option.startswith("--") for option in options):
        raise CourseError("slurm: sbatch_options must be a list of sbatch options such as --qos=normal")
    return {**{key: str(value) for key, value in raw.items() if key != "sbatch_options"}, "sbatch_options": options}


def load_course(path=None):
    path = Path(path or ROOT / "course.yml")
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise CourseError(f"cannot read {path}: {error}") from None
    default_limits = _limits(Limits(), raw.get("limits") or {}, "limits")
    feedback_values = _feedback(raw.get("feedback"), "after_due", "feedback")
    checks = _check_policy(raw.get("checks"), CheckPolicy(), "checks")
    try:
        late_policy = LatePolicy(**(raw.get("late_policy") or {}))
    except TypeError as error:
        raise CourseError(f"late_policy: {error}") from None
    assignments = []
    for raw_assignment in raw.get("assignments") or []:
        where = f"assignment {raw_assignment.get('id')}"
        notebooks = tuple(
            Notebook(name=str(nb["name"]),
                     exercises=tuple(_exercise(ex, f"{where}/{nb['name']}") for ex in nb["exercises"]))
            for nb in raw_assignment.get("notebooks") or [])
        assignments.append(Assignment(
            id=str(raw_assignment["id"]), title=str(raw_assignment.get("title", raw_assignment["id"])),
            summary=str(raw_assignment.get("summary", "")),
            kernel_kind=_kernel_kind(raw_assignment.get("kernels"), where),
            packages=_packages(raw_assignment.get("packages"), where),
            feedback_values=_feedback(raw_assignment.get("feedback"), feedback_values, where),
            checks=_check_policy(raw_assignment.get("checks"), checks, where), late_policy=late_policy,
            notebooks=notebooks,
            limits=_limits(default_limits, raw_assignment.get("limits") or {}, where),
            due=parse_due(raw_assignment["due"], where) if raw_assignment.get("due") else None,
            release=parse_due(raw_assignment["release"], where, "release") if raw_assignment.get("release") else None))
    ids = [exercise.id for assignment in assignments for exercise in assignment.exercises]
    if len(ids) != len(set(ids)):
        raise CourseError("exercise ids must be unique across the course")
    github = raw.get("github") or {}
    gradescope = raw.get("gradescope") or {}
    torch_index_url = str(raw.get("torch_index_url") or gradescope.get("torch_index_url") or "")
    ai_policy = raw.get("ai_policy")
    ai_policy = None if ai_policy in (None, "none") else path.parent / str(ai_policy)   # the kit checks it
    released = raw.get("released")
    if released is not None:
        if not isinstance(released, list) or not all(isinstance(item, str) for item in released):
            raise CourseError("released: must be a list of assignment ids")
        unknown = sorted(set(released) - {assignment.id for assignment in assignments})
        if unknown:
            raise CourseError(f"released: unknown assignment(s) {unknown}")
        released = tuple(released)
    if not isinstance(github, dict) or set(github) - {"organization", "repository_prefix"}:
        raise CourseError("github: takes organization and repository_prefix")
    return Course(released=released, github={key: str(value) for key, value in github.items()},
                  path=path, slurm=_slurm_settings(raw.get("slurm") or {}), name=str(raw.get("name", "course")), assignments=assignments, root=path.parent,
                  limits=default_limits, late_policy=late_policy,
                  torch_index_url=torch_index_url, ai_policy=ai_policy,
                  variant_secret=str(raw.get("variant_secret") or ""),
                  check_server=_check_server((raw.get("checks") or {}).get("server") or {}))
