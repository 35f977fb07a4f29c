"""The check server for tests and the bench: a copy of the course with its own course.yml (the rest
linked), and the real server started on it on loopback, in a process of its own."""

import json
import re
import subprocess
import sys
import threading

import yaml

from tests.notebooks import ROOT


def course_copy(root, assignments, checks, overrides=None):
    """`root`/course.yml: the course's, with only `assignments`, course-wide `checks` and per-assignment
    `overrides` of them; solutions/, exercises/, requirements.txt and autograder/kit/ (the kit's files)
    linked to the repository's."""
    raw = yaml.safe_load((ROOT / "course.yml").read_text())
    raw["assignments"] = [a for a in raw["assignments"] if a["id"] in assignments]
    raw["checks"] = checks
    for assignment in raw["assignments"]:
        assignment["checks"] = (overrides or {}).get(assignment["id"], {})
    (root / "course.yml").write_text(yaml.safe_dump(raw))
    for name in ("solutions", "exercises", "requirements.txt", "autograder/kit"):
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).symlink_to(ROOT / name)
    return root / "course.yml"


def start(course_yml, out, jobs=1, timeout=300):
    """(the server's process, its address) once it says it is ready; AssertionError with its output if not."""
    process = subprocess.Popen([sys.executable, "-m", "autograder", "--course", course_yml, "check-server",
                                "--jobs", str(jobs), "--port", "0", "--out", out], cwd=ROOT,
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
    """The hidden lines (hidden_lines) an answer's body holds, less those of the notebook the student sent."""
    suites, solutions = lines
    answer = json.loads(text)
    shown = json.dumps(answer) + answer.get("markdown", "")
    return [line for line in suites if line in shown] + [line for line in solutions if line in shown and line not in sent]


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
