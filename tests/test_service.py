"""The grading service (`serve`, autograder/service.py): grade-class handed to it grades as it grades
on its own, and a service that holds what the disk no longer says, or that another shell's
environment would have started differently, grades nothing.

Each test starts its own service on a copy of the course (its socket lives in the copy), so that a
`make serve` running beside `make test` serves none of the suite's other runs.
"""

import csv
import json
import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest

from autograder.service import socket_path, wait_idle
from tests.sample_class import EXPECTED, SUBMITTED
from tests.test_customise import copy_of_the_course

pytestmark = pytest.mark.slow   # the grading service run live on copies of the course (minutes): make test-all and CI

STUDENTS = ("ada_perfect", "ben_untouched", "cara_no_scaling", "dev_wrong_axes", "fay_syntax_error")
PART = [arg for student in STUDENTS for arg in ("--student", student)] + ["--assignment", "scaled_attention"]


def grader(course, *args, env=None, **options):
    return subprocess.run([sys.executable, "-m", "autograder", *map(str, args)], cwd=course, capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})}, **options)


def wait_ready(course, process, timeout=180):
    """The service's state once its spare sandboxes are all started and idle."""
    state = wait_idle(course, timeout, alive=lambda: process.poll() is None)
    assert state, process.communicate() if process.poll() is not None else "the grading service did not get ready"
    return state


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    course = copy_of_the_course(tmp_path_factory.mktemp("course"))
    process = subprocess.Popen([sys.executable, "-m", "autograder", "serve", "--jobs", "1"], cwd=course,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_ready(course, process)
    yield course, process
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=60)


def scores(out):
    with open(out / "grades.csv") as handle:
        return {(row["student"], row["assignment"]): float(row["score"]) for row in csv.DictReader(handle)}


def graded(course, out, *extra, env=None):
    return grader(course, "grade-class", "--submitted", SUBMITTED, "--out", out, "--db", f"sqlite:///{out / 'gb.db'}",
                  "--autograded", out / "autograded", "--force", *PART, *extra, env=env)


def expected():
    return {key: value for key, value in EXPECTED.items() if key[0] in STUDENTS and key[1] == "scaled_attention"}


def test_the_service_grades_what_grade_class_grades_on_its_own(service, tmp_path):
    """Served, and on its own: where the shell's environment differs in what torch reads as it starts."""
    course, process = service
    served = graded(course, tmp_path / "served")
    alone = graded(course, tmp_path / "alone", env={"OMP_NUM_THREADS": "7"})
    assert served.returncode == alone.returncode == 0, served.stderr + alone.stderr
    assert "run in the course's grading service" in served.stderr, served.stderr
    assert "run without the course's grading service: this shell's environment differs from the service's " \
           "in OMP_NUM_THREADS" in alone.stderr, alone.stderr
    # each as the sample class says, so two broken runs cannot agree
    assert scores(tmp_path / "served") == scores(tmp_path / "alone") == expected()
    assert (tmp_path / "served" / "results" / "cara_no_scaling" / "scaled_attention" / "results.json").is_file()
    # the service's own folder is the user's alone
    socket_file = course / ".grader" / "service.sock"
    assert oct(os.stat(socket_file.parent).st_mode & 0o777) == "0o700"
    assert oct(os.stat(socket_file).st_mode & 0o777) == "0o600"
    # --no-service is never handed over (the service logs each run it takes: see the last test)
    refused = grader(course, "grade-class", "--no-service", "--submitted", tmp_path / "nowhere")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        f"error: no submissions folder at {tmp_path / 'nowhere'}"], refused.stderr


