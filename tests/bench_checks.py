"""`python -m tests.bench_checks`: a class checking at once against the real check server on loopback.

STUDENTS students (100 by default) each post one notebook of an assignment at the same moment, with a
bounded asyncio client (httpx); a check refused with 503 or 429 is posted again after its Retry-After,
as check() would be by a patient student; then --alone checks are posted one at a time on the idle
server.  Every assignment of course.yml in turn (or each --assignment), all to one server.  The class
is made like a real one (tests.bench.realistic_answers): most notebooks carry one of the catalogue's
realistic mistakes, a few are right, a few untouched.  Prints, per assignment, p50, p95 and the largest
latency (from the first post to the answer, retries included), the checks per second, and beside them
the floor: the checks' own grading seconds (the ledger's) over the grading processes, and the CPU
seconds the server's processes and sandboxes spent (what a check costs however busy the machine is
with other work); then the median and largest latency of the checks posted alone.  Every request is
answered or refused with its reason, and no answer holds a line of the hidden suites or of a
solution; a lost request or a leak fails the run.
"""

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml

from autograder import variants
from autograder.course import load_course
from autograder.ondemand import ledger, tokens
from tests import ondemand
from tests.bench import realistic_answers
from tests.notebooks import make_submission


def the_class(assignment, students, folder):
    """(student, notebook path): the bench's realistic class (tests.bench.realistic_answers)."""
    return [(f"student{index:03d}", make_submission(assignment, realistic_answers(assignment, index),
                                                    Path(folder) / f"student{index:03d}")[0])
            for index in range(students)]


def tree_cpu(pid):
    """CPU seconds (user and system) of a process and every process under it: the grading processes, the
    sandboxes' workers and, reaped by them, the children that ran the students' code.  What the machine's
    other work costs the checks shows in their latency, not here."""
    processes = [psutil.Process(pid)]
    processes += processes[0].children(recursive=True)
    total = 0.0
    for each in processes:
        try:
            times = each.cpu_times()
        except psutil.Error:   # ended meanwhile
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


async def one_check(client, url, course, assignment, student, path, refusals, answers):
    body = {"student": student, "assignment": assignment, "notebook": path.name, "content": path.read_text()}
    headers = {"Authorization": f"Bearer {tokens.issue(course, student)}"}
    started = time.monotonic()
    while True:
        response = await client.post(url + "/check", json=body, headers=headers)
        answers.append((response.text, body["content"]))
        if response.status_code in (429, 503):
            refusals[response.status_code] = refusals.get(response.status_code, 0) + 1
            await asyncio.sleep(float(response.headers["Retry-After"]))
            continue
        return response.status_code, time.monotonic() - started


async def load(url, course, assignment, made):
    refusals, bodies = {}, []
    async with httpx.AsyncClient(timeout=900, limits=httpx.Limits(max_connections=len(made))) as client:
        started = time.monotonic()
        answers = await asyncio.gather(*[one_check(client, url, course, assignment, student, path, refusals, bodies)
                                         for student, path in made])
        return answers, time.monotonic() - started, refusals, bodies


async def one_by_one(url, course, assignment, made):
    """Seconds of each check posted alone, the server idle between them (the latency a student meets on a
    quiet evening)."""
    refusals, bodies, seconds = {}, [], []
    async with httpx.AsyncClient(timeout=900) as client:
        for student, path in made:
            status, took = await one_check(client, url, course, assignment, student, path, refusals, bodies)
            assert status == 200 and not refusals, (status, refusals)
            seconds.append(took)
    return seconds


def one_assignment(url, course, assignment, made, process, out, jobs, alone):
    """The class checking `assignment` at once, then `alone` checks one at a time: the line to print.
    Asserts that every check was answered and that no answer holds a hidden line."""
    before = tree_cpu(process.pid)
    answers, wall, refusals, bodies = asyncio.run(load(url, course, assignment, made))
    cpu = tree_cpu(process.pid) - before
    one_at_a_time = asyncio.run(one_by_one(url, course, assignment, made[:alone])) if alone else []
    statuses = [status for status, _ in answers]
    assert len(answers) == len(made) and set(statuses) <= {200}, f"{assignment}: answers {statuses}"
    hidden = ondemand.hidden_lines(course, [assignment])
    leaks = [found for text, sent in bodies for found in ondemand.leaked(text, sent, hidden)]
    assert not leaks, f"{assignment}: answers hold hidden lines: {leaks[:3]}"
    graded = [entry["seconds"] for entry in ledger.read(out)
              if entry["assignment"] == assignment and entry["seconds"] is not None][:len(made)]
    latencies = sorted(seconds for _, seconds in answers)
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
    line = (f"{assignment}: {len(made)} students at once, {jobs} grading processes: "
            f"p50 {statistics.median(latencies):.1f} s, p95 {p95:.1f} s, max {latencies[-1]:.1f} s; "
            f"{len(made) / wall:.2f} checks/s over {wall:.1f} s; floor {sum(graded) / jobs:.1f} s "
            f"(the checks' own {sum(graded):.1f} s over {jobs} processes); CPU of the server and its sandboxes "
            f"{cpu:.1f} s, {cpu / len(made):.2f} s a check; refused then answered: {refusals or 'none'}; "
            f"{len(bodies)} answers scanned, none holds a line of the hidden suites or a solution")
    if one_at_a_time:
        line += (f"; then {len(one_at_a_time)} checks one at a time on the idle server: median "
                 f"{statistics.median(one_at_a_time):.2f} s, max {max(one_at_a_time):.2f} s")
    return line


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--assignment", action="append", help="only these assignments (default: every one)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--alone", type=int, default=10, help="checks then posted one at a time, the server idle")
    args = parser.parse_args()
    chosen = args.assignment or [assignment.id for assignment in load_course().assignments]
    with tempfile.TemporaryDirectory(prefix="bench-checks-") as folder, \
            tempfile.TemporaryDirectory(prefix="bench-checks-secret-") as kept:
        root = Path(folder)
        course_yml = ondemand.course_copy(root, chosen, {"open": True, "until": "2099-01-01T00:00:00Z",
                                                         "per_hour": 1000})
        raw = yaml.safe_load(course_yml.read_text())
        for assignment in raw["assignments"]:   # every assignment released, whatever today's date
            assignment["release"] = "2026-01-05T09:00:00+00:00"
        course_yml.write_text(yaml.safe_dump(raw))
        course = load_course(course_yml)
        # A variant secret of the bench's own, outside the course (the tokens and any variant numbers come from it);
        # the server started below inherits it.
        os.environ[variants.SECRET_ENV] = str(Path(kept) / "variant-secret")
        variants.make_secret(os.environ[variants.SECRET_ENV], course)
        process, url = ondemand.start(course_yml, root / "out", jobs=args.jobs)
        try:
            for assignment in chosen:
                made = the_class(assignment, args.students, root / "class" / assignment)
                print(one_assignment(url, course, assignment, made, process, root / "out", args.jobs, args.alone),
                      flush=True)
        finally:
            ondemand.stop(process)


if __name__ == "__main__":
    main()
