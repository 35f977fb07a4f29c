"""The check server (autograder/ondemand/), started for real on loopback once for the module, on a copy
of the course whose course.yml opens checks of masks and attention_basics (and closes scaled_attention's
at its due date): what a student's check() gets back, and what it never gets."""

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from autograder.course import load_course
from autograder.ondemand import ledger, tokens
from autograder.ondemand.server import GRADING_FAULT
from autograder.ondemand.pool import PER_STUDENT, FairQueue, Full, Job
from autograder.report import checks_markdown
from autograder.suites import test_causal_mask
from tests.catalogue.causal_mask import MISTAKES
from tests import ondemand
from tests.notebooks import COURSE, make_submission, solution_answers
from tests.test_variants import by_hand_written_out

PER_HOUR = 3
TIMEOUT, CONNECTIONS = 5, 8   # the module server's checks: server: timeout (s) and connections
ANSWERS = []   # every response body of the module, scanned at its end


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The check server of a copy of the course (its course.yml; the rest linked), one grading process, over
    HTTPS with a certificate of its own (the clients trust it alone), TIMEOUT seconds for a request's headers
    and for its body, CONNECTIONS open at once."""
    root = tmp_path_factory.mktemp("checked")
    certificate, key = ondemand.self_signed(root / "tls")
    course_yml = ondemand.course_copy(root, ("masks", "attention_basics", "scaled_attention"),
                                      {"open": True, "until": "2099-01-01T00:00:00Z", "per_hour": PER_HOUR,
                                       "server": {"max_mb": 1, "certificate": str(certificate), "key": str(key),
                                                  "timeout": TIMEOUT, "connections": CONNECTIONS}},
                                      {"attention_basics": {"shows": "tests"}, "scaled_attention": {"until": "due"}})
    process, address = ondemand.start(course_yml, root / "out")
    try:
        assert address.startswith("https://127.0.0.1:")
        yield {"url": address, "root": root, "course": load_course(course_yml), "process": process,
               "certificate": certificate}
    finally:
        ondemand.stop(process)


def trusting(server):
    """An SSL context that trusts the test server's certificate and nothing else."""
    return ssl.create_default_context(cafile=server["certificate"])


def post(server, student, notebook, assignment="masks", token=None, content=None):
    token = tokens.issue(server["course"], student) if token is None else token
    body = {"student": student, "assignment": assignment, "notebook": Path(notebook).name,
            "content": Path(notebook).read_text() if content is None else content}
    response = httpx.post(server["url"] + "/check", json=body, timeout=300, verify=trusting(server),
                          headers={"Authorization": f"Bearer {token}"} if token else {})
    ANSWERS.append((response.text, body["content"]))
    return response


def masks_with(tmp_path, answers=None):
    return make_submission("masks", {**solution_answers("masks"), **(answers or {})}, tmp_path)[0]


def test_the_perfect_notebook_gets_full_marks_and_is_recorded(server, tmp_path):
    response = post(server, "alice", masks_with(tmp_path))
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["score"] == answer["max_score"] == COURSE.assignment("masks").max_score
    assert answer["tests"] and all(test["passed"] for test in answer["tests"])
    assert "**Score: 22 / 22**" in answer["markdown"]
    recorded = [e for e in ledger.read(server["root"] / "out") if e["student"] == "alice"]
    assert recorded[-1]["score"] == 22 and recorded[-1]["status"] == "graded"


def test_a_catalogue_mistake_gets_its_named_cause(server, tmp_path):
    mistake = next(m for m in MISTAKES if m.cause == "upper_triangle")
    response = post(server, "bob", masks_with(tmp_path, {"causal_mask": mistake.code}))
    assert response.status_code == 200, response.text
    answer = response.json()
    failed = {test["test"].removeprefix("test_") for test in answer["tests"] if not test["passed"]}
    assert failed and failed <= set(mistake.fails)
    cause = test_causal_mask.CAUSES["upper_triangle"]
    assert any(cause in test.get("feedback", "") for test in answer["tests"]) and cause in answer["markdown"]
    assert cause in answer["causes"]
    assert cause in [c for e in ledger.read(server["root"] / "out") if e["student"] == "bob" for c in e["causes"]]
    assert cause in checks_markdown(server["root"] / "out")   # make report's most frequent causes


def test_a_missing_wrong_or_another_students_token_is_refused(server, tmp_path):
    notebook = masks_with(tmp_path)
    assert post(server, "alice", notebook, token="").status_code == 401
    assert post(server, "alice", notebook, token="not-a-token").status_code == 401
    forged = tokens.issue(server["course"], "alice", key=b"k" * 32)   # signed with another key
    assert post(server, "alice", notebook, token=forged).status_code == 401
    refused = post(server, "alice", notebook, token=tokens.issue(server["course"], "bob"))
    assert refused.status_code == 403 and refused.json() == {"error": "this token is not alice's"}


def test_each_student_is_graded_on_their_own_numbers(server, tmp_path):
    answers = {**solution_answers("attention_basics"), "by_hand": by_hand_written_out("alice")}
    notebook = make_submission("attention_basics", answers, tmp_path)[0]

    def by_hand(student):
        response = post(server, student, notebook, assignment="attention_basics")
        assert response.status_code == 200, response.text
        return {test["test"]: test["passed"] for test in response.json()["tests"] if test["exercise"] == "by_hand"}
    assert all(by_hand("alice").values())
    theirs = by_hand("bob")   # alice's numbers are not bob's
    assert not theirs["test_scores"] and not theirs["test_context"]


