"""The command line that starts the warm worker inside the sandbox (trusted side).

The README's security section explains it line by line; in short:

  unshare --mount --propagation private -- sh -c STAGE    only when the grader runs as root:
      in a mount namespace of its own (the host's mounts are untouched), bind the Python
      installation, the virtual environment and the folder inside/ under a fresh tmpfs, so that an
      unprivileged user can reach them even when they live under a private home such as /root
  setpriv --reuid=65534 --regid=65534 --clear-groups ...  only when root: become `nobody`, with
      no capabilities and no way to gain one (no_new_privs)
  bwrap --unshare-all ...  a new user, PID, IPC, UTS, cgroup and (empty) network namespace; a
      root made of read-only binds: /usr, the Python installation, the virtual environment and
      the folder inside/ as /sandbox; a minimal /etc; its own /proc and /dev (with the NVIDIA device
      files alone where kernels run on a CUDA device, gpu_device_files); size-limited tmpfs at
      /tmp and /dev/shm as the only writable places (the root and /dev are remounted read-only)
  python -E -s -B /sandbox/worker.py FD   the warm worker, talking to the grader on socket FD

Inside, the worker adds seccomp filters and per-submission resource limits (confine.py).
"""

import glob
import json
import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder.sandbox import INSIDE_DIR
from autograder.sandbox.inside.kernels import kernel_device   # where kernels run: one answer, both sides of the wall

NOBODY = 65534
# The worker's heap in transparent huge pages, where the machine gives them on request (its
# /sys/kernel/mm/transparent_hugepage/enabled says "madvise"; glibc reads it, bound read-only in the
# sandbox): a fork copies one page-table entry for 2 MiB of the worker's 250 MB instead of 512, so a
# child of it is forked and reaped in about half the time.  A child takes none for its own allocations
# (worker.child): the memory its measured calls are charged for is counted in 4 KiB pages, as before.
WORKER_MALLOC = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
HUGE_PAGE_SETTINGS = "/sys/kernel/mm/transparent_hugepage"
ENVIRONMENT = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "MPLBACKEND": "Agg",
               "OMP_NUM_THREADS": "1", "HOME": "/tmp", **WORKER_MALLOC}


# What a CUDA child needs of the grader's environment, where it is set: where the driver's libraries
# are (libcuda.so.1 outside the linker's cache), and which GPUs this grader may use.
CUDA_PASSED = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "TRITON_LIBCUDA_PATH")


def kernel_environment(environment=None):
    """The worker's environment for an assignment's kernels (given this process's environment, or
    `environment`).  In the interpreter: TRITON_INTERPRET=1.
    On the CUDA device: the device named for the sandbox's side, CUDA_PASSED where set, and torch's
    NVML check of the device count, which does not initialise CUDA (the warm worker must never do
    that: a process that forks after CUDA is initialised leaves its children unable to use it)."""
    environment = os.environ if environment is None else environment
    if kernel_device(environment) != "cuda":
        return {"TRITON_INTERPRET": "1"}
    passed = {name: environment[name] for name in CUDA_PASSED if environment.get(name)}
    # TRITON_F32_DEFAULT=ieee: a float32 tl.dot multiplies exactly, as the interpreter does, unless the kernel
    # asks for TF32 itself (Triton's default on a GPU), so the same kernel is held to the same numbers.
    return {"AUTOGRADER_KERNEL_DEVICE": "cuda", "PYTORCH_NVML_BASED_CUDA_CHECK": "1", "TRITON_F32_DEFAULT": "ieee",
            **passed}


# The NVIDIA device files CUDA opens: the control device, unified memory, and each GPU (/dev/nvidiaN).
# Nothing else of the host's /dev is bound (no nvidia-caps: MIG's capabilities are the host's).
NVIDIA_SHARED_FILES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def gpu_device_files():
    """The device files bound into the sandbox when kernels run on the CUDA device, else []."""
    if kernel_device() != "cuda":
        return []
    gpus = sorted(path for path in glob.glob("/dev/nvidia[0-9]*") if path[len("/dev/nvidia"):].isdigit())
    return gpus + [path for path in NVIDIA_SHARED_FILES if os.path.exists(path)]


SCRATCH_BYTES = 256 << 20
SHARED_MEMORY_BYTES = 64 << 20   # /dev/shm, a tmpfs of its own
# What Python, torch and matplotlib read from /etc: the dynamic linker's cache and configuration,
# the time zone and fonts. No account databases, no host names, no TLS keys.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "fonts")
# Directories the staging tmpfs may be mounted on, in a private mount namespace.
STAGE_POINTS = ("/mnt", "/media", "/srv", "/opt", "/boot")


