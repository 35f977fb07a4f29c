"""An LTI 1.3 platform on loopback, for the tests of lms-push (tests/test_lti.py).

The platform itself is lti1p3platform's (a third-party implementation from PyPI): its access-token
endpoint (the client-credentials grant with a JWT client assertion, checked against the tool's
registered JWKS) and its Assignment and Grade Services and Names and Role Provisioning Services
handlers, with an in-memory gradebook behind them.  Around it, http.server and the checks the
specifications ask that the library leaves to the host: the assertion's audience, issuer, subject,
lifetime and jti; each endpoint's scope, Content-Type and Accept; paging with Link headers; a
Canvas-like refusal of scores for members who are not learners; and AGS's timestamps: one result per
line item and user, a score older than the result refused (400, as Canvas does), one with the
result's own timestamp taken as the same update again (acknowledged, nothing changes: AGS lets a
platform ignore it).  It keeps every request and score received, and the updates that changed a result.

Faults can be queued: platform.fault(kind, status, ...) answers the next request of that kind
(token, lineitems, scores, members; `method` and `user` narrow it) with that status (or holds it
`delay` seconds) instead; with drop=True the request is taken as usual and the connection closed
without an answer (the answer lost on the way back).
"""

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.membership import Context
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request
from lti1p3platform.score import UpdateScoreStatus
from lti1p3platform.service_connector import AssignmentsGradesService, NamesRoleProvisioningService

LINEITEM = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEMS = "application/vnd.ims.lis.v2.lineitemcontainer+json"
SCORE = "application/vnd.ims.lis.v1.score+json"
MEMBERSHIPS = "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"
SCOPE_LINEITEM = "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem"
SCOPE_SCORE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
SCOPE_MEMBERS = "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"
PAGE = 2   # line items and members per page: the tool must follow the Link headers


class _Request(Request):
    def build_metadata(self, request):
        return request


class _Configuration(LTI1P3PlatformConfAbstract):
    def init_platform_config(self, registration=None):
        self._registration = registration

    def get_registration_by_params(self, **kwargs):
        return self._registration


class _Grades(AssignmentsGradesService):
    def __init__(self, platform, request, lineitem_url=None):
        super().__init__(request, platform.configuration, platform.lineitems_url, lineitem_url)
        self.platform = platform

    def find_lineitems(self, page=1, limit=None, line_item_id=None, resource_link_id=None, resource_id=None, tag=None):
        items = [item for item in self.platform.lineitems.values()
                 if (resource_id is None or item.get("resourceId") == resource_id) and (tag is None or item.get("tag") == tag)]
        start = (int(page) - 1) * PAGE
        return {"content": items[start:start + PAGE], "has_next": start + PAGE < len(items)}

    def find_lineitem(self, line_item_id):
        return self.platform.lineitems[line_item_id]

    def create_lineitem(self, creation_data):
        item = {**creation_data, "id": f"{self.platform.lineitems_url}/{len(self.platform.lineitems) + 1}"}
        self.platform.lineitems[item["id"]] = item
        return item

    def update_lineitem(self, update_data):
        self.platform.lineitems[update_data["id"]].update(update_data)
        return self.platform.lineitems[update_data["id"]]

    def delete_lineitem(self, line_item_id):
        del self.platform.lineitems[line_item_id]

    def update_score(self, line_item_id, score):
        with self.platform.lock:
            self.platform.scores.append((line_item_id, score))
            key = line_item_id, score["userId"]
            if self.platform.results.get(key, {}).get("timestamp") != score["timestamp"]:  # not the same update again
                self.platform.results[key] = score
                self.platform.updates.append((line_item_id, score))
        return UpdateScoreStatus.SUCCESS

    def get_results(self, line_item_id, page=1, limit=None, user_id=None):
        return {"content": [], "has_next": False}


class _Members(NamesRoleProvisioningService):
    def __init__(self, platform, request):
        super().__init__(request, platform.configuration, platform.memberships_url)
        self.platform = platform

    def get_member_data_page(self, page=1, limit=None, role=None, since=None):
        start = (int(page) - 1) * PAGE
        members = self.platform.members
        return {"content": [dict(member) for member in members[start:start + PAGE]], "has_next": start + PAGE < len(members)}

    def get_context_by_id(self):
        return Context(id="7", label="ATT", title="Attention from scratch")


@dataclass
class Fault:
    kind: str
    status: int = 0          # 0: hold the request for `delay` seconds, then answer it as usual
    times: int = 1
    retry_after: str = ""
    delay: float = 0.0
    user: str = ""           # scores only: the fault is for this user's scores
    method: str = ""         # only requests of this method (GET, POST)
    drop: bool = False       # take the request, then close the connection without answering