def test_a_check_of_an_assignment_not_yet_released_is_refused_with_its_release_date(tmp_path):
    """Checks.admit decides it for each check from course.yml's schedule, before anything of the assignment
    (its notebooks' names) is said: flash_attention (released 2026-11-30 08:00 UTC) a minute before, and after."""
    from autograder.ondemand.server import Checks, Usage
    checks, flash = Checks(COURSE, ["flash_attention"], None, tmp_path, Usage([]), None), COURSE.assignment("flash_attention")

    def admit(notebook, now):
        return checks.admit({"student": "alice", "assignment": "flash_attention", "notebook": notebook,
                             "content": "{}"}, "alice", now)
    for notebook in ("flash_attention.ipynb", "x.ipynb"):
        with pytest.raises(tokens.Refused) as refused:
            admit(notebook, flash.release - timedelta(minutes=1))
        assert refused.value.status == 403
        assert refused.value.message == "flash_attention is not released yet: its release is 2026-11-30 08:00 UTC"
    assert admit("flash_attention.ipynb", flash.release + timedelta(minutes=1)).assignment is flash


def test_a_policy_that_shows_tests_only_sends_no_feedback_text(server):
    shown = [json.loads(text) for text, _ in ANSWERS if '"assignment": "attention_basics"' in text]
    assert shown and all(answer["shows"] == "tests" for answer in shown)
    assert all("feedback" not in test for answer in shown for test in answer["tests"])
    assert all("```" not in answer["markdown"] for answer in shown)


def test_the_hourly_limit_answers_429_with_retry_after(server, tmp_path):
    notebook = tmp_path / "masks.ipynb"
    notebook.write_text("not a notebook")
    for _ in range(PER_HOUR):
        answered = post(server, "carol", notebook)
        assert answered.status_code == 200 and answered.json()["reason"]   # graded: nothing of it runs
    refused = post(server, "carol", notebook)
    assert refused.status_code == 429 and "an hour is the limit" in refused.json()["error"]
    assert 0 < int(refused.headers["Retry-After"]) <= 3600
    assert post(server, "dave", notebook).status_code == 200   # another student's limit is their own


def grading_in_background(server, student, notebook):
    """(the thread, the list its answer goes to) of a check posted in a thread, once the server grades it."""
    answered = []
    first = threading.Thread(target=lambda: answered.append(post(server, student, notebook)))
    first.start()
    while httpx.get(server["url"] + "/status", timeout=10, verify=trusting(server)).json()["grading"] == 0 \
            and first.is_alive():
        threading.Event().wait(0.02)
    return first, answered


def test_a_students_second_check_of_an_assignment_waits_for_the_first(server, tmp_path):
    """One check in flight per student and assignment: while ivy's first check of masks grades (its notebook
    sleeps 3 s), her second is refused (429 with Retry-After) and not graded; the first is answered."""
    sleepy = "import time\ntime.sleep(3)\n" + solution_answers("masks")["causal_mask"]
    notebook = masks_with(tmp_path, {"causal_mask": sleepy})
    first, answered = grading_in_background(server, "ivy", notebook)
    second = post(server, "ivy", notebook)
    first.join(timeout=300)
    assert second.status_code == 429 and second.headers["Retry-After"] == "5"
    assert second.json() == {"error": "your check of masks is still in flight; wait for its answer"}
    assert answered[0].status_code == 200 and answered[0].json()["score"] == 22
    assert len([e for e in ledger.read(server["root"] / "out") if e["student"] == "ivy"]) == 1


def test_a_check_in_flight_is_charged_the_most_it_can_take_until_it_ends():
    """The seconds budget counts checks in flight: each is charged pool.most_seconds (its assignment's time
    budget, the margin and the watch's period) until its grading process lets go of it, then its real seconds;
    so checks posted at once cannot overspend it, and what one check admitted under the budget takes is the
    most it is overspent by."""
    from autograder.course import CheckPolicy
    from autograder.ondemand.pool import most_seconds
    from autograder.ondemand.server import Usage
    usage, masks, now = Usage([]), COURSE.assignment("masks"), datetime.now(timezone.utc)
    budget = CheckPolicy(seconds_per_hour=2.0)
    assert most_seconds(masks) == masks.limits.time_budget + 65
    usage.allow("ivy", masks, budget, now.timestamp())
    first = Job("ivy", masks, None, b"", now)
    usage.start(first)
    with pytest.raises(tokens.Refused) as charged:
        usage.allow("ivy", masks, budget, now.timestamp())
    assert charged.value.status == 429 and charged.value.retry_after == 5
    assert charged.value.message == ("2 s of grading of masks an hour is the limit; your checks of the last hour "
                                     "and the one in flight took them.")
    with pytest.raises(tokens.Refused) as flight:   # under a budget it fits, one check in flight all the same
        usage.allow("ivy", masks, CheckPolicy(seconds_per_hour=1000.0), now.timestamp())
    assert flight.value.message == "your check of masks is still in flight; wait for its answer"
    usage.allow("ivy", COURSE.assignment("attention_basics"), budget, now.timestamp())   # each assignment its own
    usage.allow("jo", masks, budget, now.timestamp())   # each student their own
    first.seconds = 1.5
    usage.spend(first)   # its real seconds now
    usage.allow("ivy", masks, budget, now.timestamp())   # 1.5 s of 2: one more may start, and take what it takes
    second = Job("ivy", masks, None, b"", now, seconds=30.0)
    usage.start(second)
    usage.spend(second)
    with pytest.raises(tokens.Refused) as spent:
        usage.allow("ivy", masks, budget, now.timestamp())
    assert spent.value.retry_after >= 3600 and "in flight" not in spent.value.message


