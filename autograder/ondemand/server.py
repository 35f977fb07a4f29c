"""The check server: `python -m autograder check-server` (make check-server), one per course.

    POST <prefix>check   Authorization: Bearer <token>   (on a hub: token <the student's hub token>)
                         {"student": id, "assignment": id, "notebook": "<name>.ipynb", "content": "<the .ipynb file>"}
    GET  <prefix>variant/<assignment>   (authorized as above) the student's variant.json, as make variants writes it
    GET  <prefix>status  {"graders": n, "ready": n, "grading": n, "queued": n}

The prefix is / on the server's own address, and JUPYTERHUB_SERVICE_PREFIX where it runs as a JupyterHub
service (hub.py).  Who is asking is the course's token outside a hub (tokens.CourseTokens), the hub's
answer on one (hub.HubStudents).

A check goes through, in order, from its headers alone before any byte of its body is read: its declared
size (413), who sent it (401, 403), one body of each student arriving at a time (429 with Retry-After);
then, once its body arrived (within course.yml's `checks: server: timeout`): the request's shape (400, one
line), whose it says it is (403), and Checks.admit, the one place admission is decided: the assignment (404),
released at the time of the check (403, with its release date), its notebook (404), course.yml's `checks:`
policy of it (403 where checks are not open or closed, with the date), the student's limits (429 with
Retry-After: Usage, of checks an hour, of grading seconds an hour with each check in flight charged the most
it can take, and one check in flight per student and assignment), the queue (503 with Retry-After:
pool.FairQueue); then the grading, in a warm grading process through the front door (pool.py), answered
with what the policy shows (200), or 500 for this check alone where the grader failed.  Every graded
check is recorded (ledger.py) before its answer leaves.  At most `connections` are open at once (Capped).

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
from autograder.ondemand.pool import WATCH_EVERY, Full, GradingFault, Job, Pool, most_seconds
from autograder.ondemand.tokens import Refused
from autograder.results import from_record
from autograder.variants import Variants, has_variants, note_handed_out

log = logging.getLogger("autograder")

HOUR = 3600.0
IN_FLIGHT_RETRY = 5   # Retry-After (s) of a check refused because one of the same student's is in flight
FIELDS = ("student", "assignment", "notebook", "content")
# What a check's body may be: one flat JSON object whose keys and values are strings, matched in one pass
# that takes no backtracking (possessive) and stops at the first byte of anything else (an array, a nested
# object, a number), so that a body's shape is refused before the parser builds anything from it.
FLAT_OBJECT = re.compile(rb'\s*\{\s*(?:"(?:[^"\\]++|\\.)*+"\s*:\s*"(?:[^"\\]++|\\.)*+"\s*(?:,\s*|(?=\})))*+\}\s*',
                         re.S)
GRADING_FAULT = "the grader failed on this check, no fault of your notebook's; your instructor is told; check again"


def utc(moment):
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


class Usage:
    """What each student's checks take: those in flight (admitted, and not yet let go of by their grading process:
    pool.Pool tells start and spend), and those of the last hour, their number per assignment and their seconds
    of a grading process (per assignment for the policy's budget; in all for the fair queue's order), read
    back from the ledger at the start so that a restart resets neither."""

    def __init__(self, entries):
        self.times = collections.defaultdict(collections.deque)   # (student, assignment) -> POSIX times
        self.seconds = collections.defaultdict(list)   # student -> [(POSIX time of the check, assignment, seconds)]
        self.running = {}   # id(job) -> the Job, for every check in flight
        for entry in entries:
            at = datetime.fromisoformat(entry["at"]).timestamp()
            self.times[entry["student"], entry["assignment"]].append(at)
            if isinstance(entry.get("seconds"), (int, float)):
                self.seconds[entry["student"]].append((at, entry["assignment"], float(entry["seconds"])))

    def allow(self, student, assignment, policy, now):
        """Refused (429, with the seconds until it would pass) where the student made policy.per_hour checks
        of the assignment in the hour before `now` (POSIX time); or their checks of it took its
        policy.seconds_per_hour of grading, each check in flight charged the most it can take
        (pool.most_seconds) until it ends; or a check of theirs of it is in flight."""
        times = self.times[student, assignment.id]
        while times and times[0] <= now - HOUR:
            times.popleft()
        if len(times) >= policy.per_hour:
            wait = max(1, int(times[0] + HOUR - now) + 1)
            raise Refused(429, f"{policy.per_hour} checks of {assignment.id} an hour is the limit.", retry_after=wait)
        running = [job for job in self.running.values() if (job.student, job.assignment.id) == (student, assignment.id)]
        spent = sorted(entry for entry in self._recent(student, now) if entry[1] == assignment.id)
        used = sum(seconds for _, _, seconds in spent) + sum(most_seconds(job.assignment) for job in running)
        if used >= policy.seconds_per_hour:
            wait = IN_FLIGHT_RETRY
            if not running:
                for at, _, seconds in spent:   # the oldest leave the hour first
                    used -= seconds
                    if used < policy.seconds_per_hour:
                        break
                wait = max(1, int(at + HOUR - now) + 1)
            raise Refused(429, f"{policy.seconds_per_hour:g} s of grading of {assignment.id} an hour is the limit; your "
                               f"checks of the last hour{' and the one in flight' if running else ''} took them.",
                          retry_after=wait)
        if running:
            raise Refused(429, f"your check of {assignment.id} is still in flight; wait for its answer",
                          retry_after=IN_FLIGHT_RETRY)

    def start(self, job):
        """A check admitted and queued: counted among the hour's checks, and in flight until spend(job)."""
        self.times[job.student, job.assignment.id].append(job.now.timestamp())
        self.running[id(job)] = job

    def spend(self, job):
        """A check's grading seconds, once its grading process let go of it (pool.Pool): no longer in flight."""
        self.running.pop(id(job), None)
        self.seconds[job.student].append((job.now.timestamp(), job.assignment.id, job.seconds))

    def spent(self, student, now=None):
        """The grading seconds of a student's checks in the hour before `now` (POSIX time; default: now)."""
        return sum(seconds for _, _, seconds in self._recent(student, time.time() if now is None else now))

    def _recent(self, student, now):
        kept = self.seconds[student] = [entry for entry in self.seconds[student] if entry[0] > now - HOUR]
        return kept


