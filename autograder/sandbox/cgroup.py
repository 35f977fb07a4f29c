"""The OS's own accounting of each child: one memory cgroup and one pids cgroup per child
(this file runs on the trusted side, in the grader, which must be root to use it).

The grader puts every child it forks into a cgroup of its own before the submission's first line
runs, nested under the grader's own cgroup:

  memory   memory.limit_in_bytes (v1) / memory.max (v2) is the child's hard limit: its heap, its
           files in the sandbox's tmpfs (/tmp, /dev/shm) and whatever it maps all count; past the
           limit the OS stops the child, never the grader or another student.
           memory.max_usage_in_bytes (v1) / memory.peak (v2) is the OS's peak of all that,
           which the child cannot reach (memory.py reads it around a measured call).
  pids     pids.max caps the child's threads; during a counted call it is set to 1, so the work
           of the call cannot move to a thread the counter does not see (worker.py's counter).

cgroup v1 (the memory and pids controllers mounted under /sys/fs/cgroup/<controller>) and v2 (a
unified hierarchy at /sys/fs/cgroup with both controllers) are both read; where neither can be
written (an unprivileged grader, a container without them) `open_accounting` says why in one line
and grading falls back to sampling the resident size (memory.py), which it says once at start-up.
"""

import contextlib
import itertools
import os
import secrets
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


class Unavailable(Exception):
    """No cgroup can be made for the children here; the message says why, in one line."""


def _write(path, value):
    with open(path, "w") as handle:
        handle.write(str(value))


def _read_int(path):
    text = Path(path).read_text().strip()
    return 0 if text == "max" else int(text)


def _own_path(controller):
    """The grader's own cgroup in the hierarchy of `controller` ('' for the unified one)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") or (controller == "" and controllers == ""):
            return path.lstrip("/")
    raise Unavailable(f"this process is in no {controller or 'unified'} cgroup")


class ChildGroup:
    """One child's cgroups: join it, read its memory, hold its threads, remove it."""

    def __init__(self, accounting, name):
        self.accounting, self.name = accounting, name
        self.folders = [folder / name for folder in accounting.folders]
        for folder in self.folders:
            folder.mkdir()

    def _file(self, kind):
        return self.accounting.file(self.name, kind)

    def limit(self, memory_bytes, tasks):
        _write(self._file("memory_limit"), memory_bytes)
        swap = self._file("swap_limit")
        if swap.exists():
            with contextlib.suppress(OSError):
                _write(swap, memory_bytes)  # no swap beyond the limit either
        self.allow_tasks(tasks)

    def join(self, pid):
        """Move the process `pid` (all its threads) into this child's cgroups."""
        for folder in self.folders:
            _write(folder / "cgroup.procs", pid)

    def usage(self):
        """The bytes the child holds now, in the OS's accounting."""
        return _read_int(self._file("memory_usage"))

    def reset_peak(self):
        """Start the OS's peak again from the current usage; False where this OS cannot."""
        try:
            _write(self._file("memory_peak"), 0)
            return True
        except OSError:
            return False

    def peak(self):
        return _read_int(self._file("memory_peak"))

    def tasks(self):
        return _read_int(self._file("pids_current"))

    def allow_tasks(self, count):
        _write(self._file("pids_max"), count)

    def kill_members(self):
        """Kill whatever runs in the child's cgroups now."""
        for folder in self.folders:
            if folder.exists():
                self._kill_members(folder)

    def try_remove(self):
        """Remove the child's cgroups if nothing is left in them; whether they are gone."""
        for folder in self.folders:
            try:
                folder.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                return False
        return True

    def remove(self, wait=2.0):
        """Kill whatever still runs in the child's cgroups (a process it started, where it may start
        any: kernels compiled for a GPU), then remove them."""
        deadline = time.monotonic() + wait
        self.kill_members()
        while not self.try_remove() and time.monotonic() <= deadline:
            time.sleep(0.02)
            self.kill_members()

    @staticmethod
    def _kill_members(folder):
        if (folder / "cgroup.kill").exists():   # v2: the OS kills every member at once
            with contextlib.suppress(OSError):
                _write(folder / "cgroup.kill", 1)
            return
        with contextlib.suppress(OSError):
            for pid in (folder / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)


