"""The memory a student's call uses, measured from outside the student's process.

Where the grader has a cgroup for the child (sandbox/cgroup.py), the OS's own accounting is
the measure (`ChargedMemory`): the child joined its cgroup before the submission's first line ran,
so the charge of a call is the OS's peak while the call runs above what the child held at
that moment, that is everything the child holds at its worst moment of the call: a workspace its
cells made before the call, memory given back before the call returns, files in the sandbox's
tmpfs and shared memory all count.

Without a cgroup (the fallback, said once at start-up), the growth of the resident size is read:

A record kept inside the student's process could be switched off by that process (the from-scratch
guard shows how much care that takes), so the grader reads what the OS reports about the child
through the host's /proc, where the student's code cannot reach:

  - before the call, the child's peak resident size is reset to its current size (writing 5 to
    /proc/<pid>/clear_refs; the child is not dumpable and may not become so again, see
    sandbox/inside/confine.py, so it cannot reset its own peak in the middle of the call);
  - while the call runs, a thread samples the resident size every millisecond (which also covers a
    grader that may not reset the peak, one not running as root);
  - after the reply, the peak is the larger of the OS's peak (VmHWM) and the largest sample.

What is measured is the growth of the resident memory over the call: what the call allocated and
touched at its worst moment, above what the process already held.
"""

import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
SAMPLE_SECONDS = 0.001


def _status(pid):
    """The fields of /proc/<pid>/status, as text."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.strip()
    return fields


def _children(pid):
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def host_pid(root, inner_pid):
    """The host's pid of the descendant of `root` that its own PID namespace calls `inner_pid`
    (the pid the sandboxed worker reports for a child it forked); None if there is none."""
    pending = [root]
    while pending:
        pid = pending.pop()
        try:
            if int(_status(pid).get("NSpid", "0").split()[-1]) == inner_pid and pid != root:
                return pid
            pending += _children(pid)
        except (OSError, ValueError, IndexError):
            continue
    return None


def resident_bytes(pid):
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


@dataclass
class Peak:
    """What one call was charged, in bytes."""
    bytes: int
    os_peak: bool        # the OS's own peak was read (a cgroup's, or VmHWM), not only samples
    held_before: int = 0  # of which the child already held when the call started (cgroup only)
    accounting: str = "resident size"  # "cgroup": everything the child holds, from its start


class ChargedMemory:
    """with ChargedMemory(group, start) as measure: ...call...; then measure.peak: the OS's peak
    of the child's cgroup during the call, above `start` (its usage when it joined the cgroup, before
    any of the submission's code ran)."""

    def __init__(self, group, start):
        self.group, self.start, self.peak = group, start, None

    def __enter__(self):
        self.held = self.group.usage()
        self.reset = self.group.reset_peak()
        return self

    def __exit__(self, *exc):
        try:
            highest = self.group.peak()
        except (OSError, ValueError):
            return
        self.peak = Peak(max(0, highest - self.start), self.reset, max(0, self.held - self.start), "cgroup")


class PeakMemory:
    """with PeakMemory(pid) as measure: ...call...; then measure.peak (a Peak, or None when the
    process went away during the call)."""

    def __init__(self, pid):
        self.pid = pid
        self.peak = None
        self._highest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.is_set():
            try:
                self._highest = max(self._highest, resident_bytes(self.pid))
            except (OSError, ValueError, IndexError):
                return
            self._stop.wait(SAMPLE_SECONDS)

    def __enter__(self):
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as clear_refs:
                clear_refs.write("5")  # the peak resident size starts again from the current size
            self._reset = True
        except OSError:
            self._reset = False
        try:
            self._baseline = self._highest = resident_bytes(self.pid)
        except (OSError, ValueError, IndexError):
            self._baseline = None
            return self
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._baseline is None:
            return
        self._thread.join()
        try:
            highest = self._highest
            if self._reset:
                highest = max(highest, int(_status(self.pid)["VmHWM"].split()[0]) * 1024)
        except (OSError, ValueError, KeyError, IndexError):
            return
        self.peak = Peak(max(0, highest - self._baseline), self._reset)


def gpu_memory_of(pid):
    """MiB the GPU's driver holds for the process `pid` (host pid), as nvidia-smi lists its compute
    processes (at least 1 while it is listed at all; 0 when it is not); None where nvidia-smi cannot say."""
    try:
        listed = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if listed.returncode != 0:
        return None
    for line in listed.stdout.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid):
            return max(1, int(fields[1])) if fields[1].isdigit() else 1
    return 0


def wait_gpu_released(pid, seconds=10.0):
    """Wait until the driver holds nothing on the GPU for the dead child `pid` (it frees a process's
    memory as the process ends): the next submission starts on a GPU with nothing of this one.
    Returns the MiB still held when the wait ended (0: released; None: nvidia-smi cannot say)."""
    deadline = time.monotonic() + seconds
    while True:
        held = gpu_memory_of(pid)
        if not held or time.monotonic() > deadline:
            return held
        time.sleep(0.1)
