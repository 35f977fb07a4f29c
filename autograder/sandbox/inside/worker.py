"""The student side: a warm worker that forks one confined child per submission.

This file runs inside the sandbox (see autograder/sandbox/jail.py for how it is started).  The
warm worker loads the sandbox-wide seccomp filter, imports torch, NumPy and matplotlib once, and
then waits on its control socket.  It never runs student code and never sees a hidden suite or a
reference solution: the grader sends it only "fork" (with the two pipe ends a new child will talk
on) and "end" (kill that child, empty the scratch space; "quiet": the grader does not wait for the
answer, and the next order is carried out after it).  Each child confines itself (resource
limits, a private scratch directory, a stricter seccomp filter, see confine.py) and only then runs
the submission's cells and answers the grader's requests.

Nothing in a child is a security boundary on its own: student code can patch anything in its
process.  What keeps grading honest is that the grader checks every value it receives.

What a child answers, and how, is handlers.py; this file is the start-up: filters, imports, warm-up,
the fork server and the scratch space.
"""

import contextlib
import ctypes
import functools
import gc
import json
import os
import select
import signal
import socket
import sys
import traceback

# The sandbox-wide filter binds this process and everything it forks, before anything else runs.
import confine  # noqa: E402  (this folder is sys.path[0])

confine.sandbox_filter()
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0: no child may read this process

os.environ["MPLBACKEND"] = "Agg"
sys.dont_write_bytecode = True
# torch imports Triton wherever it is installed (torch.optim does, for torch.compile), at every worker's
# start, though only an assignment with kernels needs it: hidden from torch while it loads and warms
# up, Triton is imported by kernels.py when such an assignment's first submission is forked.
sys.modules["triton"] = None

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot  # noqa: E402,F401  (imported once here, so no submission pays for it)
import numpy as np  # noqa: E402,F401
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import protocol  # noqa: E402
import counter  # noqa: E402
from guard import GUARD  # noqa: E402

torch.set_num_threads(1)
GUARD.wrap_python_functions()
counter.install()


def warm_up():
    """Run once what every submission would otherwise pay for on first use: lazy imports and
    first-call initialisation of autograd, the serialiser and the guard."""
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    layer = torch.nn.Linear(4, 4).double()
    scores = (layer(x) @ x.transpose(-2, -1)).masked_fill(torch.ones(3, 3).tril() == 0, float("-inf"))
    loss = F.cross_entropy(torch.softmax(scores, -1).reshape(-1, 3), torch.zeros(6, dtype=torch.long))
    torch.autograd.grad(loss, [x], retain_graph=True)
    # Given output gradients (what a gradient request hands the child: handlers.backward), autograd's
    # first call imports torch's symbolic shapes and SymPy: half a second in every child otherwise.
    torch.autograd.grad(scores.exp(), [x], torch.ones(2, 3, 3, dtype=torch.float64), retain_graph=True)
    loss.backward()
    torch.nn.MultiheadAttention(4, 2, batch_first=True)(x.float(), x.float(), x.float())
    with GUARD:
        pass
    protocol.decode(protocol.unpack(protocol.pack(protocol.encode({"x": x.detach(), "a": np.ones(2)}))))
    matplotlib.pyplot.subplots()
    matplotlib.pyplot.close("all")


warm_up()
del sys.modules["triton"]
import handlers  # noqa: E402  (after the filter, the imports and the warm-up)

SCRATCH_ROOTS = ("/tmp", "/dev/shm")
PR_SET_THP_DISABLE = 41
import kernels  # noqa: E402  (imports no Triton: kernels.prepare does, when an assignment needs it)

# Kernels compiled for the CUDA device, not run in Triton's interpreter (kernels.kernel_device).
ON_GPU = kernels.kernel_device() == "cuda"


