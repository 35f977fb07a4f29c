"""The check server (autograder/ondemand/), started for real on loopback once for the module, on a copy
of the course whose course.yml opens checks of masks and attention_basics (and closes scaled_attention's
at its due date): what a student's check() gets back, and what it never gets."""

import asyncio
import json
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
from pathlib import Path

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
ANSWERS = []   # every response body of the module, scanned at its end


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The check server of a copy of the course (its course.yml; the rest linked), one grading process, over
    HTTPS with a certificate of its own (the clients trust it alone)."""
    root = tmp_path_factory.mktemp("checked")
    certificate, key = ondemand.self_signed(root / "tls")
    course_yml = ondemand.course_copy(root, ("masks", "attention_basics", "scaled_attention"),
                                      {"open": True, "until": "2099-01-01T00:00:00Z", "per_hour": PER_HOUR,
                                       "server": {"max_mb": 1, "certificate": str(certificate), "key": str(key)}},
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


def test_after_the_due_date_the_check_is_refused_with_the_date(server, tmp_path):
    notebook = make_submission("scaled_attention", {}, tmp_path)[0]
    refused = post(server, "alice", notebook, assignment="scaled_attention")
    assert refused.status_code == 403
    assert refused.json()["error"] == "checks of scaled_attention closed at 2026-10-05 08:00 UTC (the due date)"


def test_malformed_and_oversized_requests_get_one_line(server):
    headers = {"Authorization": f"Bearer {tokens.issue(server['course'], 'alice')}"}
    for body, status, error in ((b"{", 400, "the body is not JSON"),
                                (json.dumps({"student": "alice"}).encode(), 400, "the request has no assignment (a string)"),
                                (b"[" * 100_000 + b"]" * 100_000, 400, "the body is not JSON"),   # deeper than json recurses
                                (b'{"student": "alice", "assignment": "masks", "notebook": "masks.ipynb", '
                                 b'"content": "\\ud800"}', 400, "the request's content is not UTF-8 text"),   # a lone surrogate
                                (b"\xff{}", 400, "the body is not JSON"),
                                (b"x" * (2 << 20), 413, "the notebook is larger than the 1 MB a check takes")):
        response = httpx.post(server["url"] + "/check", content=body, headers=headers, timeout=60,
                              verify=trusting(server))
        assert response.status_code == status and response.json() == {"error": error}


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
    answered = []
    first = threading.Thread(target=lambda: answered.append(post(server, "grace", notebook)))
    first.start()
    while httpx.get(server["url"] + "/status", timeout=10, verify=trusting(server)).json()["grading"] == 0 \
            and first.is_alive():
        threading.Event().wait(0.02)
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
    assert asyncio.run(scenario()) == ["flood", "calm", "other", "late", "flood"]


@pytest.mark.parametrize("until, closes", [("due", "2026-10-19T08:00:00+00:00"), ("due + 48h", "2026-10-21T08:00:00+00:00"),
                                          ("2026-11-01T12:00:00+01:00", "2026-11-01T11:00:00+00:00")])
def test_course_yml_says_until_when_checks_stay_open(tmp_path, until, closes):
    from datetime import datetime
    policy = course_with(tmp_path, {"open": True, "until": until}).assignment("masks").checks
    due = COURSE.assignment("masks").due
    assert policy.open and policy.closes(due) == datetime.fromisoformat(closes)


@pytest.mark.parametrize("checks, error", [
    ({"per_hour": 0}, "checks per_hour must be a whole number of checks, 1 or more"),
    ({"shows": "everything"}, "checks shows must be one of causes, tests, total, not 'everything'"),
    ({"until": "soon"}, "checks until 'soon' is not an ISO 8601 date and time"),
    ({"opened": True}, "checks takes open, until, per_hour, shows and server"),
    ({"server": {"certificate": "a.pem"}}, "checks: server needs both certificate and key for TLS, or neither")])
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
    from datetime import datetime, timedelta, timezone
    from autograder.ondemand.server import HourlyLimit
    from autograder.ondemand.tokens import Refused
    now = datetime.now(timezone.utc)
    written = ledger.Ledger(tmp_path)
    for minutes in (90, 30, 20):
        written.append({"student": "alice", "assignment": "masks", "at": (now - timedelta(minutes=minutes)).isoformat()})
    written.close()
    with open(ledger.ledger_path(tmp_path), "a") as handle:
        handle.write('{"student": "alice", "assign')   # the server killed mid-write
    again = ledger.Ledger(tmp_path)   # the next server
    again.append({"student": "bob", "assignment": "masks", "at": now.isoformat()})
    again.close()
    assert [entry["at"] for entry in ledger.read(tmp_path)] == [(now - timedelta(minutes=m)).isoformat()
                                                               for m in (90, 30, 20, 0)]
    limit, masks = HourlyLimit(ledger.read(tmp_path)), COURSE.assignment("masks")
    limit.allow("alice", masks, 3, now.timestamp())   # the check of 90 minutes ago no longer counts
    with pytest.raises(Refused) as refused:
        limit.allow("alice", masks, 2, now.timestamp())
    assert refused.value.status == 429 and 30 * 60 - 2 <= refused.value.retry_after <= 30 * 60 + 2


def test_the_server_speaks_tls_with_its_certificate_only(server):
    """With a certificate in course.yml the server answers HTTPS alone: a client that does not trust the
    certificate, or that speaks plain HTTP, gets no answer."""
    assert httpx.get(server["url"] + "/status", timeout=10, verify=trusting(server)).status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(server["url"] + "/status", timeout=10)   # the system's authorities do not know it
    with pytest.raises(httpx.HTTPError):
        httpx.get(server["url"].replace("https://", "http://") + "/status", timeout=10)
