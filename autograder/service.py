"""A grading service that stays warm between runs: `python -m autograder serve` (make serve).

Graded one assignment at a time, a class pays seconds before its first check: torch imported in the
grader, the reference solutions run, the suites collected, nbgrader's gradebook imported, and torch
imported again in each sandbox's worker.  The service pays them once and keeps them: `grade-class`
(make grade) hands its command to it when one runs for the course, and grades on its own otherwise.

    grade-class (the client)                   the service (one per course root and user)
      connect to <root>/.grader/service.sock -> accept only a process of the same user
      send its arguments, folder, environment
      and its stdin, stdout and stderr        -> fork: the child runs the same grade-class, on the
                                                 client's terminal, taking over the spare sandboxes
                                                 it needs (the service's SandboxPool, handed over
                                                 whole); once it ends, those it took are stopped and
                                                 new ones started (warmed up for torch's dynamo
                                                 stack as that run wanted them)
      Ctrl-C goes on to the child             <- the child's exit code

The service runs no student code (that is the sandboxes'), and each run's sandboxes served no run
before.  When the grader's code, course.yml, the solutions or the released notebooks change on disk,
or the client's environment differs in what torch, Triton or the sandbox read as they start, the
client grades on its own and says why, and the service starts itself again to take the change in.
"""

import hashlib
import json
import os
import select
import signal
import site
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from autograder.classrun.sandboxes import SandboxPool
from autograder.course import CourseError
from autograder.sandbox.jail import kernel_environment

# What torch, Triton and the sandbox read from the environment as they start (the service started
# them once): a client whose values differ is graded without the service.
READ_AT_START = ("AUTOGRADER_", "TRITON_", "CUDA_", "TORCH", "PYTORCH_", "OMP_", "MKL_", "PYTHON", "LD_LIBRARY_PATH")
MESSAGE_BYTES = 1 << 20
SERVED = ("grade", "grade-class")   # the commands a client hands to the service where one runs


def socket_path(root):
    return Path(root) / ".grader" / "service.sock"


def course_stamp(course):
    """What the service holds in memory, as the files on disk are now (size and modification time):
    what grading every assignment reads (tasks.grading_files), the grader's other files (the
    suites' pytest.ini among them), and the installed packages' folders (an install or upgrade adds or
    removes entries in them)."""
    from autograder.classrun.tasks import grading_files
    package = Path(__file__).resolve().parent
    paths = set(grading_files(course, course.assignments)) | set(map(Path, site.getsitepackages()))
    paths |= {path for path in package.rglob("*") if path.is_file() and "__pycache__" not in path.parts}
    digest = hashlib.sha256()
    for path in sorted(paths):
        try:
            status = path.stat()
            digest.update(f"{path}\0{status.st_mtime_ns}\0{status.st_size}\n".encode())
        except OSError:
            digest.update(f"{path}\0missing\n".encode())
    return digest.hexdigest()


def read_at_start(environment):
    """What of an environment torch, Triton and the sandbox read as they start, with what the grader
    sets itself where it is unset (reference.py: the kernels' environment, TRITON_INTERPRET=1 on a CPU)."""
    seen = {key: value for key, value in environment.items() if key.startswith(READ_AT_START)}
    return {**kernel_environment(environment), **seen}


def _send(connection, message):
    connection.send(json.dumps(message).encode())


def _receive(connection):
    data = connection.recv(MESSAGE_BYTES)
    return json.loads(data) if data else None


# -- the client: what grade-class does first ----------------------------------------------------------

def _connect(root):
    path = socket_path(root)
    if not path.exists():
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        connection.connect(str(path))
    except OSError:  # left behind by a service that ended
        connection.close()
        return None
    return connection


def offer(root, command, argv):
    """Where `command` is one the service runs (SERVED), forward(root, argv); else (None, ""): the caller runs it."""
    return forward(root, argv) if command in SERVED else (None, "")


