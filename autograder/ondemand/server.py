"""The check server: `python -m autograder check-server` (make check-server), one per course.

    POST /check   Authorization: Bearer <token>
                  {"student": id, "assignment": id, "notebook": "<name>.ipynb", "content": "<the .ipynb file>"}
    GET  /status  {"graders": n, "ready": n, "grading": n, "queued": n}

A check goes through, in order: the request's shape (400, one line), its size (413), the token (401,
403: tokens.py), course.yml's `checks:` policy of the assignment (403 where checks are not open or
closed, with the date), the student's hourly limit (429 with Retry-After), the queue (503 with
Retry-After: pool.FairQueue); then the grading, in a warm grading process through the front door
(pool.py), answered with what the policy shows (200), or 500 for this check alone where the grader
failed.  Every graded check is recorded (ledger.py) before its answer leaves.

Built on tornado, the HTTP server of jupyter_server and of JupyterHub's services: the hub issue's
service runs this same application behind the hub.
"""

import asyncio
import collections
import json
import logging
import signal
import ssl
from datetime import datetime, timezone

import tornado.httpserver
import tornado.ioloop
import tornado.netutil
import tornado.web

from autograder import render
from autograder.course import CourseError
from autograder.ondemand import ledger, tokens
from autograder.ondemand.pool import Full, GradingFault, Job, Pool
from autograder.ondemand.tokens import Refused
from autograder.results import from_record
from autograder.variants import Variants

log = logging.getLogger("autograder")

HOUR = 3600.0
FIELDS = ("student", "assignment", "notebook", "content")
GRADING_FAULT = "the grader failed on this check, no fault of your notebook's; your instructor is told; check again"


def utc(moment):
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


class HourlyLimit:
    """The checks each student made of each assignment in the last hour, from the ledger at the start."""

    def __init__(self, entries):
        self.times = collections.defaultdict(collections.deque)   # (student, assignment) -> POSIX times
        for entry in entries:
            self.times[entry["student"], entry["assignment"]].append(datetime.fromisoformat(entry["at"]).timestamp())

    def allow(self, student, assignment, per_hour, now):
        """Refused (429) where `per_hour` checks were made in the hour before `now` (POSIX time)."""
        times = self.times[student, assignment.id]
        while times and times[0] <= now - HOUR:
            times.popleft()
        if len(times) >= per_hour:
            wait = max(1, int(times[0] + HOUR - now) + 1)
            raise Refused(429, f"{per_hour} checks of {assignment.id} an hour is the limit.", retry_after=wait)

    def add(self, job):
        self.times[job.student, job.assignment.id].append(job.now.timestamp())


class Checks:
    """The server's state: the course, the assignments it serves, the key, the pool, the limits, the ledger."""

    def __init__(self, course, assignments, pool, out):
        self.course, self.pool = course, pool
        self.assignments = {assignment: course.assignment(assignment) for assignment in assignments}
        self.key = tokens.signing_key(course)
        self.ledger = ledger.Ledger(out)
        self.hourly = HourlyLimit(ledger.read(out))
        self.causes = ledger.known_causes(self.assignments.values())

    def admit(self, request, token, now):
        """The Job of an admissible check; Refused with its status and one line otherwise."""
        student = tokens.verify(self.key, self.course, token, request["student"])
        assignment = next((a for a in self.course.assignments if a.id == request["assignment"]), None)
        if assignment is None:
            raise Refused(404, f"{request['assignment']!r} is no assignment of this course")
        notebook = next((nb for nb in assignment.notebooks if nb.filename == request["notebook"]), None)
        if notebook is None:
            raise Refused(404, f"{request['notebook']!r} is no notebook of {assignment.id} "
                               f"({', '.join(nb.filename for nb in assignment.notebooks)})")
        policy = assignment.checks
        if not policy.open:
            raise Refused(403, f"checks of {assignment.id} are not open")
        closes = policy.closes(assignment.due)
        if closes is not None and now >= closes:
            raise Refused(403, f"checks of {assignment.id} closed at {utc(closes)}"
                               + (" (the due date)" if closes == assignment.due else ""))
        if assignment.id not in self.assignments:
            raise Refused(404, f"this server checks none of {assignment.id}; it checks {', '.join(self.assignments)}")
        self.hourly.allow(student, assignment, policy.per_hour, now.timestamp())
        return Job(student, assignment, notebook, request["content"].encode(), now)

    def record(self, job, record, seconds):
        """One check in the ledger: graded (with its score, named causes and grading seconds), or failed
        (record None); `seconds` from its admission to its answer. Returns the named causes."""
        result = from_record(record) if record else None
        named = ledger.causes(record, self.causes) if record else []
        self.ledger.append({"student": job.student, "assignment": job.assignment.id, "notebook": job.notebook.name,
                            "at": job.now.isoformat(), "status": "graded" if result else "failed",
                            "score": result.score if result else None, "max_score": result.max_score if result else None,
                            "causes": named, "seconds": round(result.seconds, 3) if result else None,
                            "waited": round(seconds - (result.seconds if result else 0.0), 3)})
        return named


