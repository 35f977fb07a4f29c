"""Every check recorded: one JSON line per check (student, time, assignment, score, named causes) in
<out>/checks/checks.jsonl, the folder make grade writes to.  Each line goes in one write to a file
opened for appending and reaches the disk before the check's answer leaves, so a restart of the server
loses no recorded check; a line cut short by a crash mid-write is skipped when read."""

import importlib
import json
import os
from pathlib import Path


def ledger_path(out):
    return Path(out) / "checks" / "checks.jsonl"


def known_causes(assignments):
    """exercise id -> the causes its suite names (its module's CAUSES), whitespace made single."""
    known = {}
    for assignment in assignments:
        for exercise in assignment.exercises:
            module = importlib.import_module(f"autograder.suites.{exercise.suite.stem}")
            known[exercise.id] = [" ".join(str(cause).split()) for cause in getattr(module, "CAUSES", {}).values()]
    return known


def causes(record, known):
    """The named causes (of `known`, known_causes) in the feedback of the failed tests of a graded record
    (results.to_record), each once, in order."""
    found = []
    for notebook in record["notebooks"]:
        for test in notebook["tests"]:
            if test["score"] < test["max_score"]:
                said = " ".join((test.get("output") or "").split())
                found += [cause for cause in known.get(test["exercise"], ()) if cause in said]
    return list(dict.fromkeys(found))


class Ledger:
    def __init__(self, out):
        self.path = ledger_path(out)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        size = os.fstat(self.fd).st_size
        if size and os.pread(self.fd, 1, size - 1) != b"\n":
            os.write(self.fd, b"\n")   # a line cut short by a crash ends here, not in the next one

    def append(self, entry):
        os.write(self.fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
        os.fsync(self.fd)

    def close(self):
        os.close(self.fd)


def read(out):
    """Every recorded check, oldest first ([] where none was recorded)."""
    try:
        lines = ledger_path(out).read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue   # cut short by a crash mid-write
        if isinstance(entry, dict) and {"student", "assignment", "at"} <= set(entry):
            entries.append(entry)
    return entries
