"""Nothing one submission makes outlives it in the warm worker: each channel a child could leave a
canary in for the next student's child (graded by the same worker, in the same namespaces) is tried,
and the next child must find nothing.  The IPC objects and sockets are refused outright (the
submission's seccomp filter, sandbox/inside/confine.py); files are allowed only in the scratch space,
which the worker empties once a submission's last child has ended, and where a child left what that
could not remove, the next child is forked in a fresh sandbox."""

import pytest

from autograder.sandbox.student import Limits
from tests import sandboxes

LIMITS = Limits(call_timeout=5, cell_timeout=5, time_budget=60, memory_mb=2048)
CANARY = 0x5EC2E7

# One function per channel: plant(canary) leaves the canary there and says how it went ("planted" or
# the error's name); find() returns what it finds there (None when nothing).
CHANNELS = r'''
import ctypes, errno, mmap, os, socket, struct
LIBC = ctypes.CDLL(None, use_errno=True)
KEY = 0x5EC2E7
IPC_CREAT, IPC_NOWAIT = 0o1000, 0o4000


def _failed(result):
    if result == -1:
        return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    return ""


def plant_sysv_shm(canary):
    LIBC.shmat.restype = ctypes.c_void_p
    shmid = LIBC.shmget(KEY, 4096, IPC_CREAT | 0o666)
    if _failed(shmid):
        return _failed(shmid)
    address = LIBC.shmat(shmid, None, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        return _failed(-1)
    ctypes.c_int64.from_address(address).value = canary
    return "planted"


def _listed(kind):
    """The canary's key among the IPC namespace's objects of a kind (readable without the calls)."""
    try:
        rows = open(f"/proc/sysvipc/{kind}").read().splitlines()[1:]
    except OSError:
        return None
    return KEY if any(int(row.split()[0]) == KEY for row in rows) else None


def find_sysv_shm():
    LIBC.shmat.restype = ctypes.c_void_p
    shmid = LIBC.shmget(KEY, 0, 0)
    if shmid == -1:
        return _listed("shm")
    address = LIBC.shmat(shmid, None, 0)
    return None if address in (None, ctypes.c_void_p(-1).value) else ctypes.c_int64.from_address(address).value


def plant_sysv_semaphore(canary):
    semid = LIBC.semget(KEY, 1, IPC_CREAT | 0o666)
    if _failed(semid):
        return _failed(semid)
    result = LIBC.semctl(semid, 0, 16, ctypes.c_int(canary & 0x7FFF))  # SETVAL
    return _failed(result) or "planted"


def find_sysv_semaphore():
    semid = LIBC.semget(KEY, 0, 0)
    return _listed("sem") if semid == -1 else LIBC.semctl(semid, 0, 12)  # GETVAL


def plant_sysv_message(canary):
    queue = LIBC.msgget(KEY, IPC_CREAT | 0o666)
    if _failed(queue):
        return _failed(queue)
    message = struct.pack("lq", 1, canary)
    return _failed(LIBC.msgsnd(queue, message, 8, IPC_NOWAIT)) or "planted"


def find_sysv_message():
    queue = LIBC.msgget(KEY, 0)
    if queue == -1:
        return _listed("msg")
    buffer = ctypes.create_string_buffer(16)
    got = LIBC.msgrcv(queue, buffer, 8, 0, IPC_NOWAIT)
    return None if got == -1 else struct.unpack("lq", buffer.raw)[1]


def _mq():
    try:
        return ctypes.CDLL("librt.so.1", use_errno=True)
    except OSError:
        return LIBC


def plant_posix_queue(canary):
    queue = _mq().mq_open(b"/canary", os.O_CREAT | os.O_WRONLY, 0o666, None)
    if _failed(queue):
        return _failed(queue)
    return _failed(_mq().mq_send(queue, str(canary).encode(), len(str(canary)), 0)) or "planted"


def find_posix_queue():
    queue = _mq().mq_open(b"/canary", os.O_RDONLY | os.O_NONBLOCK)
    if queue == -1:
        return None
    buffer = ctypes.create_string_buffer(8192)
    got = _mq().mq_receive(queue, buffer, 8192, None)
    return None if got <= 0 else int(buffer.raw[:got])


HELD = []


def _socket_plant(address, canary):
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(address)
        server.listen(1)
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
    HELD.append((server, canary))
    return "planted"


def _socket_find(address):
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(address)
    except OSError:
        return None
    return CANARY_REACHED


CANARY_REACHED = KEY


def plant_abstract_socket(canary):
    return _socket_plant("\0canary", canary)


def find_abstract_socket():
    listed = any(line.endswith("@canary") for line in open("/proc/net/unix").read().splitlines())
    return _socket_find("\0canary") or (KEY if listed else None)


def plant_named_socket(canary):
    return _socket_plant("/tmp/canary.sock", canary)


def find_named_socket():
    return _socket_find("/tmp/canary.sock") or (KEY if os.path.exists("/tmp/canary.sock") else None)


def _file_plant(path, canary):
    try:
        with open(path, "w") as handle:
            handle.write(str(canary))
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
    return "planted"


def _file_find(path):
    try:
        return int(open(path).read())
    except (OSError, ValueError):
        return None


def plant_scratch_file(canary):
    return _file_plant("canary.txt", canary)


def find_scratch_file():
    return _file_find("canary.txt")


def plant_tmp_file(canary):
    return _file_plant("/tmp/canary.txt", canary)


def find_tmp_file():
    return _file_find("/tmp/canary.txt")


def plant_posix_shared_memory(canary):
    """shm_open's object is a file in /dev/shm (multiprocessing's SharedMemory would also start its
    resource tracker, a process, which a child may not)."""
    return _file_plant("/dev/shm/canary", canary)


def find_posix_shared_memory():
    return _file_find("/dev/shm/canary")


def plant_fifo(canary):
    try:
        os.mkfifo("/tmp/canary.fifo")
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
    HELD.append(os.open("/tmp/canary.fifo", os.O_RDWR | os.O_NONBLOCK))
    os.write(HELD[-1], str(canary).encode())
    return "planted"


def find_fifo():
    if not os.path.exists("/tmp/canary.fifo"):
        return None
    try:
        return int(os.read(os.open("/tmp/canary.fifo", os.O_RDONLY | os.O_NONBLOCK), 64) or b"0") or KEY
    except OSError:
        return KEY


def plant_standard_streams(canary):
    """The worker's standard streams, inherited by every child (its log is one)."""
    written = []
    for fd in (0, 1, 2):
        try:
            os.write(fd, f"canary {canary}\n".encode())
            written.append(fd)
        except OSError:
            pass
    return "planted" if written else "EBADF"


def find_standard_streams():
    for fd in (0, 1, 2):
        try:
            if b"canary" in os.pread(fd, 1 << 16, 0):
                return KEY
        except OSError:
            pass
    return None


def _tree_plant(root, name, depth, canary):
    """A chain of `depth` folders under root, walked into one by one (its full path may be longer than
    the system lets a path be), the canary at its bottom."""
    here = os.getcwd()
    try:
        os.makedirs(root, exist_ok=True)
        os.chdir(root)
        for _ in range(depth):
            os.mkdir(name)
            os.chdir(name)
        open("canary.txt", "w").write(str(canary))
    except OSError as error:
        return errno.errorcode.get(error.errno, str(error.errno))
    finally:
        os.chdir(here)
    return "planted"


def _tree_find(root):
    return KEY if os.path.exists(root) else None


def plant_deep_tree(canary):
    """1,300 folders deep: deeper than a recursive walk of the worker's Python may go."""
    return _tree_plant("/tmp/deep", "d", 1300, canary)


def find_deep_tree():
    return _tree_find("/tmp/deep")


def plant_long_path_tree(canary):
    """18 folders of 250 characters: a path of 4,500, longer than PATH_MAX."""
    return _tree_plant("/dev/shm/long", "n" * 250, 18, canary)


def find_long_path_tree():
    return _tree_find("/dev/shm/long")


def plant_inherited_mapping(canary):
    """A page the worker shares with its children (a shared writable mapping made before the fork)."""
    shared = [line for line in open("/proc/self/maps").read().splitlines()
              if line.split()[1].startswith("rw") and line.split()[1][3] == "s"]
    return "planted" if shared else "none to write"


def find_inherited_mapping():
    return None
'''