def test_a_check_whose_client_left_leaves_the_queue_and_is_no_longer_in_flight():
    """pool.Pool.withdraw (the server's on_connection_close): a waiting check is taken out of the queue at once,
    its seconds 0, so that its student may check again."""
    from autograder.ondemand.pool import Pool
    from autograder.ondemand.server import Usage

    async def scenario():
        usage = Usage([])
        pool = Pool(COURSE, ["masks"], 1, 10, usage)   # no grading process started: the check waits
        job = Job("ivy", COURSE.assignment("masks"), None, b"", datetime.now(timezone.utc))
        pool.submit(job)
        waiting = (len(pool.queue), list(usage.running.values()))
        pool.withdraw(job)
        return waiting, (len(pool.queue), list(usage.running.values()), job.future.cancelled(), usage.spent("ivy"))
    waiting, withdrawn = asyncio.run(scenario())
    assert waiting[0] == 1 and [job.student for job in waiting[1]] == ["ivy"]
    assert withdrawn == (0, [], True, 0.0)


def test_after_the_due_date_the_check_is_refused_with_the_date(server, tmp_path):
    notebook = make_submission("scaled_attention", {}, tmp_path)[0]
    refused = post(server, "alice", notebook, assignment="scaled_attention")
    assert refused.status_code == 403
    assert refused.json()["error"] == "checks of scaled_attention closed at 2026-10-05 08:00 UTC (the due date)"


def test_malformed_and_oversized_requests_get_one_line(server):
    headers = {"Authorization": f"Bearer {tokens.issue(server['course'], 'alice')}"}
    shape = "the body is not a JSON object of strings"   # refused before any parse
    for body, status, error in ((b"{", 400, shape),
                                (json.dumps({"student": "alice"}).encode(), 400, "the request has no assignment (a string)"),
                                (b"[" * 100_000 + b"]" * 100_000, 400, shape),   # deeper than json recurses
                                (b"[" + b"[]," * 300_000 + b"[]]", 400, shape),  # what json.loads builds slowly
                                (b'{"student": "alice", "content": {"cells": []}}', 400, shape),
                                (b'{"student": "alice", "assignment": "masks", "notebook": "masks.ipynb", '
                                 b'"content": "x",}', 400, "the body is not JSON"),   # the shape, yet no JSON
                                (b'{"student": "alice", "assignment": "masks", "notebook": "masks.ipynb", '
                                 b'"content": "\\ud800"}', 400, "the request's content is not UTF-8 text"),   # a lone surrogate
                                (b"\xff{}", 400, shape),
                                (b"x" * (2 << 20), 413, "the notebook is larger than the 1 MB a check takes")):
        response = httpx.post(server["url"] + "/check", content=body, headers=headers, timeout=60,
                              verify=trusting(server))
        assert response.status_code == status and response.json() == {"error": error}


def tls_socket(server):
    """A socket to the server, its TLS handshake done (the server's certificate trusted), as any client's."""
    host, port = urlsplit(server["url"]).hostname, urlsplit(server["url"]).port
    return trusting(server).wrap_socket(socket.create_connection((host, port), timeout=30), server_hostname=host)