def child(control, pipes, memory_mb, on_gpu, counts_kernels=False):
    """A forked child: confine itself (on_gpu: its kernels are compiled for the CUDA device, which
    opens it first), then answer the grader's requests on its pipes; counts_kernels: its assignment's answers
    are Triton kernels, whose work its counted calls count too."""
    if control is not None:
        control.close()
    # No transparent huge pages for what the child allocates (the worker's heap has them, jail.WORKER_MALLOC):
    # its memory is charged 4 KiB at a time, the same on every machine.
    ctypes.CDLL(None).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)
    # The worker's standard streams (its log among them) are not the child's: a child that wrote there
    # would leave what it wrote for the next student's child to read.
    quiet = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(quiet, fd)
    os.close(quiet)
    try:
        confine.confine_submission(memory_mb, "/tmp/work", compiles=on_gpu)
        unavailable = ""
        if on_gpu:
            import kernels
            try:
                kernels.open_device(memory_mb)
            except Exception as error:  # the grader's problem, said to the grader (handlers.serve)
                where = traceback.extract_tb(error.__traceback__)[-1]
                unavailable = (f"the GPU could not be opened in the sandbox ({type(error).__name__}: "
                               f"{str(error)[:300]}; at {os.path.basename(where.filename)}:{where.lineno})")
        handlers.serve(*pipes, unavailable, counts_kernels=on_gpu or counts_kernels)
    finally:
        os._exit(0)


def _empty(folder, device):
    """Remove what is under folder, staying on the scratch file system: a read-only bind inside
    it (the course's virtual environment when the course itself lives under /tmp) is another
    device, and is neither entered nor touched."""
    with contextlib.suppress(OSError):
        os.chmod(folder, 0o700)  # a child may have taken its own permissions away
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.stat(follow_symlinks=False).st_dev != device:
                continue
            if entry.is_dir(follow_symlinks=False):
                _empty(entry.path, device)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def wipe_scratch():
    """Remove whatever the last child left in the writable places of the sandbox.  Best effort: a tree
    too deep or with paths too long to walk stays, and scratch_used() then tells the next fork."""
    for root in SCRATCH_ROOTS:
        if os.path.isdir(root):
            with contextlib.suppress(Exception):   # RecursionError, MemoryError: what stays is seen below
                _empty(root, os.stat(root).st_dev)


def scratch_used():
    """(blocks, inodes) in use on the scratch file systems: what a fork compares with the worker's own
    use before any child ran.  Counted by the file system, not by walking what a child laid out."""
    used = []
    for root in SCRATCH_ROOTS:
        if os.path.isdir(root):
            info = os.statvfs(root)
            used.append((info.f_blocks - info.f_bfree, info.f_files - info.f_ffree))
    return used


def scratch_left(baseline):
    """Whether a child left something in the scratch space that the wipe could not remove."""
    return any(blocks > base[0] or inodes > base[1] for (blocks, inodes), base in zip(scratch_used(), baseline))


@contextlib.contextmanager
def _triton_hidden():
    """torch.optim imports Triton for torch.compile where Triton is installed: hidden from it, unless
    an assignment's kernels have imported it already."""
    if "triton" in sys.modules:
        yield
        return
    sys.modules["triton"] = None
    try:
        yield
    finally:
        del sys.modules["triton"]


@functools.lru_cache(maxsize=None)
def warm_dynamo():
    """Import torch's dynamo stack (torch._dynamo, torch.compile's front end), as an optimiser's first construction and a counted call's
    dispatch mode do (about a second): once, when the grader says its children will need it (a
    submission that trains, an assignment whose hidden tests count work), not at every worker's
    start.  Nothing that fails here is the grader's concern: a child that needs it imports it itself."""
    with contextlib.suppress(Exception), _triton_hidden():
        layer = torch.nn.Linear(4, 4)
        optimizer = torch.optim.Adam(layer.parameters(), lr=1e-3)
        layer(torch.ones(1, 4)).sum().backward()
        optimizer.step()
        with counter.Counted():
            layer(torch.ones(1, 4))


@functools.lru_cache(maxsize=None)
def prepare_kernels(kind):
    """Import what an assignment's kernels need before its first child is forked (kernels.py), once;
    a line for the instructor when that cannot be done here, else ""."""
    if not kind:
        return ""
    if kind != "triton":
        return f"unknown kernels {kind!r} (course.yml knows kernels: triton)"
    try:
        import kernels
        kernels.prepare()
    except ImportError as error:
        return f"this assignment's kernels need Triton, which the grader's environment lacks ({error})"
    except Exception as error:  # this Triton could not be prepared (another version's interpreter, say)
        return f"this assignment's kernels cannot run here ({type(error).__name__}: {str(error)[:200]})"
    return ""


