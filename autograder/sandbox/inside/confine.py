"""Confinement applied from inside the sandbox (this file runs in the student's side only).

Two stages of seccomp filters, each a deny-list of system calls that attention code never needs;
seccomp filters only ever add restrictions, and bubblewrap has already set no_new_privs.

  sandbox_filter()  loaded by the warm worker before it imports torch, so it binds the worker and
                    every process forked from it: no mounts, namespaces, ptrace, the OS's keyrings, BPF,
                    module loading, network sockets, ...
  submission_filter(pid)  loaded in each forked child just before the submission's code runs: no
                    new processes (threads only), no exec, no signals to any other process, no
                    anonymous memory files (memfd_create), and nothing that could outlive the child
                    in the worker's namespaces, where the next student's child runs: no System V
                    shared memory, semaphores or message queues, no POSIX message queues (the IPC
                    namespace is the worker's, shared by all its children) and no sockets at all
                    (an abstract one lives in the network namespace, not in a file the worker
                    wipes).  What a child can still leave is files, and those are only writable in
                    /tmp and /dev/shm, emptied by the worker once the submission's last child ends.

The child is made non-dumpable (and may not change that back): its /proc files belong to root, so
it cannot reset its own peak memory (/proc/self/clear_refs) while the grader measures a call from
outside (autograder/sandbox/memory.py), and nothing else in the sandbox can read or write its memory.
The child also gets hard resource limits (which an unprivileged process cannot raise again) and a
private, empty scratch directory as its working directory and home.
"""

import ctypes
import errno
import os
import resource

import pyseccomp as seccomp

# System calls no process in the sandbox may make.
SANDBOX_DENIED = [
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "ptrace", "process_vm_readv",
    "process_vm_writev", "kcmp", "kexec_load", "kexec_file_load", "bpf", "perf_event_open",
    "keyctl", "add_key", "request_key", "userfaultfd", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "syslog", "iopl", "ioperm",
    "open_by_handle_at", "name_to_handle_at", "fanotify_init", "quotactl", "vhangup",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "personality",
    "pidfd_getfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
]
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
CLONE_THREAD = 0x00010000
AF_UNIX = 1
PR_SET_DUMPABLE = 4

# System calls a submission's process may not make, on top of the above.
# memfd_create: memory that is no file in the scratch space and no part of the heap.
SUBMISSION_DENIED = ["fork", "vfork", "execve", "execveat", "pidfd_open", "pidfd_send_signal", "memfd_create",
                     "memfd_secret"]
# Every channel a child could leave behind for the next child of the same worker, other than files: the
# kernel's IPC objects (they outlive their maker in the namespace) and sockets (an abstract Unix socket
# is a name in the network namespace; a child talks to the grader on the two pipes it is given).
LEFT_BEHIND = ["shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semtimedop", "semctl",
               "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend",
               "mq_timedreceive", "mq_notify", "mq_getsetattr", "socket", "socketpair"]
PROCESS_CALLS = ("fork", "vfork", "execve", "execveat")
SIGNAL_CALLS = ["kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"]


def _deny(rules, syscall, *args):
    try:
        rules.add_rule(seccomp.ERRNO(errno.EPERM), syscall, *args)
    except (OSError, RuntimeError, ValueError):
        pass  # a system call this OS or architecture does not have


def sandbox_filter():
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for syscall in SANDBOX_DENIED:
        _deny(rules, syscall)
    # New namespaces through clone(); clone3 passes its flags in memory that a filter cannot read,
    # so it reports "not implemented" and the C library falls back to clone().
    for flag in NAMESPACE_FLAGS:
        _deny(rules, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    # Only local (Unix) sockets: the network namespace is empty anyway.
    _deny(rules, "socket", seccomp.Arg(0, seccomp.NE, AF_UNIX))
    rules.load()


def submission_filter(pid, compiles=False):
    """compiles: the child compiles kernels for the GPU, and Triton runs its assembler (ptxas) and,
    in versions before 3.9, a C compiler as processes: then it may start processes, which its pids
    cgroup bounds and which are killed with it (cgroup.py); everything else stays denied."""
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for syscall in SUBMISSION_DENIED + LEFT_BEHIND:
        if not (compiles and syscall in PROCESS_CALLS):
            _deny(rules, syscall)
    if not compiles:
        # clone() without CLONE_THREAD makes a process: threads yes, processes no.
        _deny(rules, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))
    # Non-dumpable for good (see not_dumpable).
    _deny(rules, "prctl", seccomp.Arg(0, seccomp.EQ, PR_SET_DUMPABLE))
    # Signals only to itself (the first argument is a process or thread-group id).
    for syscall in SIGNAL_CALLS:
        _deny(rules, syscall, seccomp.Arg(0, seccomp.NE, pid))
    rules.load()


def not_dumpable():
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def limit(kind, value):
    resource.setrlimit(kind, (value, value))


def confine_submission(memory_mb, scratch, file_mb=64, open_files=256, threads=64, compiles=False):
    """Everything a forked child does before the submission's code runs.  compiles: its kernels are
    compiled for the CUDA device, whose driver reserves far more address space than memory, so the
    address-space limit is left to the child's memory cgroup (cgroup.py), which counts what it uses."""
    os.setsid()
    if not compiles:
        limit(resource.RLIMIT_AS, memory_mb << 20)
    limit(resource.RLIMIT_FSIZE, file_mb << 20)
    limit(resource.RLIMIT_NOFILE, open_files)
    limit(resource.RLIMIT_NPROC, threads)
    limit(resource.RLIMIT_CORE, 0)
    os.makedirs(scratch, mode=0o700, exist_ok=True)
    os.chdir(scratch)
    os.environ.update(HOME=scratch, TMPDIR=scratch, MPLCONFIGDIR=scratch)
    not_dumpable()
    submission_filter(os.getpid(), compiles)