class Checks:
    """The server's state: the course, the assignments it serves, the pool, what each student's checks take
    (Usage), who names the students (the course's tokens, or the hub), the students whose notebook is arriving
    now, the ledger, the students' numbers."""

    def __init__(self, course, assignments, pool, out, usage, who):
        self.course, self.pool, self.usage, self.who = course, pool, usage, who
        self.assignments = {assignment: course.assignment(assignment) for assignment in assignments}
        self.uploading = set()   # students with a check's body arriving (one each: CheckHandler)
        self.ledger = ledger.Ledger(out)
        self.causes = ledger.known_causes(self.assignments.values())
        self.variants = Variants.of(course)

    def admit(self, request, student, now):
        """The Job of an admissible check of `student` (who sent it) at `now`; Refused with its status and one
        line otherwise.  The one place a check's admission is decided, afresh for each request: the assignment
        released at `now` (course.yml's schedule), its notebook, its checks' policy, the server serving it,
        and the student's limits."""
        assignment = next((a for a in self.course.assignments if a.id == request["assignment"]), None)
        if assignment is None:
            raise Refused(404, f"{request['assignment']!r} is no assignment of this course")
        if not schedule.is_released(self.course, assignment, now):
            raise Refused(403, unreleased(self.course, assignment))
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
        self.usage.allow(student, assignment, policy, now.timestamp())
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
            raise Refused(404, unreleased(self.course, assignment))
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


