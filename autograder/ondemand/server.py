"""The check server: `python -m autograder check-server` (make check-server), one per course.

    POST <prefix>check   Authorization: Bearer <token>   (on a hub: token <the student's hub token>)
                         {"student": id, "assignment": id, "notebook": "<name>.ipynb", "content": "<the .ipynb file>"}
    GET  <prefix>variant/<assignment>   (authorized as above) the student's variant.json, as make variants writes it
    GET  <prefix>status  {"graders": n, "ready": n, "grading": n, "queued": n}

The prefix is / on the server's own address, and JUPYTERHUB_SERVICE_PREFIX where it runs as a JupyterHub
service (hub.py).  Who is asking is the course's token outside a hub (tokens.CourseTokens), the hub's
answer on one (hub.HubStudents).

A check goes through, in order: the request's shape (400, one line), its size (413), who sent it (401,
403), course.yml's `checks:` policy of the assignment (403 where checks are not open or closed, with the
date), the student's hourly limits, of checks and of grading seconds (429 with Retry-After), the queue
(503 with Retry-After: pool.FairQueue); then the grading, in a warm grading process through the front
door (pool.py), answered with what the policy shows (200), or 500 for this check alone where the grader
failed.  Every graded check is recorded (ledger.py) before its answer leaves.

Built on tornado, the HTTP server of jupyter_server and of JupyterHub's services.
"""

import asyncio
import collections
import json
import logging
import re
import signal
import ssl
import time
from datetime import datetime, timezone

import tornado.httpserver
import tornado.ioloop
import tornado.netutil
import tornado.web

from autograder import render, schedule
from autograder.course import CourseError
from autograder.ondemand import hub, ledger, tokens
from autograder.ondemand.pool import Full, GradingFault, Job, Pool
from autograder.ondemand.tokens import Refused
from autograder.results import from_record
from autograder.variants import Variants, has_variants, note_handed_out

log = logging.getLogger("autograder")

HOUR = 3600.0
FIELDS = ("student", "assignment", "notebook", "content")
GRADING_FAULT = "the grader failed on this check, no fault of your notebook's; your instructor is told; check again"


def utc(moment):
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


class LastHour:
    """What each student's checks of the last hour took: their number per assignment and their seconds of a
    grading process (per assignment for the policy's budget; in all for the fair queue's order), read back
    from the ledger at the start so that a restart resets neither."""

    def __init__(self, entries):
        self.times = collections.defaultdict(collections.deque)   # (student, assignment) -> POSIX times
        self.seconds = collections.defaultdict(list)   # student -> [(POSIX time of the check, assignment, seconds)]
        for entry in entries:
            at = datetime.fromisoformat(entry["at"]).timestamp()
            self.times[entry["student"], entry["assignment"]].append(at)
            if isinstance(entry.get("seconds"), (int, float)):
                self.seconds[entry["student"]].append((at, entry["assignment"], float(entry["seconds"])))

    def allow(self, student, assignment, policy, now):
        """Refused (429, with the seconds until it would pass) where the student made policy.per_hour checks
        of the assignment in the hour before `now` (POSIX time), or their checks of it took its
        policy.seconds_per_hour of grading."""
        times = self.times[student, assignment.id]
        while times and times[0] <= now - HOUR:
            times.popleft()
        if len(times) >= policy.per_hour:
            wait = max(1, int(times[0] + HOUR - now) + 1)
            raise Refused(429, f"{policy.per_hour} checks of {assignment.id} an hour is the limit.", retry_after=wait)
        spent = sorted(entry for entry in self._recent(student, now) if entry[1] == assignment.id)
        used = sum(seconds for _, _, seconds in spent)
        if used >= policy.seconds_per_hour:
            for at, _, seconds in spent:   # the oldest leave the hour first
                used -= seconds
                if used < policy.seconds_per_hour:
                    break
            raise Refused(429, f"{policy.seconds_per_hour:g} s of grading of {assignment.id} an hour is the limit; your "
                               "checks of the last hour took them.", retry_after=max(1, int(at + HOUR - now) + 1))

    def add(self, job):
        """A check admitted (the count of checks)."""
        self.times[job.student, job.assignment.id].append(job.now.timestamp())

    def spend(self, job):
        """A check's grading seconds, once its grading process let go of it (pool.Pool)."""
        self.seconds[job.student].append((job.now.timestamp(), job.assignment.id, job.seconds))

    def spent(self, student, now=None):
        """The grading seconds of a student's checks in the hour before `now` (POSIX time; default: now)."""
        return sum(seconds for _, _, seconds in self._recent(student, time.time() if now is None else now))

    def _recent(self, student, now):
        kept = self.seconds[student] = [entry for entry in self.seconds[student] if entry[0] > now - HOUR]
        return kept