def test_spares_are_warmed_as_the_last_run_wanted_them(service, tmp_path):
    """Spares warm up torch's dynamo stack only when the run before needed it (an assignment that
    counts work or trains): a run of scaled_attention leaves cold spares, one of heads_at_work warm
    ones, and each grades as the sample class says."""
    course, process = service
    cold = graded(course, tmp_path / "cold")
    assert cold.returncode == 0 and "run in the course's grading service" in cold.stderr, cold.stderr
    assert scores(tmp_path / "cold") == expected()
    assert wait_ready(course, process)["warm"] == 0
    warm = grader(course, "grade-class", "--submitted", SUBMITTED, "--out", tmp_path / "warm", "--db",
                  f"sqlite:///{tmp_path / 'warm' / 'gb.db'}", "--student", "ada_perfect", "--assignment", "heads_at_work")
    assert warm.returncode == 0 and "run in the course's grading service" in warm.stderr, warm.stderr
    assert scores(tmp_path / "warm") == {key: value for key, value in EXPECTED.items()
                                         if key == ("ada_perfect", "heads_at_work")}
    state = wait_ready(course, process)
    assert state["warm"] == state["spares"] == 1


def test_an_unreadable_request_is_refused_and_the_service_goes_on(service):
    course, process = service
    for payload in (b"[1, 2]", b'{"op": "grade", "argv": "grade-class"}', b'{"op": "grade", "argv": ["grade"]}'):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as client:
            client.connect(str(socket_path(course)))
            client.send(payload)
            assert "refused" in json.loads(client.recv(4096)), payload  # the last: no terminal handed over
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as client:
        client.connect(str(socket_path(course)))
        client.send(b"not json")
        assert client.recv(4096) == b""   # closed
    assert wait_ready(course, process)["spares"] == 1


def test_a_changed_course_is_graded_without_the_service_which_starts_again(service, tmp_path):
    course, process = service
    os.utime(course / "course.yml")  # as an edit would
    changed = graded(course, tmp_path / "changed")
    assert changed.returncode == 0, changed.stderr
    assert "run without the course's grading service: the course or the grader changed" in changed.stderr
    assert scores(tmp_path / "changed") == expected()
    wait_ready(course, process)      # started again, on the course as it now is
    again = graded(course, tmp_path / "again")
    assert again.returncode == 0 and "run in the course's grading service" in again.stderr, again.stderr
    assert scores(tmp_path / "again") == expected()


def test_ctrl_c_reaches_the_run_and_a_killed_client_ends_it(service, tmp_path):
    course, process = service
    wait_ready(course, process)
    args = [sys.executable, "-m", "autograder", "grade-class", "--submitted", str(SUBMITTED), "--out",
            str(tmp_path / "out"), "--db", f"sqlite:///{tmp_path / 'gb.db'}", "--autograded",
            str(tmp_path / "autograded"), "--force", "--jobs", "1"]
    client = subprocess.Popen(args, cwd=course, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in client.stdout:   # the progress says a first submission is graded
        if line.startswith("graded "):
            break
    client.send_signal(signal.SIGINT)
    out, err = client.communicate(timeout=120)
    assert client.returncode == 130, err
    assert "interrupted: what was graded is saved" in err
    assert 0 < len(list((tmp_path / "out" / "results").glob("*/*/grade.json"))) < len(EXPECTED)
    wait_ready(course, process)

    client = subprocess.Popen(args, cwd=course, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in client.stdout:
        if line.startswith("graded "):
            break
    client.kill()
    client.wait()
    assert wait_ready(course, process, timeout=60)["running"] == 0   # the run ended with its client


def test_the_service_stops_with_its_sandboxes(service):
    """(last: it stops the module's service)"""
    course, process = service
    wait_ready(course, process)
    second = grader(course, "serve")
    assert second.returncode == 2 and "a grading service already runs for this course" in second.stderr
    sandboxes = psutil.Process(process.pid).children(recursive=True)
    assert sandboxes
    process.terminate()
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    runs = [line for line in output.splitlines() if line.startswith("run ")]
    assert len(runs) >= 4 and "grading service stopped" in output
    assert not [line for line in runs if "--no-service" in line or "nowhere" in line]
    assert not (course / ".grader" / "service.sock").exists()
    assert not [p for p in sandboxes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert grader(course, "serve", "--status").returncode == 1
