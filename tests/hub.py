"""The course's hub for the browser test: `python -m autograder.hub`'s own pieces (prepare.py, its
jupyterhub_config.py, the pinned proxy), started on loopback on free ports in a folder of its own, and
stopped with everything it started: the hub, its proxy, the check service, every user's server and
kernel, the accounts it made (with the folders it opened closed again, and the checkout's entries it
closed to other accounts opened again)."""

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from autograder.hub.__main__ import hub_command
from autograder.hub.prepare import ACCOUNT_COMMENT, PROXY, Term, free_port, prepare, undo

PASSWORD = "hub-test-password"


def wait_for(what, ready, timeout, every=0.5, process=None, log=None):
    """Poll ready() until it is true; AssertionError naming `what` (and the hub's log's end) after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except httpx.HTTPError:
            pass
        if process is not None and process.poll() is not None:
            break
        time.sleep(every)
    tail = Path(log).read_text(errors="replace")[-3000:] if log else ""
    raise AssertionError(f"{what} not ready within {timeout} s\n{tail}")


def forget_stale_accounts(users):
    """The test's accounts left by a run that could not clean up (killed): removed, so that this run makes
    them anew and removes them after. Only accounts a hub's prepare made (their comment says so)."""
    for user in users:
        try:
            if pwd.getpwnam(user).pw_gecos == ACCOUNT_COMMENT:
                subprocess.run(["userdel", user], capture_output=True, timeout=60)
        except KeyError:
            pass


class Hub:
    """A running hub: its term (prepare.Term), its log, and start/stop."""

    def __init__(self, roster_rows, instructor, assignment):
        forget_stale_accounts([instructor, *(student for student, _ in roster_rows)])
        self.folder = Path(tempfile.mkdtemp(prefix="attention-hub-", dir="/var/tmp"))
        self.folder.chmod(0o755)
        roster = self.folder / "class-roster.csv"
        roster.write_text("student,name,email\n" + "".join(f"{s},\"{n}\",{s}@example.org\n" for s, n in roster_rows))
        self.term = Term(state=str(self.folder / "term"), roster=str(roster), instructor=instructor,
                         assignment=assignment, password=PASSWORD, port=free_port())
        self.log = self.folder / "hub.log"
        self.process = None

    @property
    def url(self):
        return self.term.url

    def start(self, timeout=300):
        if not PROXY.exists():   # .ci/run installs it; a checkout's first run of this test does too
            subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=PROXY.parents[2],
                           check=True, timeout=300)
        prepare(self.term)
        command, env = hub_command(self.term)
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(command, env=env, cwd=self.term.folder / "hub", stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        wait_for("the hub", lambda: httpx.get(f"{self.url}/hub/health", timeout=5).status_code == 200,
                 timeout, process=self.process, log=self.log)

    def checks_ready(self, timeout=240):
        def ready():
            answer = httpx.get(f"{self.url}/services/checks/status", timeout=5)
            return answer.status_code == 200 and answer.json().get("ready", 0) > 0
        wait_for("the checks service", ready, timeout, every=1, process=self.process, log=self.log)

    def stop_proxy(self):
        """A hub that failed to start leaves its proxy running (in a session of its own): ended by its pid file."""
        try:
            proxy = psutil.Process(int((self.term.folder / "hub" / "proxy.pid").read_text()))
            if "configurable-http-proxy" in " ".join(proxy.cmdline()):
                proxy.kill()
                proxy.wait(timeout=30)
        except (OSError, ValueError, psutil.Error):
            pass

    def stop(self, keep_log=None):
        """The hub stops its proxy, services and servers itself (cleanup_servers); what is left of the
        accounts' processes (a kernel) is ended by pid; then the accounts and folders are undone."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self.stop_proxy()
        uids = set()
        for user in (self.term.instructor, *self.term.students):
            try:
                uids.add(pwd.getpwnam(user).pw_uid)
            except KeyError:
                pass
        left = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real in uids]
        for process in left:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=30)
        undo(self.term)
        if keep_log and self.log.exists():
            Path(keep_log).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(self.log, keep_log)
        shutil.rmtree(self.folder, ignore_errors=True)
