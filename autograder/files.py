"""Writing the grader's outputs so that a crash leaves the old content or the new, never half:
records, feedback pages, grades.csv and every other table go through here, and so does what the grader
keeps in its cache folder (`cached`: values worked out once per machine)."""

import contextlib
import csv
import io
import os
import stat
from pathlib import Path


def write_atomic(path, text):
    """Write a file whole (text, or bytes): to a temporary file beside it, then renamed over it.  A
    write that fails (its disk full) leaves the old file as it was and no temporary file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(text, bytes):
            temporary.write_bytes(text)
        else:
            temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


CACHE_ENV = "COURSE_CACHE"


def cache_folder(kind):
    """The grader's own folder for what it works out once per machine and keeps between runs (`kind`:
    suites, pictures): $COURSE_CACHE/<kind>, else ~/.cache/attention-course/<kind>.  Made private on
    first use; nothing of it is bound into the sandbox."""
    root = Path(os.environ[CACHE_ENV]) if os.environ.get(CACHE_ENV) else \
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attention-course"
    folder = root / kind
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def cached(kind, name, make, load=bytes):
    """What make() gives (bytes), worked out once per machine: kept whole as cache_folder(kind)/name, and
    given back as load(data) to this call and every later one, in this process or another.  A file that
    is missing, unreadable or refused by load (it raises) is made again and written over; where the
    folder cannot be made or written, the value is made at every call."""
    path = None
    try:
        path = cache_folder(kind) / name
        return load(path.read_bytes())
    except Exception:  # noqa: BLE001 - not there yet, no folder, or a file load refuses: made again
        pass
    data = make()
    if path is not None:
        with contextlib.suppress(OSError):
            write_atomic(path, data)
    return load(data)


def csv_text(header, rows):
    """A CSV table (Unix line ends): `header` the column names, `rows` lists in that order or dicts."""
    buffer = io.StringIO()
    if rows and isinstance(rows[0], dict):
        writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
        writer.writeheader()
    else:
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def write_csv(path, header, rows):
    write_atomic(path, csv_text(header, rows))


class PrivateFileError(Exception):
    """A file that only its owner may read (a key, a secret) is missing, shared or in the repository."""


def read_private(path, course_root, what, hint):
    """The bytes of a file only its owner reads, kept outside the course repository (the LMS key, the
    variant secret); refused otherwise, with what to do (`hint`)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except OSError as error:
        raise PrivateFileError(f"cannot read {what} {path}: {error.strerror} ({hint})") from None
    if Path(course_root).resolve() in path.resolve().parents:
        raise PrivateFileError(f"{what} {path} lies inside the course repository: move it out (and chmod 600 it)")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PrivateFileError(f"{what} {path} can be read by others (mode {stat.S_IMODE(mode):o}): chmod 600 {path}")
    return path.read_bytes()
