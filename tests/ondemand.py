"""The check server for tests and the bench: a copy of the course with its own course.yml (the rest
linked), and the real server started on it on loopback, in a process of its own."""

import json
import os
import re
import subprocess
import sys
import threading

import yaml

from tests.notebooks import ROOT


def course_copy(root, assignments, checks, overrides=None, **top):
    """`root`/course.yml: the course's, with only `assignments`, course-wide `checks` and per-assignment
    `overrides` of them (and any other top-level keys given, e.g. released=[...]); solutions/, exercises/,
    requirements.txt and autograder/kit/ (the kit's files) linked to the repository's."""
    raw = yaml.safe_load((ROOT / "course.yml").read_text())
    raw["assignments"] = [a for a in raw["assignments"] if a["id"] in assignments]
    raw["checks"] = checks
    raw.update(top)
    for assignment in raw["assignments"]:
        assignment["checks"] = (overrides or {}).get(assignment["id"], {})
    (root / "course.yml").write_text(yaml.safe_dump(raw))
    for name in ("solutions", "exercises", "requirements.txt", "autograder/kit"):
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).symlink_to(ROOT / name)
    return root / "course.yml"


def start(course_yml, out, jobs=1, timeout=300, port=0, env=None):
    """(the server's process, its address) once it says it is ready; AssertionError with its output if not.
    `port` None leaves it to course.yml or the hub; `env` is added to this process's environment."""
    process = subprocess.Popen([sys.executable, "-m", "autograder", "--course", course_yml, "check-server",
                                "--jobs", str(jobs), *(["--port", str(port)] if port is not None else []),
                                "--out", out], cwd=ROOT, env=None if env is None else {**os.environ, **env},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True).start()
    for _ in range(timeout * 10):
        if any("check server ready" in line for line in lines) or process.poll() is not None:
            break
        threading.Event().wait(0.1)
    if not any("check server ready" in line for line in lines):
        process.kill()
        raise AssertionError("the check server did not start:\n" + "".join(lines))
    return process, re.search(r"listening at (http\S+),", "".join(lines)).group(1)


def stop(process):
    process.terminate()
    process.wait(timeout=60)


def hidden_lines(course, assignment_ids):
    """The lines an answer must never hold: of the assignments' hidden suites (code, not the strings their
    messages are made of) and of their solutions (long enough to mean something)."""
    from tests.test_course import solution_lines
    chosen = [course.assignment(assignment) for assignment in assignment_ids]
    suites = {line.strip() for a in chosen for e in a.exercises for line in e.suite.read_text().splitlines()
              if len(line.strip()) >= 25 and not line.strip().startswith(("#", '"', "'", 'f"'))}
    solutions = {line.strip() for a in chosen for nb in a.notebooks
                 for line in solution_lines(course.source_notebook(a, nb)) if len(line.strip()) >= 20}
    return suites, solutions


def leaked(text, sent, lines):
    """The hidden lines (hidden_lines) an answer's body holds, less text of the notebook the student sent (a suite's
    `d_k = d_model // num_heads` is in the released stub too, and the answer may quote the student's own line)."""
    suites, solutions = lines
    answer = json.loads(text)
    shown = json.dumps(answer) + answer.get("markdown", "")
    return [line for line in (*suites, *solutions) if line in shown and line not in sent]


def self_signed(folder):
    """(certificate, key) files of a certificate for 127.0.0.1 signed by its own key, as a course would
    configure a real one (checks: server: certificate, key)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "check-server.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / "check-server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                                serialization.PrivateFormat.PKCS8,
                                                                serialization.NoEncryption()))
    return folder / "check-server.crt", folder / "check-server.key"


HUB_CONFIG = '''\
from jupyterhub.proxy import Proxy


class NoProxy(Proxy):
    """No proxy: the test asks the hub's own API, and reaches the service at its own address."""
    should_start = False
    routes = {{}}

    async def add_route(self, routespec, target, data):
        self.routes[routespec] = {{"routespec": routespec, "target": target, "data": data}}

    async def delete_route(self, routespec):
        self.routes.pop(routespec, None)

    async def get_all_routes(self):
        return dict(self.routes)