def answer(job, record, shows, causes):
    """What a check answers: per test (as much as the policy shows) and the same as Markdown."""
    result = from_record(record)
    tests = [{"exercise": t.exercise, "test": t.test, "passed": t.score >= t.max_score, "points": t.score,
              "max_points": t.max_score, **({"feedback": t.output} if shows == "causes" and t.score < t.max_score else {})}
             for t in result.tests]
    if shows != "causes":
        for notebook in result.notebooks:
            notebook.notes = {}
            for test in notebook.tests:
                test.output, test.picture = "", None
    if shows == "total":
        tests = []
        text = f"# Check: {job.assignment.id}\n\n**{render.headline(result)}**\n"
    else:
        text = render.markdown(result).replace(f"# Feedback: {job.assignment.id}", f"# Check: {job.assignment.id}", 1)
    own = any(exercise.variant for exercise in job.notebook.exercises)
    text += (f"\nChecked at {utc(job.now)} against the hidden tests{', on your own numbers' if own else ''}. This is "
             "not a grade: hand in as the course says.\n")
    return {"student": job.student, "assignment": job.assignment.id, "notebook": job.notebook.filename,
            "at": job.now.isoformat(), "shows": shows, "score": result.score, "max_score": result.max_score,
            "reason": result.reason, "tests": tests, "causes": causes if shows == "causes" else [],
            "markdown": text}


