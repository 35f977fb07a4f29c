# The course's local JupyterHub (make hub; docs/jupyterhub.md), read by `jupyterhub -f` with
# COURSE_HUB_STATE naming the term's folder that autograder/hub/prepare.py made (its hub/hub.json).
import os
import sys

from autograder.course import ROOT
from autograder.hub.prepare import PROXY, VENV_BIN, Term, environment

c = get_config()  # noqa: F821 (provided by jupyterhub)
term = Term.load(os.environ["COURSE_HUB_STATE"])
hub = term.folder / "hub"

# Everything on loopback: the proxy's public port (the browser's), its API, the hub's own API.
c.JupyterHub.bind_url = term.url
c.JupyterHub.public_url = term.url     # what a student's check() is told (JUPYTERHUB_PUBLIC_HUB_URL)
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = term.hub_port
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{term.proxy_api_port}"
c.ConfigurableHTTPProxy.command = [str(PROXY)]
c.ConfigurableHTTPProxy.pid_file = str(hub / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{hub / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(hub / "cookie_secret")
c.JupyterHub.cleanup_servers = True    # stopping the hub stops every user's server

# A demo's authenticator, said to be one: one shared password for the roster and the instructor. A
# real deployment plugs in its own (OAuthenticator, LTI, PAM) with the same allowed users.
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = term.password
c.Authenticator.allowed_users = {term.instructor, *term.students}

# Each user's JupyterLab as their own system account, with the course's Python and nbgrader.
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(VENV_BIN / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
# A student's server token reaches the check service (check(), and the fetch's variant.json), and
# nothing else of the hub's beyond the default server scopes.
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!user", "access:services!service=checks"]
c.JupyterHub.load_roles = [{"name": "user", "scopes": ["self", "access:services!service=checks"]}]


def pre_spawn(spawner):
    """The instructor's server opens in the course folder (formgrader's root); a student's in their home."""
    # the course's Python; on PYTHONPATH the checkout for the instructor (nbgrader's hooks, the grader),
    # the student-lib alone for a student (the fetch, check.py): their account reaches no more of it
    spawner.environment.update(environment(term, spawner.user.name))
    spawner.notebook_dir = str(term.home(spawner.user.name))


c.Spawner.pre_spawn_hook = pre_spawn

# The check service (docs/checks.md), managed by the hub: started with it, as the instructor (their
# course folder, their variant secret), on loopback; the hub names the student of each request.
c.JupyterHub.services = [{
    "name": "checks",
    "url": f"http://127.0.0.1:{term.checks_port}",
    "command": [sys.executable, "-m", "autograder", "--course", str(term.course / "course.yml"), "check-server",
                "--assignment", term.assignment, "--jobs", str(term.checks_jobs), "--port", str(term.checks_port),
                "--out", str(term.course / "grading")],
    "user": term.instructor,
    "cwd": str(term.course),
    "environment": {"PYTHONPATH": str(ROOT), "PATH": f"{VENV_BIN}:/usr/bin:/bin", "MPLBACKEND": "Agg"},
    "oauth_no_confirm": True,
    "timeout": 600,    # the hub waits for it to listen: it primes the grader first (a minute, more under load)
}]