REFUSED = ("sysv_shm", "sysv_semaphore", "sysv_message", "posix_queue", "abstract_socket", "named_socket")
# deep_tree and long_path_tree: what a walk of the scratch space cannot remove; the next fork finds the scratch
# space in use and starts a fresh sandbox instead (worker.scratch_left).
WIPED = ("scratch_file", "tmp_file", "posix_shared_memory", "fifo", "standard_streams", "deep_tree",
         "long_path_tree")


worker = sandboxes.warm_worker(LIMITS)


def submission(worker):
    return sandboxes.submission(worker, LIMITS, CHANNELS, prefix="")


@pytest.mark.parametrize("channel", REFUSED + WIPED + ("inherited_mapping",))
def test_a_canary_left_by_one_submission_is_not_found_by_the_next(worker, channel):
    with submission(worker) as planter:
        planted = planter.call(f"plant_{channel}", CANARY)["output"]
        if channel in REFUSED:
            # the seccomp filter's answer (EPERM); a library that wraps the call may say ENOSYS
            assert planted in ("EPERM", "EACCES", "ENOSYS"), f"{channel}: {planted}"
        elif channel in WIPED:
            assert planted == "planted", f"{channel} should be allowed in the scratch space: {planted}"
            if channel != "standard_streams":   # /dev/null keeps nothing, even for the planter
                assert planter.call(f"find_{channel}")["output"] is not None, "the planter finds its own canary"
        else:
            assert planted == "none to write", "the worker shares a writable mapping with its children"
    with submission(worker) as next_student:
        assert next_student.call(f"find_{channel}")["output"] is None, f"the next student found the {channel} canary"