class Checks:
    """The server's state: the course, the assignments it serves, the pool, the limits of the last hour, who
    names the students (the course's tokens, or the hub), the ledger, the students' numbers."""

    def __init__(self, course, assignments, pool, out, hour, who):
        self.course, self.pool, self.hour, self.who = course, pool, hour, who
        self.assignments = {assignment: course.assignment(assignment) for assignment in assignments}
        self.ledger = ledger.Ledger(out)
        self.causes = ledger.known_causes(self.assignments.values())
        self.variants = Variants.of(course)

    def admit(self, request, student, now):
        """The Job of an admissible check of `student` (who sent it); Refused with its status and one line otherwise."""
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
        self.hour.allow(student, assignment, policy, now.timestamp())
        return Job(student, assignment, notebook, request["content"].encode(), now)

    def variant(self, student, assignment_id, now):
        """variant.json of `student`'s copy of a released assignment with numbers of each student's own, as
        make variants and make student-kit write it, its hand-out recorded as theirs is; Refused (404) otherwise."""
        assignment = next((a for a in self.course.assignments if a.id == assignment_id), None)
        if assignment is None:
            raise Refused(404, f"{assignment_id!r} is no assignment of this course")
        if not has_variants(assignment):
            raise Refused(404, f"{assignment.id} has no numbers of each student's own")
        if not schedule.is_released(self.course, assignment, now):
            raise Refused(404, f"{assignment.id} is not released yet")
        text = self.variants.handed_out_text(assignment, student)
        note_handed_out(self.course, f"variant.json of {assignment.id} served by the check server", [student])
        return text

    def record(self, job, record):
        """One check in the ledger: graded (with its score and named causes), or failed (record None), with the
        seconds it held a grading process and the seconds it waited before. Returns the named causes."""
        result = from_record(record) if record else None
        named = ledger.causes(record, self.causes) if record else []
        self.ledger.append({"student": job.student, "assignment": job.assignment.id, "notebook": job.notebook.name,
                            "at": job.now.isoformat(), "status": "graded" if result else "failed",
                            "score": result.score if result else None, "max_score": result.max_score if result else None,
                            "causes": named, "seconds": round(job.seconds or 0.0, 3),
                            "waited": round(max(0.0, time.monotonic() - job.queued - (job.seconds or 0.0)), 3)})
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


class Answering(tornado.web.RequestHandler):
    """What every handler answers a refusal with: its status, Retry-After where it has one, and one line."""

    def refuse(self, refused):
        self.set_status(refused.status)
        if refused.retry_after is not None:
            self.set_header("Retry-After", str(refused.retry_after))
        self.finish({"error": refused.message})

    def write_error(self, status_code, **kwargs):
        self.finish({"error": self._reason})


@tornado.web.stream_request_body
class CheckHandler(Answering):
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
            student = await checks.who.student(self.request.headers.get("Authorization", ""), request["student"])
            job = self.job = checks.admit(request, student, datetime.now(timezone.utc))
            try:
                future = checks.pool.submit(job)
            except Full as error:
                raise Refused(503, str(error), retry_after=checks.pool.retry_after()) from None
            checks.hour.add(job)
        except Refused as refused:
            return self.refuse(refused)
        try:
            record = await future
        except GradingFault:
            record = None
        except asyncio.CancelledError:
            return   # its client left (on_connection_close)
        if record is None or from_record(record).faulted:   # the grader's fault, not the notebook's
            log.error("check of %s/%s failed: %s", job.student, job.notebook.filename,   # the instructor's to read
                      from_record(record).fault if record else "its grading process stopped")
            checks.record(job, None)
            return self.refuse(Refused(500, GRADING_FAULT))
        named = checks.record(job, record)
        self.finish(answer(job, record, job.assignment.checks.shows, named))

    def on_connection_close(self):
        """A check whose client left: skipped when its turn in the queue comes, its answer not awaited."""
        job = getattr(self, "job", None)
        if job is not None and job.future is not None and not job.future.done():
            job.future.cancel()

    def write_error(self, status_code, **kwargs):
        reasons = {413: f"the notebook is larger than the {self.limit >> 20} MB a check takes",
                   400: "a malformed request"}
        self.finish({"error": reasons.get(status_code, self._reason)})