def until_closed(sock):
    """Everything the server sends on `sock` until it closes it (at most the socket's 30 s: a timeout fails)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def head(server, student=None, length=900_000, token=None):
    """A check's request line and headers, announcing a body of `length` bytes, with `student`'s token."""
    token = tokens.issue(server["course"], student) if student and token is None else token
    return (b"POST /check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + (f"Authorization: Bearer {token}\r\n".encode() if token else b"")
            + f"Content-Length: {length}\r\n\r\n".encode())


def test_a_request_nobody_sent_is_refused_before_a_byte_of_its_body_is_read(server):
    """No token, or one this course did not sign: 401 from the headers alone, the connection closed, while the
    900 kB the headers announce are never sent: nothing of an unidentified client's body is ever held."""
    for token, error in ((None, "no token: check() reads it from check-server.json in your kit (ask your "
                                "instructor for your kit)"),
                         ("not-a-token", "this token was not made by this course's check server (ask your "
                                         "instructor for your kit)")):
        sock = tls_socket(server)
        sock.sendall(head(server, token=token))
        answer = until_closed(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 401 ") and b"\r\nConnection: close\r\n" in answer
        assert answer.split(b"\r\n\r\n", 1)[1] == json.dumps({"error": error}).encode()


def bad_post(server, student):
    """A check of `student` whose body is not JSON: 400 once its body is read (nothing is graded)."""
    return httpx.post(server["url"] + "/check", content=b"{", timeout=60, verify=trusting(server),
                      headers={"Authorization": f"Bearer {tokens.issue(server['course'], student)}"})


def test_one_body_of_each_student_arrives_at_a_time_and_a_stalled_one_is_dropped(server):
    """A body of alice's that stalls half-sent holds her one upload: her next request gets 429 with Retry-After
    before its body is read, while bob's is read; after checks: server: timeout the server drops the stalled
    one (its connection closed) and her next body is read again."""
    stalled = tls_socket(server)
    stalled.sendall(head(server, "alice", length=500_000) + b"{" * 1000)
    for _ in range(600):   # until the server has read the stalled one's headers
        refused = bad_post(server, "alice")
        if refused.status_code == 429:
            break
        threading.Event().wait(0.05)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "5"
    assert refused.json() == {"error": "a notebook of yours is arriving already; wait for its answer"}
    assert bad_post(server, "bob").status_code == 400   # another student's body is read
    assert until_closed(stalled) == b""   # dropped after the timeout, without an answer
    stalled.close()
    assert bad_post(server, "alice").status_code == 400


def status_answers(server):
    try:
        return httpx.get(server["url"] + "/status", timeout=10, verify=trusting(server)).status_code == 200
    except httpx.HTTPError:
        return False


def test_silent_connections_are_dropped_and_open_connections_are_capped(server):
    """A connection that sends nothing is closed after checks: server: timeout; at most CONNECTIONS are open at
    once: with that many answered and kept alive, one more is closed as it is accepted (its TLS handshake fails),
    and once they close the server answers again."""
    silent = socket.create_connection((urlsplit(server["url"]).hostname, urlsplit(server["url"]).port), timeout=30)
    assert until_closed(silent) == b""
    silent.close()
    kept, refused = [], 0
    try:
        for _ in range(CONNECTIONS + 2):
            try:
                sock = tls_socket(server)
                sock.sendall(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")   # kept alive after its answer
                assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
                kept.append(sock)
            except OSError:   # ssl.SSLError among them: closed as it was accepted
                refused += 1
        assert 1 <= len(kept) <= CONNECTIONS and refused >= 2, (len(kept), refused)
    finally:
        for sock in kept:
            sock.close()
    for _ in range(600):
        if status_answers(server):
            break
        threading.Event().wait(0.05)
    assert status_answers(server)


HOSTILE = '''import os, signal
for target in (os.getppid(), -1):
    try:
        os.kill(target, signal.SIGKILL)
    except Exception:
        pass
try:
    while True:
        os.fork()
except Exception:
    pass
try:
    hoard = bytearray(1 << 40)
except MemoryError:
    pass


def causal_mask(seq_len, device=None):
    return None
'''


def test_a_hostile_notebook_is_held_in_its_sandbox_and_the_next_check_is_answered(server, tmp_path):
    hostile = post(server, "mallory", masks_with(tmp_path / "mallory", {"causal_mask": HOSTILE}))
    assert hostile.status_code in (200, 500), hostile.text
    if hostile.status_code == 200:
        assert hostile.json()["score"] < hostile.json()["max_score"]
    answered = post(server, "erin", masks_with(tmp_path / "erin"))
    assert answered.status_code == 200 and answered.json()["score"] == 22
    status = httpx.get(server["url"] + "/status", timeout=10, verify=trusting(server)).json()
    assert status["graders"] == status["ready"] == 1


def grading_processes(server):
    """The pids of the server's grading processes (forked: they run the server's command line)."""
    children = Path(f"/proc/{server['process'].pid}/task/{server['process'].pid}/children").read_text().split()
    return [int(pid) for pid in children if b"check-server" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def test_a_grading_process_that_dies_costs_its_check_alone(server, tmp_path):
    """Its check answers 500 with one line; another process takes its place and the next check is graded."""
    notebook = masks_with(tmp_path)
    first, answered = grading_in_background(server, "grace", notebook)
    for pid in grading_processes(server):
        os.kill(pid, signal.SIGKILL)
    first.join(timeout=300)
    assert answered[0].status_code == 500, answered[0].text
    assert answered[0].json() == {"error": GRADING_FAULT}
    again = post(server, "grace", notebook)
    assert again.status_code == 200 and again.json()["score"] == 22


def test_the_kits_check_py_posts_the_saved_notebook_and_prints_the_feedback(server, tmp_path):
    kit = tmp_path / "kit"
    masks_with(kit / "masks")
    tokens.hand_out(server["course"], kit, [server["course"].assignment("masks")], "frank")
    kit_file = json.loads((kit / tokens.KIT_FILE).read_text())
    assert kit_file["student"] == "frank" and (kit / "masks" / "check.py").is_file()
    kit_file["server"] = server["url"]   # the port this test's server took
    (kit / tokens.KIT_FILE).write_text(json.dumps(kit_file))
    printed = subprocess.run([sys.executable, "check.py", "masks.ipynb"], cwd=kit / "masks", capture_output=True,
                             text=True, timeout=300, env={**os.environ, "SSL_CERT_FILE": str(server["certificate"])})
    assert printed.returncode == 0, printed.stdout + printed.stderr
    assert "# Check: masks" in printed.stdout and "**Score: 22 / 22**" in printed.stdout


def test_no_answer_holds_a_line_of_a_hidden_suite_or_of_a_solution(server):
    lines = ondemand.hidden_lines(COURSE, ("masks", "attention_basics"))
    assert len(ANSWERS) >= 15 and all(lines)
    assert [found for text, sent in ANSWERS for found in ondemand.leaked(text, sent, lines)] == []


def test_the_fair_queue_serves_students_in_turn_and_bounds_each_line():
    async def scenario():
        queue = FairQueue(capacity=5)
        for student in ("flood", "flood", "calm"):
            queue.put(Job(student, None, None, b"", None))
        with pytest.raises(Full):
            queue.put(Job("flood", None, None, b"", None))   # PER_STUDENT waiting at most
        queue.put(Job("other", None, None, b"", None))
        queue.put(Job("late", None, None, b"", None))
        with pytest.raises(Full):
            queue.put(Job("one more", None, None, b"", None))   # the whole queue is full
        return [queue.take().student for _ in range(len(queue))]
    assert PER_STUDENT == 2
    assert asyncio.run(scenario()) == ["flood", "calm", "other", "late", "flood"]   # a check grading counts


def test_the_fair_queue_serves_first_who_used_the_fewest_grading_seconds():
    """A student whose checks took much of the graders in the last hour waits behind those who took little,
    whoever came first; and as checks end (Usage.spend) the order follows what they took."""
    from autograder.ondemand.server import Usage
    hour, now = Usage([]), datetime.now(timezone.utc)
    queue = FairQueue(capacity=10, spent=hour.spent)

    def job(student, seconds=None):
        return Job(student, COURSE.assignment("masks"), None, b"", now, seconds=seconds)
    hour.spend(job("heavy", 40.0))
    hour.spend(job("light", 2.0))
    for student in ("heavy", "light", "new"):
        queue.put(job(student))
    assert [queue.take().student for _ in range(3)] == ["new", "light", "heavy"]
    for student in ("heavy", "light"):
        queue.finished(job(student))
    hour.spend(job("light", 60.0))   # light's next check cost more than all of heavy's
    queue.finished(job("new"))
    for student in ("light", "heavy", "new"):
        queue.put(job(student))
    assert [queue.take().student for _ in range(3)] == ["new", "heavy", "light"]
    assert hour.spent("light") == 62.0 and hour.spent("light", now.timestamp() + 3601) == 0.0


@pytest.mark.parametrize("until, closes", [("due", "2026-10-19T08:00:00+00:00"), ("due + 48h", "2026-10-21T08:00:00+00:00"),
                                          ("2026-11-01T12:00:00+01:00", "2026-11-01T11:00:00+00:00")])
def test_course_yml_says_until_when_checks_stay_open(tmp_path, until, closes):
    policy = course_with(tmp_path, {"open": True, "until": until}).assignment("masks").checks
    due = COURSE.assignment("masks").due
    assert policy.open and policy.closes(due) == datetime.fromisoformat(closes)


@pytest.mark.parametrize("checks, error", [
    ({"per_hour": 0}, "checks per_hour must be a whole number of checks, 1 or more"),
    ({"shows": "everything"}, "checks shows must be one of causes, tests, total, not 'everything'"),
    ({"until": "soon"}, "checks until 'soon' is not an ISO 8601 date and time"),
    ({"seconds_per_hour": 0}, "checks seconds_per_hour must be a number of seconds above 0"),
    ({"seconds_per_hour": "1h"}, "checks seconds_per_hour must be a number of seconds above 0"),
    ({"opened": True}, "checks takes open, until, per_hour, seconds_per_hour, shows and server"),
    ({"server": {"certificate": "a.pem"}}, "checks: server needs both certificate and key for TLS, or neither"),
    ({"server": {"hub_names": "name"}}, "checks: server: hub_names must be one of student, sis_user_id, email"),
    ({"server": {"timeout": 0}}, "checks: server: connections must be 1 or more, and timeout a number of seconds")])
def test_a_policy_course_yml_cannot_mean_is_refused_with_one_line(tmp_path, checks, error):
    from autograder.course import CourseError
    with pytest.raises(CourseError, match=re.escape(error)):
        course_with(tmp_path, checks)


def course_with(folder, checks):
    return load_course(ondemand.course_copy(folder, [a.id for a in COURSE.assignments], checks))


def test_a_students_kit_carries_their_token_and_check_py(tmp_path, monkeypatch):
    """make student-kit STUDENT=id: check-server.json at the kit's root with a token the server takes for
    that student alone, and check.py beside the notebooks of each assignment whose checks are open."""
    from autograder import variants
    from autograder.kits import build_student_kit
    secret = tmp_path / "secret" / "variant-secret"   # its own: a kit notes its student beside the secret
    monkeypatch.setenv(variants.SECRET_ENV, str(secret))
    variants.make_secret(secret, COURSE)
    (tmp_path / "course").mkdir()
    course = course_with(tmp_path / "course", {"open": True})
    _, chosen = build_student_kit(course, tmp_path / "kit", student="alice")
    kit = next(folder for folder in tmp_path.iterdir() if folder.name.startswith("kit") and folder.is_dir())
    handed = json.loads((kit / tokens.KIT_FILE).read_text())
    assert handed["student"] == "alice" and handed["server"] == "http://127.0.0.1:8765"
    key = tokens.signing_key(course)
    assert tokens.verify(key, course, handed["token"], "alice") == "alice"
    with pytest.raises(tokens.Refused):
        tokens.verify(key, course, handed["token"], "bob")
    assert all((kit / assignment.id / "check.py").is_file() for assignment in chosen)


def test_the_record_survives_a_restart_and_keeps_the_hourly_limit(tmp_path):
    """What a server appended is read back by the next (a line cut short by a crash skipped), and the
    checks of the last hour still count against the limit."""
    from autograder.course import CheckPolicy
    from autograder.ondemand.server import Usage
    from autograder.ondemand.tokens import Refused
    now = datetime.now(timezone.utc)
    written = ledger.Ledger(tmp_path)
    for minutes in (90, 30, 20):
        written.append({"student": "alice", "assignment": "masks", "at": (now - timedelta(minutes=minutes)).isoformat(),
                        "seconds": 50.0})
    written.close()
    with open(ledger.ledger_path(tmp_path), "a") as handle:
        handle.write('{"student": "alice", "assign')   # the server killed mid-write
    again = ledger.Ledger(tmp_path)   # the next server
    again.append({"student": "bob", "assignment": "masks", "at": now.isoformat()})
    again.close()
    assert [entry["at"] for entry in ledger.read(tmp_path)] == [(now - timedelta(minutes=m)).isoformat()
                                                               for m in (90, 30, 20, 0)]
    limit, masks = Usage(ledger.read(tmp_path)), COURSE.assignment("masks")
    limit.allow("alice", masks, CheckPolicy(per_hour=3), now.timestamp())   # the check of 90 minutes ago no longer counts
    with pytest.raises(Refused) as refused:
        limit.allow("alice", masks, CheckPolicy(per_hour=2), now.timestamp())
    assert refused.value.status == 429 and 30 * 60 - 2 <= refused.value.retry_after <= 30 * 60 + 2
    assert limit.spent("alice", now.timestamp()) == 100.0   # and their grading seconds, those of the last hour
    limit.allow("alice", masks, CheckPolicy(seconds_per_hour=101), now.timestamp())
    with pytest.raises(Refused) as spent:   # under 60 s once the check of 30 minutes ago leaves the hour
        limit.allow("alice", masks, CheckPolicy(seconds_per_hour=60), now.timestamp())
    assert spent.value.status == 429 and "60 s of grading of masks an hour is the limit" in spent.value.message
    assert 30 * 60 - 2 <= spent.value.retry_after <= 30 * 60 + 2
    limit.allow("alice", COURSE.assignment("attention_basics"), CheckPolicy(seconds_per_hour=60), now.timestamp())


def test_the_server_speaks_tls_with_its_certificate_only(server):
    """With a certificate in course.yml the server answers HTTPS alone: a client that does not trust the
    certificate, or that speaks plain HTTP, gets no answer."""
    assert httpx.get(server["url"] + "/status", timeout=10, verify=trusting(server)).status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(server["url"] + "/status", timeout=10)   # the system's authorities do not know it
    with pytest.raises(httpx.HTTPError):
        httpx.get(server["url"].replace("https://", "http://") + "/status", timeout=10)


@pytest.fixture(scope="module")
def on_hub(tmp_path_factory):
    """A real JupyterHub on loopback and the check server as its service `checks` (the environment the hub
    gives a service it manages), on a copy of the course that has released attention_basics alone and
    gives each student 1 ms of grading of it an hour, with a variant secret of its own (the tests' own
    numbers) and the roster alice, bob (whose email is bob@example.edu) and carol recorded beside it; hub names
    are matched to the roster's student column (checks: server: hub_names, by default)."""
    from autograder import variants
    root = tmp_path_factory.mktemp("hub")
    secret = root / "secret" / "variant-secret"
    secret.parent.mkdir(mode=0o700)
    secret.write_bytes(Path(os.environ[variants.SECRET_ENV]).read_bytes())   # the tests' numbers
    secret.chmod(0o600)
    (root / "course").mkdir()   # the secret outside it
    course_yml = ondemand.course_copy(root / "course", ("attention_basics", "masks", "latent_attention"),
                                      {"open": True, "until": "2099-01-01T00:00:00Z", "per_hour": 10},
                                      {"attention_basics": {"seconds_per_hour": 0.001},
                                       "masks": {"open": False}, "latent_attention": {"open": False}},
                                      released=["attention_basics", "masks"])
    course = load_course(course_yml)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(variants.SECRET_ENV, str(secret))
        variants.note_handed_out(course, "the test's roster", {"alice": {}, "bob": {"email": "bob@example.edu"},
                                                               "carol": {}})
    port = ondemand.free_port()
    hub = ondemand.start_hub(root / "jupyterhub", port)
    try:
        process, address = ondemand.start(course_yml, root / "course" / "out", port=None,
                                          env={**ondemand.service_environment(hub, port),
                                               variants.SECRET_ENV: str(secret)})
        try:
            ondemand.hub_ready(hub)
            assert address == f"http://127.0.0.1:{port}/services/checks"
            yield {"url": address, "hub": hub, "course": course, "secret": secret, "port": port,
                   "tokens": {name: ondemand.hub_user_token(hub, name)
                              for name in ("alice", "bob", "bob@example.edu", "carol", "mallory")}}
        finally:
            ondemand.stop(process)
    finally:
        ondemand.stop_hub(hub)


def hub_post(on_hub, token, notebook, student="alice"):
    body = {"student": student, "assignment": "attention_basics", "notebook": Path(notebook).name,
            "content": Path(notebook).read_text()}
    return httpx.post(on_hub["url"] + "/check", json=body, timeout=300, headers={"Authorization": f"token {token}"})


def test_on_a_hub_a_students_hub_token_checks_as_that_student_on_their_own_numbers(on_hub, tmp_path):
    """check() in alice's server on the hub (no check-server.json: the hub's token and address, as the hub
    gives them to her server) is graded on alice's numbers; bob on his."""
    answers = {**solution_answers("attention_basics"), "by_hand": by_hand_written_out("alice")}
    notebook = make_submission("attention_basics", answers, tmp_path / "attention_basics")[0]
    shutil.copyfile(tokens.CLIENT, notebook.parent / "check.py")   # as the hub's image carries it
    env = {name: value for name, value in os.environ.items() if not name.startswith("JUPYTERHUB_")}
    env.update({"JUPYTERHUB_API_TOKEN": on_hub["tokens"]["alice"], "JUPYTERHUB_USER": "alice",
                "JUPYTERHUB_SERVICE_PREFIX": "/user/alice/",   # no proxy here: the service's own origin is the hub's
                "JUPYTERHUB_PUBLIC_HUB_URL": f"http://127.0.0.1:{on_hub['port']}/hub/"})
    printed = subprocess.run([sys.executable, "check.py", notebook.name], cwd=notebook.parent, capture_output=True,
                             text=True, timeout=300, env=env)
    assert printed.returncode == 0, printed.stdout + printed.stderr
    full = COURSE.assignment("attention_basics").max_score
    assert "# Check: attention_basics" in printed.stdout and f"**Score: {full:g} / {full:g}**" in printed.stdout
    bobs = hub_post(on_hub, on_hub["tokens"]["bob"], notebook, student="bob")
    assert bobs.status_code == 200, bobs.text
    assert bobs.json()["student"] == "bob" and bobs.json()["score"] < full   # alice's numbers are not bob's
    recorded = {entry["student"] for entry in ledger.read(on_hub["course"].root / "out")}
    assert recorded == {"alice", "bob"}


def test_on_a_hub_a_token_the_hub_does_not_give_a_student_of_the_roster_is_refused(on_hub, tmp_path):
    notebook = make_submission("attention_basics", solution_answers("attention_basics"), tmp_path)[0]
    unknown = hub_post(on_hub, "0" * 32, notebook)
    assert unknown.status_code == 401 and unknown.json() == {"error": "the hub does not know this token"}
    stranger = hub_post(on_hub, on_hub["tokens"]["mallory"], notebook, student="mallory")
    assert stranger.status_code == 403 and "the hub's user mallory is no student" in stranger.json()["error"]
    service = hub_post(on_hub, on_hub["hub"]["service_token"], notebook)
    assert service.status_code == 403 and service.json()["error"].startswith("this token is the hub's service")
    narrow = ondemand.hub_user_token(on_hub["hub"], "alice", scopes=("read:users:name!user=alice",))
    refused = hub_post(on_hub, narrow, notebook)
    assert refused.status_code == 403 and "no access to the hub's checks service" in refused.json()["error"]
    by_email = hub_post(on_hub, on_hub["tokens"]["bob@example.edu"], notebook, student="bob@example.edu")
    assert by_email.status_code == 403   # bob's email is no student id (checks: server: hub_names)
    assert by_email.json()["error"].startswith("the hub's user bob@example.edu is no student")
    as_bob = hub_post(on_hub, on_hub["tokens"]["alice"], notebook, student="bob")
    assert as_bob.status_code == 403 and as_bob.json() == {"error": "this token is not bob's"}
    course_token = tokens.issue(on_hub["course"], "alice")   # the course's own tokens are not the hub's
    assert hub_post(on_hub, course_token, notebook).status_code == 401


def test_on_a_hub_a_check_of_an_assignment_not_released_is_refused(on_hub, tmp_path):
    """latent_attention, which course.yml's released: does not list: 403 with one line, its notebooks unnamed."""
    notebook = tmp_path / "x.ipynb"
    notebook.write_text("{}")
    body = {"student": "alice", "assignment": "latent_attention", "notebook": notebook.name, "content": "{}"}
    refused = httpx.post(on_hub["url"] + "/check", json=body, timeout=60,
                         headers={"Authorization": f"token {on_hub['tokens']['alice']}"})
    assert refused.status_code == 403
    assert refused.json() == {"error": "latent_attention is not released yet (course.yml's released: does not list it)"}


@pytest.mark.parametrize("column, name, student", [
    ("student", "bob", "bob"), ("student", "bob@example.edu", None), ("student", "s-2", None),
    ("sis_user_id", "s-2", "bob"), ("sis_user_id", "bob", "alice"), ("sis_user_id", "bob@example.edu", None),
    ("email", "Bob@Example.EDU", "bob"), ("email", "bob", None), ("email", "shared@example.edu", None)])
def test_a_hub_name_is_matched_to_the_one_roster_column_course_yml_names(column, name, student):
    """checks: server: hub_names (default: student): a hub user's name names the student whose value in that
    column it is, and never one whose other column holds it (alice's sis_user_id is "bob"); two: none."""
    from autograder.ondemand.hub import roster_student
    roster = {"alice": {"sis_user_id": "bob", "email": "shared@example.edu"},
              "bob": {"sis_user_id": "s-2", "email": "bob@example.edu"}, "carol": {"email": "shared@example.edu"}}
    assert roster_student(roster, column, name) == student


def test_on_a_hub_a_student_gets_their_own_variant_json(on_hub):
    """GET <prefix>variant/<assignment>: the student's variant.json as make variants writes it, its hand-out
    recorded beside the secret; 404 with one line for an assignment without numbers of its own or not
    released; 401 for a token the hub does not know."""
    from autograder.variants import Variants, record_path

    def variant(token, assignment="attention_basics"):
        return httpx.get(f"{on_hub['url']}/variant/{assignment}", headers={"Authorization": f"token {token}"},
                         timeout=60)
    basics = on_hub["course"].assignment("attention_basics")
    for name, student in (("alice", "alice"), ("bob", "bob")):
        answered = variant(on_hub["tokens"][name])
        assert answered.status_code == 200, answered.text
        assert answered.text == Variants.of(on_hub["course"]).handed_out_text(basics, student)
    assert variant(on_hub["tokens"]["alice"]).json()["notebooks"] != variant(on_hub["tokens"]["bob"]).json()["notebooks"]
    record = json.loads(record_path(on_hub["secret"]).read_text())
    assert "variant.json of attention_basics served by the check server" in [entry["what"] for entry in record["left"]]
    none = variant(on_hub["tokens"]["alice"], "masks")
    assert none.status_code == 404 and none.json() == {"error": "masks has no numbers of each student's own"}
    later = variant(on_hub["tokens"]["alice"], "latent_attention")
    assert later.status_code == 404
    assert later.json() == {"error": "latent_attention is not released yet (course.yml's released: does not list it)"}
    assert variant("0" * 32).status_code == 401


def test_a_students_grading_seconds_an_hour_are_a_budget(on_hub, tmp_path):
    """course.yml's seconds_per_hour (1 ms of attention_basics here): once a student's checks took it, 429 with
    Retry-After, until they leave the hour."""
    notebook = tmp_path / "attention_basics.ipynb"
    notebook.write_text("not a notebook")
    first = hub_post(on_hub, on_hub["tokens"]["carol"], notebook, student="carol")
    assert first.status_code == 200 and first.json()["reason"]   # graded: nothing of it runs, yet it took a grader
    spent = hub_post(on_hub, on_hub["tokens"]["carol"], notebook, student="carol")
    assert spent.status_code == 429, spent.text
    assert spent.json()["error"] == ("0.001 s of grading of attention_basics an hour is the limit; your checks of the "
                                     "last hour took them.")
    assert 3500 < int(spent.headers["Retry-After"]) <= 3601


def kit_check_module():
    """The kit's check.py, as a student's kernel imports it (`from check import check`)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kit_check", tokens.CLIENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("environ, address", [
    ({"JUPYTERHUB_PUBLIC_HUB_URL": "https://hub.example.edu/hub/", "JUPYTERHUB_SERVICE_PREFIX": "/user/alice/"},
     "https://hub.example.edu/services/checks/"),
    ({"JUPYTERHUB_PUBLIC_HUB_URL": "https://hub.example.edu/jhub/hub/", "JUPYTERHUB_SERVICE_PREFIX": "/jhub/user/alice/lab/"},
     "https://hub.example.edu/jhub/services/checks/"),   # a named server, under a hub's base
    ({"JUPYTERHUB_PUBLIC_HUB_URL": "", "JUPYTERHUB_HOST": "https://alice.hub.example.edu:8443",
      "JUPYTERHUB_SERVICE_PREFIX": "/user/alice/"}, "https://alice.hub.example.edu:8443/services/checks/")])
def test_check_py_finds_the_hubs_check_service_from_its_servers_environment(environ, address):
    assert kit_check_module().hub_service_address(environ) == address


def test_check_py_says_so_where_the_hub_gave_no_public_address():
    with pytest.raises(ValueError, match="c.JupyterHub.public_url"):
        kit_check_module().hub_service_address({"JUPYTERHUB_PUBLIC_HUB_URL": "", "JUPYTERHUB_SERVICE_PREFIX": "/user/a/"})


def test_the_hubs_service_environment_says_where_to_listen_and_who_names_students():
    """Outside a hub: course.yml's address and the course's tokens. On one: the service's address under its
    prefix, and the hub; a service environment the hub left half-set, or a --port that is not the hub's,
    is refused with one line."""
    from autograder.course import CourseError
    from autograder.ondemand import hub
    from autograder.ondemand.server import where_to_listen
    place, who = where_to_listen(COURSE, None, environ={})
    assert place == ("127.0.0.1", 8765, "/") and isinstance(who, tokens.CourseTokens)
    environ = {"JUPYTERHUB_SERVICE_NAME": "checks", "JUPYTERHUB_API_TOKEN": "t", "JUPYTERHUB_API_URL": "http://127.0.0.1:1/hub/api",
               "JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:9123", "JUPYTERHUB_SERVICE_PREFIX": "/services/checks/"}
    place, who = where_to_listen(COURSE, None, environ=environ)
    assert place == ("127.0.0.1", 9123, "/services/checks/") and isinstance(who, hub.HubStudents)
    with pytest.raises(CourseError, match="--port 8000 is not the port of the hub's JUPYTERHUB_SERVICE_URL"):
        where_to_listen(COURSE, 8000, environ=environ)
    with pytest.raises(CourseError, match="JUPYTERHUB_SERVICE_URL is not set"):
        where_to_listen(COURSE, None, environ={**environ, "JUPYTERHUB_SERVICE_URL": ""})


def test_a_hub_that_does_not_answer_refuses_the_check_with_503_and_retry_after():
    from autograder.ondemand import hub
    from autograder.ondemand.server import where_to_listen
    environ = {"JUPYTERHUB_SERVICE_NAME": "checks", "JUPYTERHUB_API_TOKEN": "t",
               "JUPYTERHUB_API_URL": f"http://127.0.0.1:{ondemand.free_port()}/hub/api",   # nobody listens
               "JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:9123", "JUPYTERHUB_SERVICE_PREFIX": "/services/checks/"}
    _, who = where_to_listen(COURSE, None, environ=environ)
    with pytest.raises(tokens.Refused) as refused:
        asyncio.run(who.caller("token abc"))
    assert refused.value.status == 503 and refused.value.retry_after == hub.HUB_RETRY
    with pytest.raises(tokens.Refused) as missing:
        asyncio.run(who.caller(""))
    assert missing.value.status == 401