class Accounting:
    """The grader's folder of child cgroups (one per grading process)."""

    V1_FILES = {"memory_limit": ("memory", "memory.limit_in_bytes"),
                "swap_limit": ("memory", "memory.memsw.limit_in_bytes"),
                "memory_usage": ("memory", "memory.usage_in_bytes"),
                "memory_peak": ("memory", "memory.max_usage_in_bytes"),
                "pids_current": ("pids", "pids.current"), "pids_max": ("pids", "pids.max")}
    V2_FILES = {"memory_limit": ("", "memory.max"), "swap_limit": ("", "memory.swap.max"),
                "memory_usage": ("", "memory.current"), "memory_peak": ("", "memory.peak"),
                "pids_current": ("", "pids.current"), "pids_max": ("", "pids.max")}

    def __init__(self, version, folders):
        self.version = version
        self.folders = folders           # v1: [memory folder, pids folder]; v2: [unified folder]
        self.files = self.V1_FILES if version == 1 else self.V2_FILES
        self.count = 0

    def file(self, child, kind):
        controller, name = self.files[kind]
        folder = self.folders[0] if self.version == 2 or controller == "memory" else self.folders[1]
        return folder / child / name

    def describe(self):
        if self.version == 1:
            return (f"cgroup v1, {self.folders[0]} and {self.folders[1]} (memory.limit_in_bytes, "
                    f"memory.max_usage_in_bytes, pids.max)")
        return f"cgroup v2, {self.folders[0]} (memory.max, memory.peak, pids.max)"

    def child(self, pid, memory_bytes, tasks):
        """A fresh cgroup for the process `pid`, limited, with the process in it."""
        self.count += 1
        group = ChildGroup(self, f"child-{self.count}")
        try:
            group.limit(memory_bytes, tasks)
            group.join(pid)
        except OSError:
            group.remove()
            raise
        return group

    def close(self, wait=2.0):
        """Remove the grader's folders; children that are still dying are waited for a moment."""
        deadline = time.monotonic() + wait
        for folder in self.folders:
            while folder.exists():
                try:
                    for child in folder.iterdir():
                        if child.is_dir():
                            child.rmdir()
                    folder.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)


_OPENED = itertools.count(1)


def _own_name():
    """A name for one Accounting, never one used before: the process, how many it opened (a process may hold
    several) and a random part, since a grader killed before its close leaves its folders behind, and pids
    come round again (a later process of the same pid met its child-1 there: "File exists")."""
    return f"{os.getpid()}-{next(_OPENED)}-{secrets.token_hex(4)}"


def _v1():
    folders = []
    for controller in ("memory", "pids"):
        mount = ROOT / controller
        if not (mount / "cgroup.procs").exists():
            raise Unavailable(f"no cgroup v1 {controller} controller at {mount}")
        folders.append(mount / _own_path(controller) / f"autograder-{_own_name()}")
    return Accounting(1, folders)


def _v2():
    if "memory" not in (ROOT / "cgroup.controllers").read_text().split():
        raise Unavailable("the cgroup v2 hierarchy has no memory controller")
    parent = ROOT / "autograder"
    parent.mkdir(exist_ok=True)
    for folder in (ROOT, parent):
        _write(folder / "cgroup.subtree_control", "+memory +pids")
    own = parent / f"grader-{_own_name()}"
    own.mkdir(exist_ok=True)
    _write(own / "cgroup.subtree_control", "+memory +pids")
    return Accounting(2, [own])


def _sweep(parent, prefix):
    """Remove what graders that died without their close left in `parent` (their folders named
    `<prefix>-<pid>-...`, their pid no longer alive), as far as the OS lets: a cgroup still in use stays."""
    for folder in parent.glob(f"{prefix}-*"):
        try:
            os.kill(int(folder.name.split("-")[1]), 0)
            continue  # alive (or a process of the same pid: left alone either way)
        except ProcessLookupError:
            pass
        except (ValueError, IndexError, PermissionError):
            continue
        with contextlib.suppress(OSError):
            for child in folder.iterdir():
                if child.is_dir():
                    child.rmdir()
            folder.rmdir()


def open_accounting():
    """The grader's accounting, or raise Unavailable with the reason in one line."""
    if os.geteuid() != 0:
        raise Unavailable("the grader does not run as root, so it may not make cgroups")
    try:
        accounting = _v2() if (ROOT / "cgroup.controllers").exists() else _v1()
        for folder in accounting.folders:
            _sweep(folder.parent, folder.name.split("-")[0])
            folder.mkdir(exist_ok=True)
        probe = ChildGroup(accounting, "probe")  # the files a child needs are there and writable
        try:
            probe.limit(1 << 30, 64)
            probe.peak()
        finally:
            probe.remove()
        return accounting
    except (OSError, ValueError) as error:
        raise Unavailable(f"no cgroup could be made here ({error.strerror if isinstance(error, OSError) else error})") from None


FALLBACK = ("warning: measured memory falls back to sampling the resident size ({reason}): files in the "
            "scratch space and shared memory are not charged, and no thread is held during a counted call; "
            "run the grader as root on a machine with the memory and pids cgroup controllers")


def fallback_warning():
    """The one-line warning to print once at start-up when no child can get a cgroup here, else ''."""
    try:
        open_accounting().close()
    except Unavailable as problem:
        return FALLBACK.format(reason=problem)
    return ""
