"""The check server for tests and the bench: a copy of the course with its own course.yml (the rest
linked), and the real server started on it on loopback, in a process of its own."""

import re
import subprocess
import sys
import threading

import yaml

from tests.notebooks import ROOT


def course_copy(root, assignments, checks, overrides=None):
    """`root`/course.yml: the course's, with only `assignments`, course-wide `checks` and per-assignment
    `overrides` of them; solutions/, exercises/ and requirements.txt linked to the repository's."""
    raw = yaml.safe_load((ROOT / "course.yml").read_text())
    raw["assignments"] = [a for a in raw["assignments"] if a["id"] in assignments]
    raw["checks"] = checks
    for assignment in raw["assignments"]:
        assignment["checks"] = (overrides or {}).get(assignment["id"], {})
    (root / "course.yml").write_text(yaml.safe_dump(raw))
    for name in ("solutions", "exercises", "requirements.txt"):
        (root / name).symlink_to(ROOT / name)
    return root / "course.yml"


def start(course_yml, out, jobs=1, timeout=300):
    """(the server's process, its address) once it says it is ready; AssertionError with its output if not."""
    process = subprocess.Popen([sys.executable, "-m", "autograder", "--course", course_yml, "check-server",
                                "--jobs", str(jobs), "--port", "0", "--out", out], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True).start()
    for _ in range(timeout * 10):
        if any("check server ready" in line for line in lines) or process.poll() is not None:
            break
        threading.Event().wait(0.1)
    if not any("check server ready" in line for line in lines):
        process.kill()
        raise AssertionError("the check server did not start:\n" + "".join(lines))
    return process, re.search(r"listening at (http\S+),", "".join(lines)).group(1)


def stop(process):
    process.terminate()
    process.wait(timeout=60)