@dataclass
class Platform:
    """A running platform: its URLs, what it received, and its gradebook."""
    tool_jwks: dict
    members: list
    client_id: str = "attention-course-tool"
    issuer: str = "https://lms.example.edu"
    lineitems: dict = field(default_factory=dict)
    scores: list = field(default_factory=list)          # (line item id, score) in the order received
    results: dict = field(default_factory=dict)         # (line item id, user) -> the score that set the result
    updates: list = field(default_factory=list)         # (line item id, score) of each score that changed a result
    token_requests: list = field(default_factory=list)  # the form of each accepted token request
    log: list = field(default_factory=list)             # (method, path, status)
    faults: list = field(default_factory=list)

    def start(self):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()).decode()
        self.public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo).decode()
        registration = (Registration().set_iss(self.issuer).set_client_id(self.client_id).set_deployment_id("1")
                        .set_platform_public_key(self.public_pem).set_platform_private_key(self.private_pem)
                        .set_tool_key_set(self.tool_jwks))
        self.configuration = _Configuration(registration=registration)
        self.configuration.get_registration()
        self.lock, self.seen_jti = threading.Lock(), set()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.token_url = f"{base}/login/oauth2/token"
        self.lineitems_url = f"{base}/api/lti/courses/7/line_items"
        self.memberships_url = f"{base}/api/lti/courses/7/names_and_roles"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def fault(self, kind, status=0, **options):
        self.faults.append(Fault(kind, status, **options))

    def gradebook(self):
        """{(the line item's resourceId, LMS user id): the score of its result}."""
        return {(self.lineitems[item_id]["resourceId"], user): score["scoreGiven"]
                for (item_id, user), score in self.results.items()}

    def configuration_file(self, private_key, **extra):
        return {"issuer": self.issuer, "client_id": self.client_id, "deployment_id": "1",
                "token_url": self.token_url, "lineitems_url": self.lineitems_url,
                "memberships_url": self.memberships_url, "private_key": str(private_key), **extra}


class Refused(Exception):
    def __init__(self, status, error, description=""):
        super().__init__(description)
        self.status, self.error, self.description = status, error, description


