"""Final scores pushed to an LMS with LTI 1.3 Advantage, from the instructor's command line.

    lms-keys    the tool's RSA key pair: the private key in a file only its owner reads (outside the
                course repository), the public key as the JWKS to register in the LMS
    lms-push    for each assignment graded, the final score grades.csv holds (automatic + manual -
                late penalty; lms.final_scores reads it) of every roster student who is a learner of
                the LMS course; a grader fault, or a row without a score, is held back, never sent:

      token         OAuth 2 client credentials, with a client assertion (a JWT signed RS256 with the
                    tool's key, its kid from the JWKS), asking for the three scopes below only
      NRPS          the course's members (Names and Role Provisioning Services), each mapped to a
                    roster row by one column (email, SIS id or LMS user id); learners only
      AGS           the line item of each assignment (resourceId = the assignment id), created with
                    scoreMaximum = its points when missing; then one score per student
                    (application/vnd.ims.lis.v1.score+json)

What is sent is kept in <out>/lms-pushed.json, written before each score goes (with its timestamp,
unconfirmed) and again once the platform answered (confirmed): the next push sends only the scores
that changed (FORCE sends all) and those never confirmed. A score whose answer was lost is sent
again with the timestamp it first carried, so the platform receives the same update twice, never a
second score: AGS keeps one result per user and line item, and a platform keeps the latest timestamp
(Canvas refuses an earlier one; an equal one replaces the score with the same value). Creating a line
item is not repeated blindly: when its answer is lost, the line items are read again first. Refused
or failed requests are retried where that can help (timeouts, 5xx, 429 with Retry-After), a bounded
number of times; whatever still fails is one line per student, and the command exits non-zero.

PyJWT signs the assertion (with `cryptography` underneath) and httpx carries the requests.
"""

import base64
import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import jwt
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from autograder.course import CourseError
from autograder.files import PrivateFileError, read_private, write_atomic

SCOPES = ("https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
          "https://purl.imsglobal.org/spec/lti-ags/scope/score",
          "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly")
LINEITEM = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEMS = "application/vnd.ims.lis.v2.lineitemcontainer+json"
SCORE = "application/vnd.ims.lis.v1.score+json"
MEMBERSHIPS = "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
# roster column -> the NRPS member field it is matched with
MATCHES = {"email": "email", "sis_user_id": "lis_person_sourcedid", "lms_user_id": "user_id"}
REQUIRED = ("issuer", "client_id", "deployment_id", "token_url", "lineitems_url", "memberships_url", "private_key")
OPTIONAL = ("auth_url", "keyset_url", "audience", "match", "feedback_url", "timeout", "retries")
STATE = "lms-pushed.json"


@dataclass
class Platform:
    """The LMS as the tool was registered with it (the file the instructor writes once)."""
    issuer: str
    client_id: str
    deployment_id: str
    token_url: str
    lineitems_url: str
    memberships_url: str
    private_key: Path
    auth_url: str = ""
    keyset_url: str = ""
    audience: str = ""          # the client assertion's aud (default: token_url)
    match: str = "email"        # the roster column that names a student in the LMS
    feedback_url: str = ""      # e.g. https://host/feedback/{student}/{assignment}/feedback.html
    timeout: float = 20.0
    retries: int = 3


