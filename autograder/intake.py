"""What students hand in, read as hostile input: the one way to reach a submission's files.

A submission folder comes from a student (a git repository, an upload, an archive unpacked by
hand), and grading runs with more rights than the student had.  So nothing here follows a link out
of the folder, opens anything but a regular file, reads past a size limit, or walks a folder
without a bound on its entries:

    submission_folders(submitted)   the <student>/<assignment> folders of a class, links refused
    find_notebooks(folder)          every .ipynb in a folder of unknown layout (Gradescope, a repository)
    read_file(path, folder, limit)  the bytes of one file, if it lies inside `folder`

Every refusal is a `SubmissionError` whose message is one line that the student can act on.
"""

import json
import os
import stat
from pathlib import Path


class SubmissionError(Exception):
    """The submission cannot be graded at all; the message is one line for the student."""


MAX_ENTRIES = 2000          # files and folders looked at in one submission folder
MAX_NAME = 200              # characters in a student's or an assignment's folder name


def printable(name):
    """How a file name is shown in a one-line message (control characters escaped)."""
    return name if name.isprintable() else ascii(name)[1:-1]


def inside(path, folder):
    """The real path of `path`, which must lie inside `folder` (links within it are fine)."""
    real, root = os.path.realpath(path), os.path.realpath(folder)
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise SubmissionError(f"{printable(Path(path).name)} is a link to a place outside the submission; "
                              "it was not read")
    return real


def exists(path):
    """Whether a name is there at all (a link counts, even one that leads nowhere)."""
    return os.path.lexists(path)


def read_file(path, folder, limit):
    """The bytes of `path`, a regular file inside `folder` of at most `limit` bytes."""
    name = printable(Path(path).name)
    real = inside(path, folder)
    try:
        # O_NONBLOCK: a FIFO planted under a notebook's name must not hang the grader.
        handle = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        raise SubmissionError(f"{name} is missing or unreadable") from None
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise SubmissionError(f"{name} is not a regular file; it was not read")
        if info.st_size > limit:
            raise SubmissionError(f"{name} is {info.st_size / 2**20:.0f} MB, over the "
                                  f"{limit / 2**20:.0f} MB limit for this file")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(handle, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:  # grew while it was read
            raise SubmissionError(f"{name} is over the {limit / 2**20:.0f} MB limit for this file")
        return data
    finally:
        os.close(handle)


def _entries(folder):
    """os.scandir of a folder, at most MAX_ENTRIES entries."""
    found = []
    with os.scandir(folder) as listing:
        for entry in listing:
            found.append(entry)
            if len(found) > MAX_ENTRIES:
                raise SubmissionError(f"the submission holds more than {MAX_ENTRIES} files or folders; "
                                      "submit only your notebook")
    return sorted(found, key=lambda entry: entry.name)


def gradescope_ids(submission):
    """The ids of a Gradescope submission's submitter, from submission_metadata.json beside its folder:
    their Student ID (sid) in Gradescope's roster and their email, as given ([] without either); whose
    numbers they are is variants.Variants.whose's to say."""
    try:
        metadata = json.loads((Path(submission).parent / "submission_metadata.json").read_text())
        user = metadata["users"][0]
        return [str(user[key]).strip() for key in ("sid", "email") if user.get(key) and str(user[key]).strip()]
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return []


def find_notebooks(folder):
    """Every .ipynb under `folder` (Jupyter's checkpoints and hidden folders skipped), links to
    folders never followed, at most MAX_ENTRIES entries looked at in all."""
    found, seen, stack = [], 0, [Path(folder)]
    while stack:
        current = stack.pop()
        try:
            entries = _entries(current)
        except OSError:
            continue
        seen += len(entries)
        if seen > MAX_ENTRIES:
            raise SubmissionError(f"the submission holds more than {MAX_ENTRIES} files or folders; "
                                  "submit only your notebook")
        for entry in entries:
            if entry.name.startswith(".") or entry.name == "__MACOSX":
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            elif entry.name.endswith(".ipynb"):
                found.append(Path(entry.path))
    return sorted(found)


def folder_problem(folder):
    """Why a <student>/<assignment> folder cannot be graded as one, or "" when it can."""
    folder = Path(folder)
    for part in (folder, folder.parent):
        if part.is_symlink():
            return f"{printable(part.name)}/ is a link to another folder; it was not followed"
    return ""


def name_problem(name):
    if not name.isprintable():
        return f"the folder name {printable(name)} holds control characters"
    if len(name) > MAX_NAME:
        return f"the folder name {name[:40]}... is longer than {MAX_NAME} characters"
    return ""


def student_name_problem(name):
    """Why `name` (a repository's or a roster's) cannot name a student's folder under submitted/, or ""."""
    if not name or name.startswith(".") or "/" in name:
        return "no student name"
    return name_problem(name)


def submission_folders(submitted):
    """(student, assignment folder name, folder, problem) for every folder two levels under
    `submitted`, and (name, "", path, problem) for what is not a folder there; never follows a link."""
    found = []
    try:
        students = _entries(submitted)
    except OSError as error:
        raise SubmissionError(f"cannot read {submitted}: {error.strerror}") from None
    except SubmissionError:
        raise SubmissionError(f"{submitted} holds more than {MAX_ENTRIES} entries: is it the submitted/ "
                              "folder of one class?") from None
    for student in students:
        if student.name.startswith("."):
            continue
        path = Path(student.path)
        problem = name_problem(student.name)
        if problem or not student.is_dir(follow_symlinks=False):
            found.append((student.name, "", path, problem or (
                "a link to another folder; it was not followed" if student.is_symlink() else "not a folder")))
            continue
        try:
            entries = _entries(path)
        except (OSError, SubmissionError) as error:
            found.append((student.name, "", path, str(getattr(error, "strerror", None) or error)))
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            problem = name_problem(entry.name) or folder_problem(entry.path) or (
                "" if entry.is_dir(follow_symlinks=False) else "not a folder")
            found.append((student.name, entry.name, Path(entry.path), problem))
    return found


def choose_notebooks(assignment, found):
    """{notebook name: path} of an assignment's notebooks among the paths `found` (an upload's
    notebooks, or the one notebook named on the command line): any file name will do when the
    assignment has one notebook and one was found, else they go by file name; SubmissionError with
    the reason when none is the assignment's."""
    by_filename = {notebook.filename: notebook.name for notebook in assignment.notebooks}
    if len(by_filename) == 1 and len(found) == 1:
        return {assignment.notebooks[0].name: found[0]}
    named = {by_filename[path.name]: path for path in found if path.name in by_filename}
    if named:
        return named
    if not found:
        raise SubmissionError("no notebook (.ipynb) was found in the submission")
    if len(found) == 1:
        raise SubmissionError(f"{found[0].name} is not a notebook of {assignment.id} "
                              f"(expected one of: {', '.join(by_filename)})")
    raise SubmissionError(f"{len(found)} notebooks were submitted ({', '.join(p.name for p in found[:5])}); "
                          f"submit only {', '.join(sorted(by_filename))}")