def forward(root, argv):
    """Run `python -m autograder ARGV` (grade or grade-class) in the course's service.  Returns (its
    exit code, "") where the service ran it; (None, why) where the caller must run it itself: why is
    "" where no service runs for the course, else the reason it could not take this run."""
    connection = _connect(root)
    if connection is None:
        return None, ""
    request = {"op": "grade", "argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ),
               "root": str(Path(root).resolve())}
    with connection:
        try:
            socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
            answer = _receive(connection)
        except OSError as error:
            return None, f"it did not answer: {error}"
        if not answer or "refused" in answer:
            return None, (answer or {}).get("refused", "it ended")
        child = int(answer["pid"])
        passed_on = {number: signal.signal(number, lambda number, _: os.kill(child, number))
                     for number in (signal.SIGINT, signal.SIGTERM)}
        try:
            answer = _receive(connection)
        finally:
            for number, handler in passed_on.items():
                signal.signal(number, handler)
    if answer is None:
        print("error: the grading service stopped in the middle of this run; what was graded is saved, "
              "run the same command again", file=sys.stderr)
        return 1, ""
    if answer["exit"] == 0:
        print(f"(run in the course's grading service, pid {child})", file=sys.stderr, flush=True)
    return int(answer["exit"]), ""


def status(root):
    """The service's state ({"spares": n, "ready": n, "running": n, "warm": n}), or None where none runs."""
    connection = _connect(root)
    if connection is None:
        return None
    with connection:
        _send(connection, {"op": "status"})
        return _receive(connection)