def load_platform(path):
    """The Platform of an LTI configuration file (YAML); CourseError with one line when it is unusable."""
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise CourseError(f"cannot read the LTI configuration {path}: {error}") from None
    if not isinstance(raw, dict):
        raise CourseError(f"{path}: expected keys such as {', '.join(REQUIRED[:3])}")
    missing = [key for key in REQUIRED if not raw.get(key)]
    unknown = sorted(set(raw) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        raise CourseError(f"{path}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown else [])))
    if raw.get("match", "email") not in MATCHES:
        raise CourseError(f"{path}: match must be one of {', '.join(MATCHES)} (a roster column)")
    values = {key: str(value) for key, value in raw.items() if key not in ("timeout", "retries")}
    values["private_key"] = Path(os.path.expanduser(values["private_key"]))
    if not Path(values["private_key"]).is_absolute():
        values["private_key"] = (Path(path).parent / values["private_key"]).resolve()
    return Platform(**values, **{key: type(getattr(Platform, key))(raw[key]) for key in ("timeout", "retries")
                                if key in raw})


# -- the tool's key ------------------------------------------------------------------------------

def thumbprint(public_jwk):
    """RFC 7638's thumbprint of an RSA JWK, the key's id."""
    canonical = json.dumps({key: public_jwk[key] for key in ("e", "kty", "n")}, separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode()


def public_jwks(private_key):
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(private_key.public_key(), as_dict=True)
    return {"keys": [{**jwk, "kid": thumbprint(jwk), "alg": "RS256", "use": "sig"}]}


def make_keys(private_path):
    """A new RSA key pair: the private key written to `private_path` (mode 0600, never over an existing
    file); returns (the JWKS of its public key, the public key in PEM): Canvas takes the first, Moodle
    the second."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    private_path = Path(private_path)
    private_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise CourseError(f"{private_path} exists: keep it, or remove it to make a new key pair "
                          "(and register the new JWKS in the LMS)") from None
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pem)
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return public_jwks(key), public_pem.decode()


def read_private_key(path, course_root):
    """The tool's private key; refused when others may read it or when it lies in the course repository."""
    try:
        pem = read_private(path, course_root, "the private key", "make lms-keys makes one")
    except PrivateFileError as error:
        raise CourseError(str(error)) from None
    try:
        return serialization.load_pem_private_key(pem, password=None)
    except ValueError:
        raise CourseError(f"{path} is not an unencrypted PEM private key (make lms-keys makes one)") from None


# -- the platform's services ----------------------------------------------------------------------

class PushError(Exception):
    """A request that failed for good: its status (0: no answer) and the platform's words."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _reason(response):
    try:
        body = response.json()
        text = body.get("error_description") or body.get("error") or body.get("message") or ""
        text = text if isinstance(text, str) else json.dumps(text)
    except (ValueError, AttributeError):
        text = response.text
    return f"{response.status_code} {response.reason_phrase}" + (f": {' '.join(text.split())[:200]}" if text else "")


class Connection:
    """The tool's session with the platform: its access token and requests with bounded retries."""

    def __init__(self, platform, private_key):
        self.platform, self.key = platform, private_key
        self.kid = public_jwks(private_key)["keys"][0]["kid"]
        self.http = httpx.Client(timeout=platform.timeout)
        self.token = None

    def close(self):
        self.http.close()

    def assertion(self):
        now = int(time.time())
        claims = {"iss": self.platform.client_id, "sub": self.platform.client_id,
                  "aud": self.platform.audience or self.platform.token_url,
                  "iat": now, "exp": now + 300, "jti": uuid.uuid4().hex}
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": self.kid})

    def authenticate(self):
        form = {"grant_type": "client_credentials",
                "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                "client_assertion": self.assertion(), "scope": " ".join(SCOPES)}
        response = self._send("POST", self.platform.token_url, data=form, headers={"Accept": "application/json"})
        if response.status_code != 200:
            raise CourseError(f"the platform refused the tool's token request ({_reason(response)}): check client_id "
                              "and token_url, and that the JWKS make lms-keys printed is the one registered in the LMS")
        try:
            self.token = response.json()["access_token"]
        except (ValueError, KeyError):
            raise CourseError(f"the platform's token answer has no access_token ({_reason(response)})") from None

    def _send(self, method, url, resend=True, **options):
        """One request, retried on 5xx and 429 (after Retry-After, at most 30 s) and, unless `resend` is
        False (a request that is not idempotent), on no answer."""
        for attempt in range(self.platform.retries + 1):
            last = attempt == self.platform.retries
            try:
                response = self.http.request(method, url, **options)
            except httpx.TransportError as error:
                if last or not resend:
                    raise PushError(0, f"no answer from {urlsplit(url).netloc} ({type(error).__name__})") from None
                time.sleep(min(2 ** attempt, 8))
                continue
            if response.status_code == 429 or response.status_code >= 500:
                if last:
                    return response
                retry_after = response.headers.get("Retry-After", "")
                time.sleep(min(float(retry_after), 30.0) if retry_after.replace(".", "", 1).isdigit()
                           else min(2 ** attempt, 8))
                continue
            return response
        raise AssertionError("unreachable")

    def request(self, method, url, *, accept, content_type=None, body=None, resend=True):
        """The JSON answer of a service request; PushError when it fails for good (status 0: no answer,
        and with resend=False the request is not sent again after a lost answer)."""
        headers = {"Authorization": f"Bearer {self.token}", "Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        content = None if body is None else json.dumps(body).encode()
        response = self._send(method, url, resend, headers=headers, content=content)
        if response.status_code == 401 and self.token:  # an access token that expired during a long push
            self.authenticate()
            headers["Authorization"] = f"Bearer {self.token}"
            response = self._send(method, url, resend, headers=headers, content=content)
        if response.status_code >= 400:
            raise PushError(response.status_code, _reason(response))
        return response

    def pages(self, url, accept):
        """Every item of a paged container (the Link header's rel="next")."""
        while url:
            response = self.request("GET", url, accept=accept)
            yield response.json()
            url = response.links.get("next", {}).get("url")


def members(connection):
    """The course's members as NRPS lists them."""
    found = []
    for page in connection.pages(connection.platform.memberships_url, MEMBERSHIPS):
        found += page.get("members", [])
    return found


def is_learner(member):
    return member.get("status", "Active") == "Active" and any(
        role in (LEARNER, "Learner") or role.endswith("membership#Learner") for role in member.get("roles", []))


def match_roster(roster, course_members, column):
    """({student: LMS user id}, [(student, why not sent)]): each roster row mapped to one learner by
    `column`; a row with no learner, one that is not a learner, and ambiguous matches are refused."""
    field_name = MATCHES[column]
    by_value = {}
    for member in course_members:
        value = str(member.get(field_name) or "").strip().lower()
        if value:
            by_value.setdefault(value, []).append(member)
    mapped, refused = {}, []
    for student, row in sorted(roster.items()):
        value = row.get(column, "").strip().lower()
        found = by_value.get(value, []) if value else []
        learners = [member for member in found if is_learner(member)]
        if not value:
            refused.append((student, f"no {column} in the roster"))
        elif len(learners) > 1 or (len(found) > 1 and not learners):
            refused.append((student, f"{len(found)} members of the LMS course have {column} {value}: ambiguous"))
        elif not learners:
            refused.append((student, "not a learner of the LMS course" if found else
                            f"no member of the LMS course has {column} {value}"))
        else:
            mapped[student] = learners[0]["user_id"]
    users = {}
    for student, user in mapped.items():
        users.setdefault(user, []).append(student)
    for user, students in users.items():
        if len(students) > 1:
            for student in students:
                del mapped[student]
                refused.append((student, f"the same LMS user as {', '.join(s for s in students if s != student)}: "
                                         "ambiguous"))
    return mapped, sorted(refused)


def line_items(connection):
    """{resourceId or tag: line item} of the course's line items (the first of each key)."""
    items = {}
    for page in connection.pages(connection.platform.lineitems_url, LINEITEMS):
        for item in page if isinstance(page, list) else page.get("lineItems", []):
            for key in (item.get("resourceId"), item.get("tag")):
                if key and key not in items:
                    items[key] = item
    return items


def create_line_item(connection, assignment):
    """The assignment's new line item.  Creating one is not idempotent: when the answer is lost, the
    line items are read again, and the request sent again only when none was made."""
    body = {"label": assignment.title, "scoreMaximum": assignment.max_score, "resourceId": assignment.id,
            "tag": assignment.id}
    create = dict(accept=LINEITEM, content_type=LINEITEM, body=body)
    try:
        return connection.request("POST", connection.platform.lineitems_url, resend=False, **create).json()
    except PushError as error:
        if error.status:
            raise
    return line_items(connection).get(assignment.id) or \
        connection.request("POST", connection.platform.lineitems_url, resend=False, **create).json()


def scores_url(lineitem_url):
    """The line item's scores endpoint: its path with /scores appended (its query kept)."""
    parts = urlsplit(lineitem_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/scores"))


# -- the push --------------------------------------------------------------------------------------

@dataclass
class Outcome:
    sent: list = field(default_factory=list)        # (student, assignment, score)
    resent: list = field(default_factory=list)      # of those, (student, assignment) sent before, never confirmed
    unchanged: int = 0
    created: list = field(default_factory=list)     # assignment ids whose line item was created
    failed: list = field(default_factory=list)      # (student, assignment or "", why)
    refused: list = field(default_factory=list)     # (student, why not sent at all)


def read_state(out):
    """What earlier pushes sent ({assignment: {student: record}}); {} when none or unreadable.  A record
    holds the user, score, max, line_item and timestamp of the last score sent, and whether the
    platform's answer confirmed it (records written before that was kept were all confirmed)."""
    state_path = Path(out) / STATE
    try:
        return json.loads(state_path.read_text()) if state_path.exists() else {}
    except ValueError:
        return {}


def _confirmed(record):
    return record.get("confirmed", True)


def dry_run(course, scores, roster, out, *, force=False, say=print):
    """What a push would send, from the roster and the state file alone: no network, nothing written.
    Every roster row is listed (which of them the LMS knows as learners, and which line items it
    lacks, only the real push can ask); a score the last push sent unchanged is counted, not listed;
    a score held back (None: lms.final_scores says why) is neither."""
    state = read_state(out)
    outcome = Outcome()
    for assignment_id, by_student in scores.items():
        maximum = course.assignment(assignment_id).max_score
        for student in sorted(roster):
            if student in by_student and by_student[student] is None:
                continue
            given, points = by_student.get(student, (0.0, maximum))
            before = state.get(assignment_id, {}).get(student)
            same = before and (before.get("score"), before.get("max")) == (given, points)
            if not force and same and _confirmed(before):
                outcome.unchanged += 1
                continue
            was = ("sent before, its answer never came: sent again as the same update" if same and not _confirmed(before)
                   else f"was {before['score']:g}" if before else "not pushed before")
            say(f"would send {student} {assignment_id}: {given:g} / {points:g} ({was})")
            outcome.sent.append((student, assignment_id, given))
    return outcome


def push(course, platform, private_key, scores, roster, out, *, force=False):
    """Send `scores` (lms.final_scores; None: held back, never sent) for the roster's learners; the
    Outcome.  What is sent is kept in <out>/lms-pushed.json (dry_run above says what would go, without
    the network)."""
    state = read_state(out)
    outcome = Outcome()
    connection = Connection(platform, private_key)
    try:
        connection.authenticate()
        mapped, outcome.refused = match_roster(roster, members(connection), platform.match)
        items = line_items(connection)
        for assignment_id, by_student in scores.items():
            assignment = course.assignment(assignment_id)
            if assignment_id not in items:
                outcome.created.append(assignment_id)
                items[assignment_id] = create_line_item(connection, assignment)
            for student, user in sorted(mapped.items()):
                if student in by_student and by_student[student] is None:
                    continue
                given, maximum = by_student.get(student, (0.0, assignment.max_score))
                _send_score(connection, platform, state, Path(out) / STATE, outcome, student, assignment_id,
                            {"user": user, "score": given, "max": maximum, "line_item": items[assignment_id]["id"]},
                            force)
    except PushError as error:
        outcome.failed.append(("", "", str(error)))
    finally:
        connection.close()
    return outcome


def _send_score(connection, platform, state, state_path, outcome, student, assignment_id, record, force):
    """One student's score of one assignment, unless the platform confirmed it already.  The record goes
    to the state file before the request (unconfirmed, with its timestamp) and after its answer
    (confirmed): a score never confirmed is sent again with the timestamp it first carried."""
    before = state.get(assignment_id, {}).get(student) or {}
    same = {key: before.get(key) for key in record} == record
    if same and _confirmed(before) and not force:
        outcome.unchanged += 1
        return
    again = same and not _confirmed(before)   # the same update again: its answer was lost, or it failed
    timestamp = before["timestamp"] if again else datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    score = {"userId": record["user"], "scoreGiven": record["score"], "scoreMaximum": record["max"],
             "activityProgress": "Completed", "gradingProgress": "FullyGraded", "timestamp": timestamp}
    if platform.feedback_url:
        score["comment"] = "Feedback: " + platform.feedback_url.format(student=student, assignment=assignment_id)
    records = state.setdefault(assignment_id, {})
    records[student] = {**record, "timestamp": timestamp, "confirmed": False}
    write_atomic(state_path, json.dumps(state, indent=1, sort_keys=True))   # before it goes: a crash loses nothing
    try:
        connection.request("POST", scores_url(record["line_item"]), accept="application/json", content_type=SCORE,
                           body=score)
    except PushError as error:
        outcome.failed.append((student, assignment_id, str(error)))
        return
    records[student]["confirmed"] = True
    write_atomic(state_path, json.dumps(state, indent=1, sort_keys=True))
    outcome.sent.append((student, assignment_id, record["score"]))
    if again:
        outcome.resent.append((student, assignment_id))