class SandboxUnavailable(Exception):
    """The sandbox cannot be built on this machine."""


def python_trees():
    """The directories the worker's Python needs: the installation and the virtual environment."""
    trees = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    for path in (sys.base_prefix, sys.prefix):
        trees.add(os.path.abspath(path))
    return sorted(tree for tree in trees if not tree.startswith("/usr/") and tree != "/usr")


def _system_binds():
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--dir", "/etc"]
    for name in ETC_FILES:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    if os.path.isdir(HUGE_PAGE_SETTINGS):
        args += ["--ro-bind", HUGE_PAGE_SETTINGS, HUGE_PAGE_SETTINGS]
    return args


# What CUDA's driver reads of /sys to find its devices (PCI topology, the driver's module), read-only.
GPU_SYS_FOLDERS = ("/sys/bus", "/sys/devices", "/sys/module/nvidia")


def gpu_sys_folders():
    """The /sys folders bound read-only beside the device files (none where no device file is)."""
    return [folder for folder in GPU_SYS_FOLDERS if os.path.isdir(folder)] if gpu_device_files() else []


def _gpu_binds():
    args = []
    for path in gpu_device_files():
        args += ["--dev-bind", path, path]
    for folder in gpu_sys_folders():
        args += ["--ro-bind", folder, folder]
    return args


def bwrap_args(binds, control_fd):
    """bwrap's own arguments; binds maps a source on this side to its place in the sandbox."""
    # bwrap by its full path: the command runs with the sandbox's own PATH (ENVIRONMENT), which need not
    # hold where the grader found it (/usr/local/bin, say).
    args = [shutil.which("bwrap") or "bwrap",
            "--unshare-all", "--unshare-user", "--disable-userns",  # new namespaces; no more inside
            "--die-with-parent", "--new-session",  # dies with the grader; no terminal to talk to
            "--cap-drop", "ALL",                  # no capabilities even where bwrap could keep some
            *_system_binds(),
            "--proc", "/proc", "--dev", "/dev", *_gpu_binds(),
            "--size", str(SHARED_MEMORY_BYTES), "--tmpfs", "/dev/shm",
            "--size", str(SCRATCH_BYTES), "--tmpfs", "/tmp",
            "--chdir", "/tmp", "--clearenv",
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
            "--setenv", "USER", "student", "--setenv", "MPLBACKEND", "Agg",
            "--setenv", "OMP_NUM_THREADS", "1", "--setenv", "PYTHONHASHSEED", "0"]
    for name, value in {**WORKER_MALLOC, **kernel_environment()}.items():
        args += ["--setenv", name, value]
    for source, target in binds.items():
        args += ["--ro-bind", source, target]
    # Nothing but /tmp and /dev/shm stays writable: no file a child leaves in the root or in /dev
    # can wait there for the next submission.
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    return args + worker_args(Path("/sandbox"), control_fd)


def worker_args(sandbox_dir, control_fd):
    return [sys.executable, "-E", "-s", "-B", str(sandbox_dir / "worker.py"), str(control_fd)]


def _stage_point(sources):
    for point in STAGE_POINTS:
        if os.path.isdir(point) and not any(s == point or s.startswith(point + "/") for s in sources):
            return point
    raise SandboxUnavailable("no directory to stage the Python installation on")


def command(control_fd):
    """The whole command line that starts the worker in the sandbox, talking on control_fd."""
    if not shutil.which("bwrap"):
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
    trees = python_trees()
    if os.geteuid() != 0:
        binds = {tree: tree for tree in trees}
        binds[str(INSIDE_DIR)] = "/sandbox"
        return bwrap_args(binds, control_fd)
    sources = trees + [str(INSIDE_DIR)]
    point = _stage_point(sources)
    staged = {f"{point}/{index}": tree for index, tree in enumerate(trees)}
    staged[f"{point}/sandbox"] = str(INSIDE_DIR)
    binds = {stage: ("/sandbox" if source == str(INSIDE_DIR) else source)
             for stage, source in staged.items()}
    script = [f"mount -t tmpfs -o mode=0755,size=1m autograder-stage {point}"]
    for stage, source in staged.items():
        script += [f"mkdir {stage}", f"mount --bind -o ro {shlex.quote(source)} {stage}"]
    script.append('exec "$@"')
    setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
               "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    return ["unshare", "--mount", "--propagation", "private", "--",
            "sh", "-ec", " && ".join(script), "sh", *setpriv, *bwrap_args(binds, control_fd)]


