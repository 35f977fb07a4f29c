"""Who is checking, where the check server runs as a JupyterHub service: the hub names the student.

A hub starts (or is told of) a service with these in its environment (JupyterHub's services/service.py):

    JUPYTERHUB_SERVICE_NAME     the service's name (`checks`)
    JUPYTERHUB_API_TOKEN        the service's own token for the hub's API
    JUPYTERHUB_API_URL          the hub's API, e.g. http://127.0.0.1:8081/hub/api
    JUPYTERHUB_SERVICE_URL      where the service listens, e.g. http://127.0.0.1:8765
    JUPYTERHUB_SERVICE_PREFIX   the path the hub's proxy sends to it, e.g. /services/checks/

With them the server listens on the host and port of JUPYTERHUB_SERVICE_URL and serves under the prefix, and
a request carries the student's hub token (`Authorization: token <t>`: in a student's server and its
kernels, JUPYTERHUB_API_TOKEN). The server asks the hub whose it is with JupyterHub's own HubAuth
(`user_for_token`, whose answers it caches for cache_max_age, five minutes), and takes it only where the hub
names a user (not a service) and the token holds the service's access scope
(`access:services!service=<name>`, what HubAuth's tornado handlers require too). The hub's name must then
equal, exactly, the value of one column of the roster recorded beside the course's secret (`make variants
ROSTER=...`): the column course.yml's `checks: server: hub_names:` names (`student`, the default;
`sis_user_id`; or `email`, compared without case), and no other, so that a name a hub user could choose or
influence (an email address, an id) never reaches another column's student. A hub user it names no one of,
or two, is refused, and with no roster recorded every hub user is, since nothing then tells a student from
anybody else with an account on the hub. The course's own tokens (tokens.py) are not taken on a hub; outside
one they are the only way in.
"""

import logging
import os
from urllib.parse import urlparse

from autograder.course import CourseError
from autograder.ondemand.tokens import Caller, Refused
from autograder.variants import Variants

log = logging.getLogger("autograder")

SERVICE_ENV = ("JUPYTERHUB_SERVICE_NAME", "JUPYTERHUB_API_TOKEN", "JUPYTERHUB_API_URL", "JUPYTERHUB_SERVICE_URL",
               "JUPYTERHUB_SERVICE_PREFIX")
HUB_RETRY = 30   # seconds after which a check refused because the hub did not answer may be tried again


def service_environment(environ=None):
    """The hub's settings of this service ({name: value} of SERVICE_ENV), or None outside a hub (no
    JUPYTERHUB_SERVICE_NAME); CourseError (one line) where the hub set some of them and not the others."""
    environ = os.environ if environ is None else environ
    if not environ.get("JUPYTERHUB_SERVICE_NAME"):
        return None
    missing = [name for name in SERVICE_ENV if not environ.get(name)]
    if missing:
        raise CourseError(f"the check server runs as the hub's service {environ['JUPYTERHUB_SERVICE_NAME']!r} but "
                          f"{', '.join(missing)} is not set: give the service a url in jupyterhub_config.py "
                          "(docs/checks.md)")
    return {name: environ[name] for name in SERVICE_ENV}


def listening(settings):
    """(host, port, prefix) the service serves at: JUPYTERHUB_SERVICE_URL's host and port, under the prefix."""
    url = urlparse(settings["JUPYTERHUB_SERVICE_URL"])
    try:
        port = url.port or {"http": 80, "https": 443}[url.scheme]
    except (KeyError, ValueError):
        raise CourseError(f"JUPYTERHUB_SERVICE_URL {settings['JUPYTERHUB_SERVICE_URL']!r} is not an http(s) "
                          "address with a port") from None
    path = settings["JUPYTERHUB_SERVICE_PREFIX"].strip("/")
    return url.hostname or "127.0.0.1", port, f"/{path}/" if path else "/"


def roster_student(roster, column, name):
    """The one student of `roster` (student -> {column: value}, as variants.Variants.roster reads it) whose
    `column` (course.HUB_NAMES; `student` is the roster's key) holds `name`, an email compared without case;
    None where no student's does, or more than one's."""
    def value(student, row):
        held = student if column == "student" else (row or {}).get(column)
        return None if held is None else str(held).strip()
    same = (lambda held: held.casefold() == name.casefold()) if column == "email" else (lambda held: held == name)
    found = [student for student, row in roster.items() if value(student, row) and same(value(student, row))]
    return found[0] if len(found) == 1 else None


class HubStudents:
    """Who sent a request on the hub: `caller(authorization)`, as tokens.CourseTokens outside one."""

    def __init__(self, course, settings):
        from jupyterhub.services.auth import HubAuth   # JupyterHub's own client of its API, with its cache
        self.course, self.name = course, settings["JUPYTERHUB_SERVICE_NAME"]
        self.column = course.check_server.hub_names
        self.auth = HubAuth(api_token=settings["JUPYTERHUB_API_TOKEN"], api_url=settings["JUPYTERHUB_API_URL"],
                            access_scopes={f"access:services!service={self.name}"})

    async def caller(self, authorization):
        """The Caller (the roster's student, and their hub name) the hub names for the token in
        `authorization`, from the request's headers alone; Refused (401, 403, 503) with one line otherwise."""
        from tornado.web import HTTPError
        match = self.auth.auth_header_pat.match(authorization or "")
        if not match:
            raise Refused(401, "no hub token: check() sends your server's JUPYTERHUB_API_TOKEN "
                               "(Authorization: token <t>)")
        try:
            user = await self.auth.user_for_token(match.group(1).strip(), sync=False)
        except HTTPError as error:   # the hub unreachable, or failing: nobody can be told from anybody now
            log.error("check server: the hub could not name a request's user: %s", error.log_message)
            raise Refused(503, "the hub could not be asked who you are; try again", retry_after=HUB_RETRY) from None
        if not user:
            raise Refused(401, "the hub does not know this token")
        if user.get("kind") != "user":
            raise Refused(403, f"this token is the hub's {user.get('kind')} {user.get('name')!r}, not a student's")
        if not self.auth.check_scopes(self.auth.access_scopes, user):
            raise Refused(403, f"this token has no access to the hub's {self.name} service "
                               f"(access:services!service={self.name})")
        student = self.on_roster(user["name"])
        return Caller(student, tuple(dict.fromkeys((student, user["name"]))))

    def on_roster(self, name):
        """The roster's student whose `hub_names` column holds the hub's `name` (the roster read afresh: one
        recorded while the server runs counts); Refused (403) where none is recorded, or it names no one, or two."""
        roster = Variants.of(self.course).roster()
        if roster is None:
            log.error("check server: hub user %s refused: no roster is recorded beside the course's secret "
                      "(make variants ROSTER=roster.csv)", name)
            raise Refused(403, "the course has no roster on this server yet, so no hub user is a student of it; "
                               "tell your instructor")
        student = roster_student(roster, self.column, name)
        if student is None:
            log.error("check server: hub user %r refused: it is the %s of no one student of the roster "
                      "(checks: server: hub_names)", name, self.column)
            raise Refused(403, f"the hub's user {name} is no student of this course's roster; tell your "
                               "instructor")
        return student