c = get_config()  # noqa: F821
c.JupyterHub.proxy_class = NoProxy
c.JupyterHub.authenticator_class = "dummy"
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {public_port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.db_url = "sqlite:///{folder}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{folder}/cookie_secret"
c.JupyterHub.services = [
    {{"name": "checks", "url": "http://127.0.0.1:{service_port}", "api_token": "{service_token}"}},
    {{"name": "course-admin", "api_token": "{admin_token}"}},
]
c.JupyterHub.load_roles = [
    {{"name": "user", "scopes": ["self", "access:services!service=checks"]}},
    {{"name": "course-admin", "scopes": ["admin:users", "tokens"], "services": ["course-admin"]}},
]
'''


def free_port():
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_hub(folder, service_port):
    """A real JupyterHub on loopback (DummyAuthenticator, no proxy), with the check service `checks` at
    `service_port` (not started by the hub: its environment, service_environment, is the caller's to give)
    and an admin service's token; {"process", "api", "admin", "service_token", "log"} once its API answers."""
    import secrets
    folder.mkdir(parents=True, exist_ok=True)
    hub = {"api": None, "admin": secrets.token_hex(16), "service_token": secrets.token_hex(16),
           "log": folder / "jupyterhub.log"}
    hub_port = free_port()
    (folder / "jupyterhub_config.py").write_text(HUB_CONFIG.format(
        public_port=free_port(), hub_port=hub_port, folder=folder, service_port=service_port,
        service_token=hub["service_token"], admin_token=hub["admin"]))
    hub["api"] = f"http://127.0.0.1:{hub_port}/hub/api"
    with open(hub["log"], "w") as log:
        hub["process"] = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "jupyterhub"), "-f",
                                           str(folder / "jupyterhub_config.py")], cwd=folder,
                                          stdout=log, stderr=subprocess.STDOUT)
    return hub


def hub_ready(hub, timeout=120):
    """Wait (at most `timeout` s) for the hub's API to answer; AssertionError with its log if it does not."""
    import httpx
    for _ in range(timeout * 10):
        if hub["process"].poll() is not None:
            break
        try:
            if httpx.get(hub["api"], timeout=2).status_code == 200:
                return hub
        except httpx.HTTPError:
            pass
        threading.Event().wait(0.1)
    hub["process"].kill()
    raise AssertionError("the hub did not start:\n" + hub["log"].read_text()[-3000:])


def hub_user_token(hub, name, scopes=("access:services!service=checks",)):
    """A token of the hub's user `name` (made a user first), as the hub's REST API makes one for the admin."""
    import httpx
    headers = {"Authorization": f"token {hub['admin']}"}
    made = httpx.post(f"{hub['api']}/users/{name}", headers=headers, timeout=30)
    assert made.status_code in (201, 409), made.text
    token = httpx.post(f"{hub['api']}/users/{name}/tokens", headers=headers, timeout=30,
                       json={"scopes": list(scopes), "expires_in": 3600, "note": "the check server's test"})
    assert token.status_code == 201, token.text
    return token.json()["token"]


def service_environment(hub, service_port):
    """What the hub puts in the environment of its service `checks` (JupyterHub's services/service.py)."""
    return {"JUPYTERHUB_SERVICE_NAME": "checks", "JUPYTERHUB_API_TOKEN": hub["service_token"],
            "JUPYTERHUB_API_URL": hub["api"], "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{service_port}",
            "JUPYTERHUB_SERVICE_PREFIX": "/services/checks/"}


def stop_hub(hub):
    hub["process"].terminate()
    try:
        hub["process"].wait(timeout=30)
    except subprocess.TimeoutExpired:
        hub["process"].kill()
        hub["process"].wait(timeout=10)