def fresh_child(control, pipes, memory_mb):
    """A child whose kernels run on the CUDA device starts afresh: the forked process runs this file
    again (`--child`), so nothing the warm worker's start-up did to CUDA's driver state (a library
    that asks for the device count, say) reaches it: CUDA cannot be used in a process forked after
    its parent touched it.  The same filters, limits, cgroup and scratch space apply; the child pays
    for its own imports (a few seconds, which the grader allows for, student.START_SECONDS)."""
    control.close()
    for fd in pipes:
        os.set_inheritable(fd, True)
    os.execv(sys.executable, [sys.executable, "-E", "-s", "-B", os.path.abspath(__file__), "--child",
                              *(str(fd) for fd in pipes), str(memory_mb)])


def warm(dynamo, kernel_kind):
    """Prepare what children will need: torch's dynamo stack, the kernels of a kind.  Returns the
    kernels' problem (a line for the instructor) or ""; prepare_kernels keeps it, so a "warm" order,
    which nobody answers, leaves it to the first fork that needs the kernels."""
    if dynamo:
        warm_dynamo()
    return prepare_kernels(kernel_kind)


def zygote(control):
    """Fork children on request; the grader talks to each child on its own pipes.  The scratch
    space is emptied once the last child of a submission has ended (a submission's measured calls
    run in a second child beside its first)."""
    # What the grader asks to have prepared as it starts the worker (jail.Started) is queued before anything
    # else it sends (it waits for "ready" before its first order): prepared first, so that a ready worker
    # is a prepared one, as the grading service's spares are between two runs.
    while select.select([control], [], [], 0)[0]:
        data = control.recv(4096)
        if not data:
            return
        order = json.loads(data)
        warm(order.get("dynamo"), order.get("kernel_kind"))
    control.send(b'{"ready": true}')
    alive = set()
    baseline = scratch_used()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(control, 4096, 2)
        except OSError:
            return
        if not data:
            return
        order = json.loads(data)
        if order["op"] == "warm":      # to a spare taken by a run, answered by nothing: the grader goes on
            clean = not alive and not scratch_left(baseline)
            warm(order.get("dynamo"), order.get("kernel_kind"))
            if clean:
                baseline = scratch_used()
        elif order["op"] == "fork":
            if not alive and scratch_left(baseline):
                # No child may start where another left files: the grader starts a fresh sandbox (a fresh
                # tmpfs) and forks there.  Deny by default: the wipe need not understand every layout.
                control.send(b'{"scratch_left": true}')
                return
            problem = warm(order.get("warm"), order.get("kernel_kind"))
            if not alive:
                baseline = scratch_used()   # what the worker's own warm-up wrote counts as its own
            if problem:
                for fd in fds:
                    os.close(fd)
                control.send(json.dumps({"error": problem}).encode())
                continue
            # What the worker has loaded (torch, Triton) moves out of the collector's sight: a child's
            # collections would otherwise touch every object's page and copy it, charging the child
            # for memory its parent made.
            gc.freeze()
            pid = os.fork()
            if pid == 0:
                if ON_GPU and order.get("kernel_kind"):
                    fresh_child(control, fds, int(order["memory_mb"]))
                child(control, fds, int(order["memory_mb"]), False, counts_kernels=bool(order.get("kernel_kind")))
            alive.add(pid)
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"pid": pid}).encode())
        elif order["op"] == "end":
            pid = int(order["pid"])
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            alive.discard(pid)
            if not alive:
                wipe_scratch()
            if not order.get("quiet"):
                control.send(b'{"ended": true}')


if __name__ == "__main__":
    if sys.argv[1] == "--child":   # fresh_child: one submission's child, on the CUDA device
        requests, replies, memory = (int(arg) for arg in sys.argv[2:5])
        prepare_kernels("triton")     # what it could not do, opening the device says (child)
        warm_dynamo()                 # its calls are counted (a fresh child has none of the zygote's warm-up)
        child(None, (requests, replies), memory, True)
    zygote(socket.socket(fileno=int(sys.argv[1])))
    os._exit(0)   # the grader is gone: nothing of this process needs tearing down (a second of CPU)
