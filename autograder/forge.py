"""The few GitHub REST calls that grading on push makes, behind one small client.

    GET  /orgs/{org}/repos                         the class's repositories (paginated)
    GET  /repos/{owner}/{repo}/branches/{branch}   the commit a branch points at
    GET  /repos/{owner}/{repo}/activity            when that commit was pushed (GitHub's clock)
    POST /repos/{owner}/{repo}/statuses/{sha}      a commit status per assignment: the score
    POST /repos/{owner}/{repo}/commits/{sha}/comments   a commit comment: the feedback
    GET  /repos/{owner}/{repo}/contents/{path}     a file the course put there (a student's variant.json)
    PUT  /repos/{owner}/{repo}/contents/{path}     ... put there, or changed, as a commit

and `fetch`, a shallow git clone of one branch.  The token lives only in the instructor's private
course repository; it reaches git through the environment (never a command line or .git/config).
"""

import base64
import os
import subprocess
from dataclasses import dataclass

import requests

from autograder.course import CourseError

API_VERSION = "2022-11-28"
TIMEOUT = 30              # seconds for one API call
CLONE_TIMEOUT = 300       # seconds for one clone
MAX_DESCRIPTION = 140     # GitHub's limit for a commit status description
MAX_COMMENT = 65536       # GitHub's limit for a comment body


class ForgeError(CourseError):
    """A call to the forge failed; one line for the instructor."""


@dataclass(frozen=True)
class Repository:
    full_name: str        # owner/name
    clone_url: str
    default_branch: str


class GitHub:
    def __init__(self, token, api="https://api.github.com"):
        self.token, self.api = token, api.rstrip("/")
        self.session = requests.Session()
        self.session.headers.update({"Accept": "application/vnd.github+json",
                                     "Authorization": f"Bearer {token}",
                                     "X-GitHub-Api-Version": API_VERSION,
                                     "User-Agent": "attention-course-autograder"})

    def _call(self, method, path, missing_ok=False, **kwargs):
        url = path if path.startswith("http") else f"{self.api}{path}"
        try:
            response = self.session.request(method, url, timeout=TIMEOUT, **kwargs)
        except requests.RequestException as error:
            raise ForgeError(f"{method} {path}: {type(error).__name__}") from None
        if missing_ok and response.status_code == 404:
            return None
        if response.status_code >= 400:
            try:
                message = response.json().get("message", "")
            except ValueError:
                message = ""
            raise ForgeError(f"{method} {path}: HTTP {response.status_code} {message}".strip())
        return response

    def repositories(self, organization, prefix=""):
        """The organization's repositories whose name starts with `prefix` (archived ones left out)."""
        found, url = [], f"/orgs/{organization}/repos"
        params = {"type": "all", "per_page": 100}
        while url:
            response = self._call("GET", url, params=params)
            for item in response.json():
                if item["name"].startswith(prefix) and not item.get("archived"):
                    found.append(Repository(item["full_name"], item["clone_url"], item["default_branch"]))
            url, params = response.links.get("next", {}).get("url"), None
        return sorted(found, key=lambda repository: repository.full_name)

    def head(self, repository, branch):
        """The sha of the commit `branch` points at."""
        return self._call("GET", f"/repos/{repository.full_name}/branches/{branch}").json()["commit"]["sha"]

    def pushed_at(self, repository, branch, sha):
        """When GitHub received the push that made `sha` the branch's head (ISO 8601), or ""."""
        response = self._call("GET", f"/repos/{repository.full_name}/activity",
                              params={"ref": f"refs/heads/{branch}", "per_page": 100, "direction": "desc"})
        for activity in response.json():
            if activity.get("after") == sha and activity.get("activity_type") in ("push", "force_push", "branch_creation"):
                return activity.get("timestamp", "")
        return ""

    def set_status(self, repository, sha, state, description, context):
        """A commit status (state: success, failure, error or pending)."""
        self._call("POST", f"/repos/{repository.full_name}/statuses/{sha}",
                   json={"state": state, "description": description[:MAX_DESCRIPTION], "context": context})

    def put_file(self, repository, path, text, message):
        """Commit `text` as `path` on the default branch, unless it is there already; returns whether it
        committed."""
        url = f"/repos/{repository.full_name}/contents/{path}"
        found = self._call("GET", url, missing_ok=True)
        payload = {"message": message, "content": base64.b64encode(text.encode()).decode()}
        if found is not None:
            existing = found.json()
            if base64.b64decode(existing.get("content", "")).decode(errors="replace") == text:
                return False
            payload["sha"] = existing["sha"]
        self._call("PUT", url, json=payload)
        return True

    def comment(self, repository, sha, body):
        if len(body) > MAX_COMMENT:
            body = body[:MAX_COMMENT - 80] + "\n\n(The feedback is cut here: it is longer than a comment may be.)"
        self._call("POST", f"/repos/{repository.full_name}/commits/{sha}/comments", json={"body": body})

    def fetch(self, repository, branch, target):
        """A shallow clone of `branch` into `target`; links are checked out as plain files."""
        header = base64.b64encode(f"x-access-token:{self.token}".encode()).decode()
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_COUNT": "1",
               "GIT_CONFIG_KEY_0": "http.extraHeader", "GIT_CONFIG_VALUE_0": f"Authorization: Basic {header}"}
        command = ["git", "-c", "core.symlinks=false", "-c", "advice.detachedHead=false", "clone", "--quiet",
                   "--depth", "1", "--single-branch", "--no-tags", "--branch", branch, "--",
                   repository.clone_url, str(target)]
        try:
            process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=CLONE_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise ForgeError(f"cloning {repository.full_name} took more than {CLONE_TIMEOUT} s") from None
        if process.returncode != 0:
            last = (process.stderr.strip().splitlines() or ["no message"])[-1]
            raise ForgeError(f"cloning {repository.full_name} failed: {last.replace(self.token, '***')}")