def parse(body):
    """The posted check as a dict of FIELDS (strings of UTF-8 text); Refused (400) with one line otherwise.
    The one place a body is read: whatever it holds (bytes that are not UTF-8, nesting deeper than the
    parser recurses, a lone surrogate escaped in a string) ends here as a 400, never in admit."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):   # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise Refused(400, "the body is not JSON") from None
    if not isinstance(request, dict):
        raise Refused(400, "the body is not a JSON object")
    for name in FIELDS:
        if not isinstance(request.get(name), str) or not request[name]:
            raise Refused(400, f"the request has no {name} (a string)")
        try:
            request[name].encode("utf-8")
        except UnicodeEncodeError:   # "\ud800": JSON may escape a surrogate that no text holds
            raise Refused(400, f"the request's {name} is not UTF-8 text") from None
    return {name: request[name] for name in FIELDS}


@tornado.web.stream_request_body
class CheckHandler(tornado.web.RequestHandler):
    def initialize(self, checks):
        self.checks, self.chunks, self.size = checks, [], 0
        self.limit = checks.course.check_server.max_mb << 20

    def prepare(self):
        length = self.request.headers.get("Content-Length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            raise tornado.web.HTTPError(413 if length.isdigit() else 400)

    def data_received(self, chunk):
        self.size += len(chunk)
        if self.size > self.limit:
            raise tornado.web.HTTPError(413)
        self.chunks.append(chunk)

    async def post(self):
        checks = self.checks
        try:
            request = parse(b"".join(self.chunks))
            token = self.request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            job = self.job = checks.admit(request, token, datetime.now(timezone.utc))
            try:
                future = checks.pool.submit(job)
            except Full as error:
                raise Refused(503, str(error), retry_after=checks.pool.retry_after()) from None
            checks.hourly.add(job)
        except Refused as refused:
            return self.refuse(refused)
        started = asyncio.get_running_loop().time()
        try:
            record = await future
        except GradingFault:
            record = None
        except asyncio.CancelledError:
            return   # its client left (on_connection_close)
        if record is None or from_record(record).faulted:   # the grader's fault, not the notebook's
            log.error("check of %s/%s failed: %s", job.student, job.notebook.filename,   # the instructor's to read
                      from_record(record).fault if record else "its grading process stopped")
            checks.record(job, None, asyncio.get_running_loop().time() - started)
            return self.refuse(Refused(500, GRADING_FAULT))
        named = checks.record(job, record, asyncio.get_running_loop().time() - started)
        self.finish(answer(job, record, job.assignment.checks.shows, named))

    def on_connection_close(self):
        """A check whose client left: skipped when its turn in the queue comes, its answer not awaited."""
        job = getattr(self, "job", None)
        if job is not None and job.future is not None and not job.future.done():
            job.future.cancel()

    def refuse(self, refused):
        self.set_status(refused.status)
        if refused.retry_after is not None:
            self.set_header("Retry-After", str(refused.retry_after))
        self.finish({"error": refused.message})

    def write_error(self, status_code, **kwargs):
        reasons = {413: f"the notebook is larger than the {self.limit >> 20} MB a check takes",
                   400: "a malformed request"}
        self.finish({"error": reasons.get(status_code, self._reason)})


class StatusHandler(tornado.web.RequestHandler):
    def initialize(self, checks):
        self.checks = checks

    def get(self):
        slots = self.checks.pool.slots
        self.finish({"graders": len(slots), "ready": sum(slot.ready for slot in slots),
                     "grading": sum(slot.job is not None for slot in slots), "queued": len(self.checks.pool.queue)})


def application(checks):
    return tornado.web.Application([(r"/check", CheckHandler, {"checks": checks}),
                                    (r"/status", StatusHandler, {"checks": checks})])


def chosen_assignments(course, assignments):
    """The assignments a server checks: those given, or those whose checks course.yml opens."""
    if assignments:
        return [course.assignment(assignment).id for assignment in assignments]
    now = datetime.now(timezone.utc)
    opened = [assignment.id for assignment in course.assignments if assignment.checks.open
              and (assignment.checks.closes(assignment.due) is None or assignment.checks.closes(assignment.due) > now)]
    if not opened:
        raise CourseError("no assignment has checks open now (course.yml's `checks:`, docs/checks.md)")
    return opened


def tls(server):
    if not server.certificate:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(server.certificate, server.key)
    except (OSError, ssl.SSLError) as error:
        raise CourseError(f"checks: server: the certificate or key cannot be loaded ({error})") from None
    return context


async def run(course, assignments, jobs, out, port, say):
    from autograder import classroom
    from autograder.layout import Layout
    settings = course.check_server
    Layout(out).out.mkdir(parents=True, exist_ok=True)
    classroom.start_log(Layout(out).log)   # the grader's events, and each check's, as make grade logs them
    context = tls(settings)
    classroom.prime(course, assignments)   # once, here: every grading process is forked with it
    pool = Pool(course, assignments, jobs, settings.queue)
    checks = Checks(course, assignments, pool, out)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.set)
    pool.start()   # before the socket is bound: the grading processes do not hold it
    sockets = tornado.netutil.bind_sockets(settings.port if port is None else port, settings.host)
    server = tornado.httpserver.HTTPServer(application(checks), ssl_options=context,
                                           max_body_size=(settings.max_mb << 20) * 2)
    server.add_sockets(sockets)
    watch = tornado.ioloop.PeriodicCallback(pool.watch, 5000)
    watch.start()
    address = f"{'https' if context else 'http'}://{settings.host}:{sockets[0].getsockname()[1]}"
    say(f"check server for {course.name} listening at {address}, checking {', '.join(assignments)}; "
        f"checks recorded in {checks.ledger.path}")
    await pool.all_ready.wait()
    say(f"check server ready ({jobs} grading processes); Ctrl-C or SIGTERM stops it")
    try:
        await stop.wait()
    finally:
        watch.stop()
        server.stop()
        pool.close()
        checks.ledger.close()
    say("check server stopped")


def serve(course, assignments, jobs, out, port=None, say=print):
    assignments = chosen_assignments(course, assignments)
    Variants.of(course).require_keys([course.assignment(a) for a in assignments])   # said before any start
    tokens.signing_key(course)
    asyncio.run(run(course, assignments, jobs, out, port, say))
    return 0