def wait_idle(root, timeout, alive=lambda: True):
    """The service's state once no run is in progress and its spare sandboxes are all started and ready
    (as between two due dates); None where that is not so within `timeout` seconds or alive() turns false."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        state = status(root)
        if state and not state["running"] and state["spares"] == state["ready"] > 0:
            return state
        time.sleep(0.2)
    return None


# -- the service ----------------------------------------------------------------------------------

class Service:
    """One course's grading service: a listening socket, the spare sandboxes (a SandboxPool), the runs in
    progress.  run(argv, pool): a client's grade or grade-class, run in a forked child with the pool handed
    over to it; its exit code."""

    def __init__(self, course, jobs, say, run):
        self.course, self.jobs, self.say, self.run = course, jobs, say, run
        self.root = course.root.resolve()
        self.stamp = course_stamp(course)
        self.started_with = dict(os.environ)  # as it was before the grader's imports set anything
        self.environment = read_at_start(self.started_with)
        self.sandboxed = course.limits.sandboxed
        # Spares warm up torch's dynamo stack (1 to 2 s of a core each) when grading needs it: at first
        # if any assignment does; after a run, as that run did (the next is most often the same
        # assignment again; one that needs it and finds a cold spare warms it as it takes it).
        self.warm = course.uses_dynamo(*course.assignments)
        # Spares prepare the course's kernels (Triton: a few tenths of a second in a worker that has torch) at
        # their start: a run of a kernel assignment would otherwise pay it at its first fork, in every grading process.
        self.kernel_kind = course.kernel_kind(*course.assignments)
        self.pool = SandboxPool()   # the spares, started between runs
        self.runs = {}          # pid of a child running a command -> (its pipe, the pool of spares it was offered)
        self.restart = False
        self.listener = None

    def prime(self):
        """Everything a run would otherwise start with, in this process (never student code)."""
        from autograder import gradebook  # noqa: F401  (nbgrader's modules)
        from autograder.classrun import fanout
        fanout.prime(self.course, [assignment.id for assignment in self.course.assignments])
        self.refill()

    def refill(self):
        self.pool.fill(self.jobs, self.sandboxed, self.warm, self.kernel_kind)

    def listen(self):
        path = socket_path(self.root)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        os.chmod(path.parent, 0o700)
        if _connect(self.root) is not None:
            raise CourseError(f"a grading service already runs for this course ({path})")
        path.unlink(missing_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(str(path))
        os.chmod(path, 0o600)
        self.listener.listen(8)

    def refusal(self, request):
        if request.get("root") != str(self.root):
            return f"it serves the course at {self.root}"
        if self.restart or course_stamp(self.course) != self.stamp:
            self.restart = True
            return "the course or the grader changed since it started; it is starting again"
        theirs = read_at_start(request.get("env", {}))
        differing = sorted(key for key in theirs.keys() | self.environment.keys()
                           if theirs.get(key) != self.environment.get(key))
        if differing:
            return f"this shell's environment differs from the service's in {', '.join(differing[:4])}"
        return ""

    def accept(self):
        connection, _ = self.listener.accept()
        _, uid, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                              struct.calcsize("3i")))
        if uid != os.getuid():  # the folder is the user's alone; this is the second lock
            connection.close()
            return
        connection.settimeout(10)  # a client that connects and says nothing holds the others up 10 s at most
        try:
            data, fds, _, _ = socket.recv_fds(connection, MESSAGE_BYTES, 3)
            request = json.loads(data)
        except (OSError, ValueError):
            connection.close()
            return
        connection.settimeout(None)  # a run's child watches it for as long as the run lasts
        if not isinstance(request, dict) or not isinstance(request.get("argv", []), list):
            request = {"op": "unreadable"}
        try:
            if request.get("op") == "status":
                state = self.pool.state()
                _send(connection, {"spares": state["spares"], "running": len(self.runs), "ready": state["ready"],
                                   "warm": state["warm"]})
                return
            reason = ("an unreadable request" if request.get("op") != "grade" else
                      "no terminal was handed over" if len(fds) != 3 else self.refusal(request))
            if reason:
                _send(connection, {"refused": reason})
                return
            sys.stdout.flush()
            sys.stderr.flush()
            taken, told = os.pipe()
            offered = self.pool.hand_over()   # the run's to take from while it lasts
            pid = os.fork()
            if pid == 0:
                self.listener.close()
                os.close(taken)
                run_in_child(connection, fds, request, self.run, offered, told)
            os.close(told)
            self.runs[pid] = (taken, offered)
            self.say(f"run {pid}: {' '.join(request['argv'])}")
        finally:
            for fd in fds:
                os.close(fd)
            connection.close()

    def reap(self):
        """Runs that ended: the spares they took are stopped (no sandbox serves two runs), the others
        are spares again."""
        for pid, (taken, offered) in list(self.runs.items()):
            if not os.waitpid(pid, os.WNOHANG)[0]:
                continue
            del self.runs[pid]
            with os.fdopen(taken, "rb") as pipe:
                try:
                    told = json.loads(pipe.read() or b"null")
                    used, warmed = set(told["taken"]), told["warmed"]
                except (TypeError, ValueError, KeyError):
                    used, warmed = None, None   # a run that said nothing may have used any of them
            if isinstance(warmed, bool):
                self.warm = warmed
            self.pool.give_back(offered, used)

    def serve(self):
        while not (self.restart and not self.runs):
            if not self.runs:
                self.refill()  # between runs, so that a worker's start never competes with grading
            if select.select([self.listener], [], [], 0.5)[0]:
                self.accept()
            self.reap()

    def close(self):
        if self.listener is not None:
            self.listener.close()
            socket_path(self.root).unlink(missing_ok=True)
        self.pool.stop()
        for _, offered in self.runs.values():
            offered.stop()


def run_in_child(connection, fds, request, run, pool, told):
    """The forked child: run(argv, pool) (the client's grade or grade-class, taking its sandboxes from
    `pool`) exactly as the client would run it, on the client's terminal; at its end, the pids of the
    spares it took go to the service on `told`, with whether its grading wanted them warm (None: it took none)."""
    code = 1
    finished = threading.Event()
    try:
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdout.reconfigure(line_buffering=True)
        sys.stderr.reconfigure(line_buffering=True)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _send(connection, {"pid": os.getpid()})

        def watch():  # the client gone (its terminal closed, killed): stop as Ctrl-C would
            try:
                while connection.recv(16):
                    pass
            except OSError:
                pass
            if not finished.is_set():
                os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=watch, daemon=True).start()
        code = run(request["argv"], pool)
    except SystemExit as error:
        code = error.code if isinstance(error.code, int) else 1
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: B902 - the client must hear of it
        import traceback
        traceback.print_exc()
    finally:
        finished.set()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        os.write(told, json.dumps({"taken": pool.taken, "warmed": pool.warmed}).encode())
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            _send(connection, {"exit": code})
        except (OSError, ValueError):
            pass
        os._exit(code if isinstance(code, int) else 1)


def _stop(number, frame):
    raise KeyboardInterrupt


def serve(course, argv, jobs, say, run):
    """Run the course's grading service until Ctrl-C (or SIGTERM), running run(argv, pool) (a grade or
    grade-class, with the service's spare sandboxes) for each client; start again when the course changes."""
    service = Service(course, jobs, say, run)
    signal.signal(signal.SIGTERM, _stop)
    try:
        service.prime()
        service.listen()
        say(f"grading service for {service.root} ready ({jobs} sandboxes kept started); grade and grade-class "
            "(make grade) use it; Ctrl-C or SIGTERM stops it")
        service.serve()
    except KeyboardInterrupt:
        say("grading service stopped")
        return 0
    finally:
        service.close()
    say("the course changed: the grading service starts again")
    os.execve(sys.executable, [sys.executable, "-m", "autograder", *argv], service.started_with)