class VariantHandler(Answering):
    """A student's own numbers of an assignment (variant.json), e.g. for the hub's fetch to put beside the notebook."""

    def initialize(self, checks):
        self.checks = checks

    async def get(self, assignment):
        try:
            student = await self.checks.who.student(self.request.headers.get("Authorization", ""))
            text = self.checks.variant(student, assignment, schedule.now())
        except Refused as refused:
            return self.refuse(refused)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(text)


class StatusHandler(tornado.web.RequestHandler):
    def initialize(self, checks):
        self.checks = checks

    def get(self):
        slots = self.checks.pool.slots
        self.finish({"graders": len(slots), "ready": sum(slot.ready for slot in slots),
                     "grading": sum(slot.job is not None for slot in slots), "queued": len(self.checks.pool.queue)})


def application(checks, prefix="/"):
    """The server's routes under `prefix` (/, or the hub's JUPYTERHUB_SERVICE_PREFIX)."""
    under = re.escape(prefix)
    return tornado.web.Application([(under + r"check", CheckHandler, {"checks": checks}),
                                    (under + r"variant/([^/]+)", VariantHandler, {"checks": checks}),
                                    (under + r"status", StatusHandler, {"checks": checks})])


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


async def run(course, assignments, jobs, out, place, who, say):
    """Serve checks at `place` ((host, port, prefix): where_to_listen) for the students `who` names, until a signal."""
    from autograder.classrun import fanout
    from autograder.layout import Layout
    settings = course.check_server
    Layout(out).out.mkdir(parents=True, exist_ok=True)
    fanout.start_log(Layout(out).log)   # the grader's events, and each check's, as make grade logs them
    context = tls(settings)
    fanout.prime(course, assignments)   # once, here: every grading process is forked with it
    hour = LastHour(ledger.read(out))
    pool = Pool(course, assignments, jobs, settings.queue, hour)
    checks = Checks(course, assignments, pool, out, hour, who)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.set)
    pool.start()   # before the socket is bound: the grading processes do not hold it
    host, port, prefix = place
    sockets = tornado.netutil.bind_sockets(port, host)
    server = tornado.httpserver.HTTPServer(application(checks, prefix), ssl_options=context,
                                           max_body_size=(settings.max_mb << 20) * 2)
    server.add_sockets(sockets)
    watch = tornado.ioloop.PeriodicCallback(pool.watch, 5000)
    watch.start()
    address = f"{'https' if context else 'http'}://{host}:{sockets[0].getsockname()[1]}{prefix.rstrip('/')}"
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


def where_to_listen(course, port, environ=None):
    """(host, port, prefix) and who names the students: on a hub (its service's environment: hub.py), the
    service's address and the hub; elsewhere course.yml's `checks: server:` (or `port`), under /, and the
    course's tokens.  CourseError (one line) where the hub's settings contradict themselves or the server's."""
    settings = hub.service_environment(environ)
    if settings is None:
        return (course.check_server.host, course.check_server.port if port is None else port, "/"), \
            tokens.CourseTokens(course)
    host, hub_port, prefix = hub.listening(settings)
    if port is not None and port != hub_port:
        raise CourseError(f"--port {port} is not the port of the hub's JUPYTERHUB_SERVICE_URL "
                          f"({settings['JUPYTERHUB_SERVICE_URL']}): the hub's proxy sends checks there")
    scheme = settings["JUPYTERHUB_SERVICE_URL"].split(":", 1)[0]
    if (scheme == "https") != bool(course.check_server.certificate):
        raise CourseError(f"the hub's JUPYTERHUB_SERVICE_URL is {scheme}, and course.yml's checks: server: has "
                          f"{'a' if course.check_server.certificate else 'no'} certificate: make them agree")
    return (host, hub_port, prefix), hub.HubStudents(course, settings)


def serve(course, assignments, jobs, out, port=None, say=print):
    assignments = chosen_assignments(course, assignments)
    Variants.of(course).require_keys([course.assignment(a) for a in assignments])   # said before any start
    place, who = where_to_listen(course, port)
    asyncio.run(run(course, assignments, jobs, out, place, who, say))
    return 0