def _handler(platform):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def _answer(self, status, body=None, media="application/json", headers=()):
            if getattr(self, "dropping", False):   # a queued drop: the request was taken, its answer is lost
                self.close_connection = True
                platform.log.append((self.command, urlsplit(self.path).path, "dropped"))
                return
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            platform.log.append((self.command, urlsplit(self.path).path, status))

        def _serve(self, method):
            parts = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            kind = self._kind(method, parts.path)
            try:
                if self._faulted(kind, body):
                    return
                if kind == "token":
                    self._answer(200, self._token(body))
                    return
                request = _Request({"method": method, "headers": dict(self.headers), "path": parts.path,
                                    "content_type": self.headers.get("Content-Type"), "form_data": {},
                                    "get_data": dict(parse_qsl(parts.query)),
                                    "json": json.loads(body) if body else None})
                self._route(kind, request, parts)
            except Refused as refused:
                self._answer(refused.status, {"error": refused.error, "error_description": refused.description})

        def _kind(self, method, path):
            if path == urlsplit(platform.token_url).path:
                return "token"
            if path == urlsplit(platform.memberships_url).path:
                return "members"
            if path.endswith("/scores"):
                return "scores"
            if path.startswith(urlsplit(platform.lineitems_url).path):
                return "lineitems"
            return "unknown"

        def _faulted(self, kind, body):
            with platform.lock:
                for fault in platform.faults:
                    if fault.kind != kind or fault.times <= 0 or fault.method not in ("", self.command):
                        continue
                    if fault.user and (not body or json.loads(body).get("userId") != fault.user):
                        continue
                    fault.times -= 1
                    break
                else:
                    return False
            if fault.drop:
                self.dropping = True
                return False
            if not fault.status:
                time.sleep(fault.delay)
                return False
            headers = [("Retry-After", fault.retry_after)] if fault.retry_after else []
            self._answer(fault.status, {"error": "fault", "error_description": f"queued fault {fault.status}"},
                         headers=headers)
            return True

        def _token(self, body):
            if self.headers.get("Content-Type", "").split(";")[0] != "application/x-www-form-urlencoded":
                raise Refused(400, "invalid_request", "the token request must be a form")
            form = dict(parse_qsl(body.decode()))
            try:
                header = jwt.get_unverified_header(form.get("client_assertion", ""))
                answer = platform.configuration.get_access_token(form)  # the library: the signature, exp, grant
                claims = jwt.decode(form["client_assertion"], options={"verify_signature": False})
            except Exception as error:  # noqa: BLE001 - every refusal is the tool's to fix
                raise Refused(401, "invalid_client", f"client assertion refused: {error}") from None
            if header.get("alg") != "RS256" or not header.get("kid"):
                raise Refused(401, "invalid_client", "the assertion must be RS256 with the kid of the registered key")
            if claims.get("aud") not in (platform.token_url, [platform.token_url]):
                raise Refused(401, "invalid_client", f"wrong audience {claims.get('aud')!r}")
            if claims.get("iss") != platform.client_id or claims.get("sub") != platform.client_id:
                raise Refused(401, "invalid_client", "iss and sub must be the client id")
            if not claims.get("jti") or claims["jti"] in platform.seen_jti:
                raise Refused(401, "invalid_client", "a jti must be given, once")
            if not 0 < claims["exp"] - claims.get("iat", 0) <= 3600:
                raise Refused(401, "invalid_client", "the assertion must live at most an hour")
            platform.seen_jti.add(claims["jti"])
            platform.token_requests.append(form)
            return dict(answer)

        def _scopes(self):
            token = self.headers.get("Authorization", "").removeprefix("Bearer ")
            try:
                return jwt.decode(token, platform.public_pem, algorithms=["RS256"]).get("scopes", "").split()
            except jwt.PyJWTError as error:
                raise Refused(401, "invalid_token", str(error)) from None

        def _require(self, scope, accept, content_type=None):
            if scope not in self._scopes():
                raise Refused(403, "insufficient_scope", f"needs {scope}")
            if self.headers.get("Accept", "").split(";")[0] != accept:
                raise Refused(406, "not_acceptable", f"Accept must be {accept}")
            if content_type and self.headers.get("Content-Type", "").split(";")[0] != content_type:
                raise Refused(415, "unsupported_media_type", f"Content-Type must be {content_type}")

        def _service_answer(self, response, media, page_url=None):
            if response.code >= 400:
                raise Refused(response.code, "refused", response.message)
            result, headers = response.result, []
            if isinstance(result, dict) and "content" in result:      # a page of line items
                if result.get("next"):
                    headers.append(("Link", f'<{result["next"]}>; rel="next"'))
                result = result["content"]
            elif isinstance(result, dict) and result.get("next"):      # a page of members
                headers.append(("Link", f'<{result.pop("next")}>; rel="next"'))
            self._answer(response.code, result, media, headers)

        def _route(self, kind, request, parts):
            if kind == "members":
                self._require(SCOPE_MEMBERS, MEMBERSHIPS)
                request.request["get_data"].setdefault("limit", str(PAGE))
                page = int(request.get_data.get("page", 1))
                request.request["get_data"]["page"] = page
                self._service_answer(_Members(platform, request).handle_get_members(), MEMBERSHIPS)
            elif kind == "lineitems" and self.command == "GET":
                self._require(SCOPE_LINEITEM, LINEITEMS)
                request.request["get_data"]["page"] = int(request.get_data.get("page", 1))
                self._service_answer(_Grades(platform, request).handle_get_lineitems(), LINEITEMS)
            elif kind == "lineitems" and self.command == "POST" and parts.path == urlsplit(platform.lineitems_url).path:
                self._require(SCOPE_LINEITEM, LINEITEM, LINEITEM)
                item = request.json or {}
                if not isinstance(item.get("scoreMaximum"), (int, float)) or item["scoreMaximum"] <= 0 \
                        or not item.get("label"):
                    raise Refused(400, "invalid_lineitem", "label and a positive scoreMaximum are required")
                self._service_answer(_Grades(platform, request).handle_create_lineitem(), LINEITEM)
            elif kind == "scores" and self.command == "POST":
                self._require(SCOPE_SCORE, "application/json", SCORE)
                item_id = f"{platform.lineitems_url}/{parts.path.rstrip('/').split('/')[-2]}"
                if item_id not in platform.lineitems:
                    raise Refused(404, "not_found", "no such line item")
                self._check_score(request.json or {}, platform.lineitems[item_id])
                self._service_answer(_Grades(platform, request, item_id).handle_update_score(item_id),
                                     "application/json")
            else:
                raise Refused(404, "not_found", f"nothing at {self.command} {parts.path}")

        def _check_score(self, score, item):
            member = next((m for m in platform.members if m["user_id"] == score.get("userId")), None)
            if member is None or LEARNER not in member["roles"]:
                raise Refused(422, "not_a_student", "User not found in course or is not a student")
            for key, allowed in (("activityProgress", {"Initialized", "Started", "InProgress", "Submitted", "Completed"}),
                                 ("gradingProgress", {"FullyGraded", "Pending", "PendingManual", "Failed", "NotReady"})):
                if score.get(key) not in allowed:
                    raise Refused(400, "invalid_score", f"{key} {score.get(key)!r}")
            if not isinstance(score.get("scoreGiven"), (int, float)) or score.get("scoreMaximum") != item["scoreMaximum"]:
                raise Refused(400, "invalid_score", "scoreGiven and the line item's scoreMaximum are required")
            if not 0 <= score["scoreGiven"] <= score["scoreMaximum"]:
                raise Refused(400, "invalid_score", "scoreGiven out of range")
            try:
                timestamp = datetime.fromisoformat(score.get("timestamp", ""))
            except ValueError:
                raise Refused(400, "invalid_score", "timestamp must be ISO 8601") from None
            result = platform.results.get((item["id"], score["userId"]))
            if result and datetime.fromisoformat(result["timestamp"]) > timestamp:
                raise Refused(400, "invalid_score", f"timestamp {score['timestamp']} before the result's "
                                                    f"{result['timestamp']}")

    return Handler
