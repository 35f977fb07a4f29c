"""A one-node Slurm cluster on this machine, for the tests of grade-slurm (tests/test_slurm.py).

Started as root from Debian's slurm-wlm and munge (which .ci/run installs): a munged with a key and
socket of its own, a slurmctld and a slurmd, all under one temporary folder, configured by a
generated slurm.conf (the node is this machine: its CPUs and memory, one partition "grading").
The tests reach it through SLURM_CONF; nothing under /etc is touched.

    python -m tests.slurm_cluster      starts one and prints the SLURM_CONF to export (Ctrl-C stops it)
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


def why_not():
    """Why a cluster cannot be started here, or ""."""
    if os.geteuid() != 0:
        return "starting slurmctld and slurmd needs root"
    missing = [tool for tool in (*DAEMONS, "sbatch", "squeue", "scontrol", "scancel") if not shutil.which(tool)]
    if missing:
        return f"{', '.join(missing)} not installed (Debian packages slurm-wlm and munge)"
    return ""


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _memory_mb():
    with open("/proc/meminfo") as info:
        total_kb = int(next(line for line in info if line.startswith("MemTotal")).split()[1])
    return total_kb // 1024 - 1024


def _config(root, node):
    ctld_port, node_port = _free_port(), _free_port()
    return "\n".join([
        "ClusterName=course", f"SlurmctldHost={node}", "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={ctld_port}", f"SlurmdPort={node_port}",
        "AuthType=auth/munge", f"AuthInfo=socket={root}/munge/munge.socket",
        f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd.pid",
        f"SlurmctldLogFile={root}/slurmctld.log", f"SlurmdLogFile={root}/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
        "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
        "ReturnToService=2", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
        "MinJobAge=600", "SchedulerParameters=sched_interval=2", "MessageTimeout=30",
        f"NodeName={node} CPUs={os.cpu_count()} RealMemory={_memory_mb()} State=UNKNOWN",
        f"PartitionName=grading Nodes={node} Default=YES MaxTime=INFINITE State=UP", ""])


def _wait_for(check, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise RuntimeError(f"the test cluster did not come up: {what}")


@contextmanager
def cluster():
    """Start the cluster; yield the environment (SLURM_CONF) its commands need; stop it."""
    reason = why_not()
    if reason:
        raise RuntimeError(reason)
    root = Path(tempfile.mkdtemp(prefix="slurm-"))
    node = socket.gethostname().split(".")[0]
    for folder in ("munge", "state", "spool"):
        (root / folder).mkdir(mode=0o700)
    (root / "munge.key").write_bytes(os.urandom(1024))
    (root / "munge.key").chmod(0o600)
    conf = root / "slurm.conf"
    conf.write_text(_config(root, node))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started = []
    try:
        subprocess.run(["munged", "--force", f"--key-file={root}/munge.key", f"--socket={root}/munge/munge.socket",
                        f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/munge/munged.log",
                        f"--seed-file={root}/munge/seed"], check=True, env=env)
        started.append(root / "munge" / "munged.pid")
        subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=env)
        started.append(root / "slurmctld.pid")
        subprocess.run(["slurmd", "-f", str(conf)], check=True, env=env)
        started.append(root / "slurmd.pid")

        def idle():
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env).stdout
            return out.strip() == "idle"
        _wait_for(idle, f"the node never became idle (logs in {root})")
        yield env
    finally:
        subprocess.run(["scancel", "--full", "-u", "root"], capture_output=True, env=env)
        for pid_file in reversed(started):
            try:
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        time.sleep(1)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped like Ctrl-C, cluster and all
    missing = why_not()
    if missing:   # one line with what to install, not a traceback
        sys.exit(f"error: {missing}")
    with cluster() as environment:
        print(f"export SLURM_CONF={environment['SLURM_CONF']}   (Ctrl-C stops the cluster)", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