def unreleased(course, assignment):
    """Why `assignment` is refused before its release, with the date where course.yml gives one."""
    if course.released is not None:
        return f"{assignment.id} is not released yet (course.yml's released: does not list it)"
    if assignment.release is None:
        return f"{assignment.id} is not released yet (course.yml gives it no release date)"
    return f"{assignment.id} is not released yet: its release is {utc(assignment.release)}"


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
    if not FLAT_OBJECT.fullmatch(body):   # before any parse: 16 MB of [],[],... costs json.loads 3 s of the loop
        raise Refused(400, "the body is not a JSON object of strings")
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
    """POST <prefix>check.  Who sent it is decided in prepare(), from the headers alone, before a byte of the
    body is read: a request nobody sent (401, 403), or from a student whose last check's body is still
    arriving (429), is answered at once and its connection closed, so that no body of anybody unidentified,
    and one body at most of each student, is ever held."""

    def initialize(self, checks):
        self.checks, self.chunks, self.size = checks, [], 0
        self.limit = checks.course.check_server.max_mb << 20
        self.caller = self.job = None
        self.gone = False   # its client left

    async def prepare(self):
        length = self.request.headers.get("Content-Length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            raise tornado.web.HTTPError(413 if length.isdigit() else 400)
        try:
            caller = await self.checks.who.caller(self.request.headers.get("Authorization", ""))
            if caller.student in self.checks.uploading:
                raise Refused(429, "a notebook of yours is arriving already; wait for its answer",
                              retry_after=IN_FLIGHT_RETRY)
        except Refused as refused:
            self.set_header("Connection", "close")   # tornado closes it: the body is never read
            return self.refuse(refused)
        if not self.gone:   # a client that left while the hub was asked sends nothing more
            self.caller = caller
            self.checks.uploading.add(caller.student)

    def data_received(self, chunk):
        self.size += len(chunk)
        if self.size > self.limit:
            raise tornado.web.HTTPError(413)
        self.chunks.append(chunk)

    def arrived(self):
        """The body arrived, or never will: its student may send another (idempotent)."""
        if self.caller is not None:
            self.checks.uploading.discard(self.caller.student)
        self.chunks = []

    async def post(self):
        checks = self.checks
        try:
            body = b"".join(self.chunks)
            self.arrived()
            request = parse(body)
            student = self.caller.claims(request["student"])
            job = self.job = checks.admit(request, student, datetime.now(timezone.utc))
            try:
                future = checks.pool.submit(job)
            except Full as error:
                raise Refused(503, str(error), retry_after=checks.pool.retry_after()) from None
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

    def on_finish(self):
        self.arrived()

    def on_connection_close(self):
        """A client that left: its body no longer awaited, and its check, where one was admitted, withdrawn
        (pool.Pool.withdraw: out of the queue, or its answer not awaited)."""
        self.gone = True
        self.arrived()
        if self.job is not None:
            self.checks.pool.withdraw(self.job)
        super().on_connection_close()   # tornado's: a body still awaited ends (StreamClosedError)

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
            student = (await self.checks.who.caller(self.request.headers.get("Authorization", ""))).student
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


class Capped(tornado.httpserver.HTTPServer):
    """tornado's HTTPServer with at most `connections` open at once (tornado has no such bound): one more is
    closed as it is accepted, before a byte of it is read, and the instructor's log says so once a minute."""

    def initialize(self, *args, connections, **kwargs):
        super().initialize(*args, **kwargs)
        self.connections, self.open, self.said = connections, 0, 0.0

    def handle_stream(self, stream, address):
        if self.open >= self.connections:
            stream.close()
            if time.monotonic() - self.said > 60:
                self.said = time.monotonic()
                log.error("check server: %d connections are open, course.yml's checks: server: connections; "
                          "one more was closed", self.open)
            return
        self.open += 1
        super().handle_stream(stream, address)

    def on_close(self, server_conn):
        self.open -= 1
        super().on_close(server_conn)


def http_server(checks, prefix, context):
    """The server's HTTP server: its routes, TLS where course.yml gives a certificate, and its bounds (docs/
    checks.md, "What the server holds"): a request's headers must arrive within `timeout` seconds of its
    connection (or of the last answer on it), its body within `timeout` more; `connections` open at once."""
    settings = checks.course.check_server
    return Capped(application(checks, prefix), ssl_options=context, max_body_size=(settings.max_mb << 20) * 2,
                  idle_connection_timeout=settings.timeout, body_timeout=settings.timeout,
                  connections=settings.connections)


def chosen_assignments(course, assignments):
    """The assignments a server checks: those given, or those whose checks course.yml opens and has not closed
    (released or not: whether one is released is decided for each check, Checks.admit)."""
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
    usage = Usage(ledger.read(out))
    pool = Pool(course, assignments, jobs, settings.queue, usage)
    checks = Checks(course, assignments, pool, out, usage, who)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.set)
    pool.start()   # before the socket is bound: the grading processes do not hold it
    host, port, prefix = place
    sockets = tornado.netutil.bind_sockets(port, host)
    server = http_server(checks, prefix, context)
    server.add_sockets(sockets)
    watch = tornado.ioloop.PeriodicCallback(pool.watch, WATCH_EVERY * 1000)
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