def unsandboxed_command(control_fd):
    """`sandbox: none` in course.yml: the same worker, with only its own seccomp and limits."""
    return worker_args(INSIDE_DIR, control_fd)


def check_tools():
    """A one-line reason when the tools the sandbox needs are missing, else None."""
    needed = ["bwrap"] + (["unshare", "setpriv", "mount"] if os.geteuid() == 0 else [])
    missing = [tool for tool in needed if not shutil.which(tool)]
    if missing:
        return f"{', '.join(missing)} not found"
    return None


def probe():
    """Start bwrap once with /bin/true (and the GPU's device files bound where kernels run on one);
    raise SandboxUnavailable with bwrap's reason if it fails.  Returns a line for the instructor
    naming the device files bound, or "" where none are."""
    reason = check_tools()
    if reason:
        raise SandboxUnavailable(reason)
    devices = gpu_device_files()
    if kernel_device() == "cuda" and "/dev/nvidiactl" not in devices:
        raise SandboxUnavailable("AUTOGRADER_KERNEL_DEVICE=cuda, but /dev has no NVIDIA device files "
                                 "(/dev/nvidiactl, /dev/nvidia0, ...)")
    result = subprocess.run(["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", *_gpu_binds(), "true"],
                            capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise SandboxUnavailable((result.stderr.strip().splitlines() or ["bwrap failed"])[-1])
    if not devices:
        return ""
    return (f"the sandbox binds the CUDA device's files {', '.join(devices)} (nothing else of /dev), and "
            f"{', '.join(gpu_sys_folders())} read-only")


class Started:
    """The warm worker's sandbox, started: the process (bwrap, or the worker itself with `sandbox:
    none`), the grader's end of its control socket and its stderr.  It may be started by one process
    and used by another forked from it (a class's grading processes are handed workers that started
    while torch was still being imported): liveness is read from a pidfd, which any holder can poll,
    and only the process that started it reaps it (the grading service keeps some started ahead:
    classrun.sandboxes.SandboxPool)."""

    def __init__(self, sandboxed, warm=False, kernel_kind=""):
        """warm: the worker imports torch's dynamo stack once it is ready (worker.warm_dynamo);
        kernel_kind: it prepares what the kernels of that kind need (course.yml's `kernels`: Triton, its
        interpreter and compiler, worker.prepare_kernels); both while the grader is still busy with
        its own start, instead of at the first child's fork."""
        self.sandboxed, self.warm, self.kernel_kind = sandboxed, warm, kernel_kind
        if sandboxed:
            probe()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile()
        # The sandbox's own processes (bwrap, readable as /proc/1) get none of the grader's environment.
        self.process = subprocess.Popen(command(theirs.fileno()) if sandboxed else unsandboxed_command(theirs.fileno()),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log,
                                        pass_fds=[theirs.fileno()], start_new_session=True,
                                        env={**ENVIRONMENT, **kernel_environment()})
        theirs.close()
        self.control = ours
        self._warm(warm, kernel_kind)
        self.starter = os.getpid()
        self.pidfd = os.pidfd_open(self.process.pid) if hasattr(os, "pidfd_open") else None

    def _warm(self, dynamo, kernel_kind):
        """Tell the worker what to prepare (read once it is ready; it sends no answer)."""
        if dynamo or kernel_kind:
            self.control.send(json.dumps({"op": "warm", "dynamo": bool(dynamo), "kernel_kind": kernel_kind}).encode())

    def prepare(self, warm=False, kernel_kind=""):
        """Taken over by grading that wants it warm, or with kernels of a kind: told what it lacks of that."""
        self._warm(warm and not self.warm, kernel_kind if kernel_kind != self.kernel_kind else "")
        self.warm, self.kernel_kind = self.warm or warm, self.kernel_kind or kernel_kind

    def ready(self):
        """Whether the worker has said it is ready (its torch imported), without reading the message."""
        return self.control is not None and bool(select.select([self.control], [], [], 0)[0])

    def exited(self):
        if os.getpid() == self.starter or self.pidfd is None:
            return self.process.poll() is not None
        return bool(select.select([self.pidfd], [], [], 0)[0])

    def release(self):
        """In the process that started it, once a forked process has taken it over: close this
        process's copies of its socket and log, so that the worker sees its socket close when the
        process using it dies (stop() still reaps it)."""
        for handle in (self.control, self.log):
            if handle is not None:
                handle.close()
        self.control = self.log = None

    def stop(self):
        """Kill the sandbox's processes; reap them where this process started them.  Idempotent."""
        self.release()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if os.getpid() == self.starter:
            self.process.wait()
        elif self.pidfd is not None:
            select.select([self.pidfd], [], [], 10)
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
