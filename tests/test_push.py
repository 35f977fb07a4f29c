"""Grading on push, end to end on this machine: real git repositories on disk stand for the
students' repositories, and a local HTTP server stands for GitHub's REST API, checking every
request against the documented endpoints and payloads."""

import base64
import hashlib
import json
import os
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from autograder.kits import KIT_FILES
from tests.conftest import run_grader
from tests.notebooks import COURSE, ROOT, make_submission, solution_answers
from tests.sample_class import SDPA_UNSCALED
from tests.test_course import solution_lines
from tests.test_variants import own_secret  # noqa: F401 (a fixture)

TOKEN = "ghp_instructorOnlyToken0123456789"
ORG = "attention-class"
PREFIX = "attention-"
STATES = {"error", "failure", "pending", "success"}
SHA = re.compile(r"^[0-9a-f]{40}$")

# A notebook that looks for everything a student would want from the instructor's run, and puts
# what it finds into the feedback (an exception's message is shown to the student).
SNOOP = '''
import os, time
found, started = [os.environ.get(name, "") for name in os.environ], time.monotonic()
for folder, _, files in os.walk("/"):
    if time.monotonic() - started > 2:
        break
    for name in files:
        if name.endswith((".ipynb", ".yml", ".py")) or name == "config":
            try:
                found.append(open(os.path.join(folder, name), errors="replace").read(10000))
            except (OSError, ValueError):
                pass


def scaled_dot_product_attention(q, k, v, mask=None):
    raise RuntimeError(" ".join(found)[-5000:] or "nothing found")
'''


def git(*args, cwd):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@example.org",
                        "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@example.org"})
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True).stdout.strip()


class FakeGitHub(BaseHTTPRequestHandler):
    """GitHub's REST API for the calls forge.py makes; anything else, or a request that breaks the
    documented contract, is recorded in `problems` and answered with an error."""
    repositories = {}    # name -> path of the git repository on disk
    pushed = {}          # sha -> the time GitHub received the push
    files = {}           # (repository, path) -> text: what the course committed with the contents API
    statuses, comments, problems, seen = [], [], [], []

    def log_message(self, *args):
        pass

    def _answer(self, code, payload, headers=()):
        body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _checked(self):
        url = urlparse(self.path)
        self.seen.append(f"{self.command} {url.path}")
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.problems.append(f"{self.command} {url.path}: no bearer token")
        if self.headers.get("Accept") != "application/vnd.github+json":
            self.problems.append(f"{self.command} {url.path}: Accept is {self.headers.get('Accept')}")
        if self.headers.get("X-GitHub-Api-Version") != "2022-11-28":
            self.problems.append(f"{self.command} {url.path}: no X-GitHub-Api-Version")
        return url.path.split("/")[1:], parse_qs(url.query)

    def do_GET(self):
        parts, query = self._checked()
        if parts[:3] == ["orgs", ORG, "repos"]:
            names = sorted(self.repositories) + ["attention-archived", "unrelated-repo"]
            page = int(query.get("page", ["1"])[0])
            if query.get("per_page") != ["100"] and page == 1:
                self.problems.append("repos listed without per_page=100")
            chunk = names[(page - 1) * 2:page * 2]  # two per page: pagination is exercised
            items = [{"name": name, "full_name": f"{ORG}/{name}", "default_branch": "main",
                      "clone_url": str(self.repositories.get(name, "/nonexistent")),
                      "archived": name == "attention-archived", "private": True} for name in chunk]
            more = [("Link", f'<http://{self.headers["Host"]}/orgs/{ORG}/repos?page={page + 1}>; rel="next"')] \
                if page * 2 < len(names) else []
            return self._answer(200, items, more)
        if parts[0] == "repos" and len(parts) >= 4 and parts[1] == ORG and parts[2] in self.repositories:
            path = self.repositories[parts[2]]
            if parts[3:] == ["branches", "main"]:
                sha = subprocess.run(["git", "rev-parse", "main"], cwd=path, capture_output=True,
                                     text=True).stdout.strip()
                return self._answer(200, {"name": "main", "commit": {"sha": sha}, "protected": False})
            if parts[3] == "contents":
                path = "/".join(parts[4:])
                if (parts[2], path) not in self.files:
                    return self._answer(404, {"message": "Not Found"})
                text = self.files[parts[2], path]
                return self._answer(200, {"type": "file", "path": path, "sha": blob_sha(text), "encoding": "base64",
                                          "content": base64.b64encode(text.encode()).decode()})
            if parts[3:] == ["activity"]:
                if query.get("ref") != ["refs/heads/main"]:
                    self.problems.append(f"activity asked for ref {query.get('ref')}")
                return self._answer(200, [{"id": index, "after": sha, "before": "0" * 40, "ref": "refs/heads/main",
                                           "timestamp": stamp, "activity_type": "push"}
                                          for index, (sha, stamp) in enumerate(self.pushed.items())])
        self.problems.append(f"GET {self.path}: not an endpoint the grader should call")
        return self._answer(404, {"message": "Not Found"})

    def do_PUT(self):
        parts, _ = self._checked()
        payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
        if not (len(parts) >= 5 and parts[0] == "repos" and parts[1] == ORG and parts[2] in self.repositories
                and parts[3] == "contents" and isinstance(payload, dict)):
            self.problems.append(f"PUT {self.path}: not an endpoint the grader should call")
            return self._answer(404, {"message": "Not Found"})
        key = (parts[2], "/".join(parts[4:]))
        if not isinstance(payload.get("message"), str) or set(payload) - {"message", "content", "sha", "branch"}:
            self.problems.append(f"PUT {self.path}: {payload} breaks the documented payload")
            return self._answer(422, {"message": "Validation Failed"})
        if key in self.files and payload.get("sha") != blob_sha(self.files[key]):
            self.problems.append(f"PUT {self.path}: an existing file changed without its sha")
            return self._answer(409, {"message": "sha does not match"})
        self.files[key] = base64.b64decode(payload["content"]).decode()
        return self._answer(201 if "sha" not in payload else 200, {"content": {"path": key[1]}})

    def do_POST(self):
        parts, _ = self._checked()
        try:
            payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            self.problems.append(f"POST {self.path}: the body is no JSON object")
            return self._answer(400, {"message": "Problems parsing JSON"})
        if len(parts) == 5 and parts[0] == "repos" and parts[3] == "statuses" and SHA.match(parts[4]):
            if payload.get("state") not in STATES or not isinstance(payload.get("context"), str) or \
                    len(payload.get("description", "")) > 140 or set(payload) - {"state", "description", "context",
                                                                             "target_url"}:
                self.problems.append(f"status {payload} breaks the documented payload")
                return self._answer(422, {"message": "Validation Failed"})
            self.statuses.append((parts[2], parts[4], payload))
            return self._answer(201, {"id": len(self.statuses), **payload})
        if len(parts) == 6 and parts[0] == "repos" and parts[3] == "commits" and parts[5] == "comments" \
                and SHA.match(parts[4]):
            if not isinstance(payload.get("body"), str) or len(payload["body"]) > 65536:
                self.problems.append("a commit comment without a body, or too long")
                return self._answer(422, {"message": "Validation Failed"})
            self.comments.append((parts[2], parts[4], payload["body"]))
            return self._answer(201, {"id": len(self.comments), "body": payload["body"]})
        self.problems.append(f"POST {self.path}: not an endpoint the grader should call")
        return self._answer(404, {"message": "Not Found"})


@pytest.fixture(scope="module")
def github(tmp_path_factory):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def blob_sha(text):
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def student_repository(root, name, answers, link_to=None):
    """A student's repository as the student kit starts it, with scaled_attention answered (or its
    notebook a link to `link_to`)."""
    path = root / "repos" / f"{PREFIX}{name}"
    make_submission("scaled_attention", answers, path / "scaled_attention")
    if link_to:
        notebook = path / "scaled_attention" / "scaled_attention.ipynb"
        notebook.unlink()
        notebook.symlink_to(link_to)
    (path / ".github" / "workflows").mkdir(parents=True)
    (path / ".github" / "workflows" / "self-check.yml").write_bytes((KIT_FILES / "self-check.yml").read_bytes())
    git("init", "-q", "-b", "main", cwd=path)
    git("add", "-A", cwd=path)
    sha = git("commit", "-q", "-m", "my answers", cwd=path)
    FakeGitHub.repositories[path.name] = path
    FakeGitHub.pushed[sha] = "2026-10-04T12:00:00Z"
    return path


def one_run(root, api):
    env = {"COURSE_GITHUB_TOKEN": TOKEN}
    steps = [("collect-push", "--submitted", root / "submitted", "--organization", ORG, "--prefix", PREFIX,
              "--api", api),
             ("grade-class", "--submitted", root / "submitted", "--out", root / "grading",
              "--db", f"sqlite:///{root / 'gradebook.db'}"),
             ("post-push", "--submitted", root / "submitted", "--out", root / "grading", "--api", api)]
    outputs = []
    for step in steps:
        process = run_grader(*step, env=env)
        assert process.returncode == 0, process.stderr
        outputs.append(process.stdout)
    return outputs


@pytest.fixture(scope="module")
def term(github, tmp_path_factory):
    root = tmp_path_factory.mktemp("push")
    answers = solution_answers("scaled_attention")
    repos = {"ada": student_repository(root, "ada", answers),
             "bob": student_repository(root, "bob", {"sdpa": SDPA_UNSCALED}),
             "mallory": student_repository(root, "mallory", {"sdpa": SNOOP}),
             "eve": student_repository(root, "eve", {}, link_to="/etc/shadow")}
    first = one_run(root, github)
    posted_first = (list(FakeGitHub.statuses), list(FakeGitHub.comments))
    # nobody else moves; bob fixes his answer and pushes after the due date
    make_submission("scaled_attention", answers, repos["bob"] / "scaled_attention")
    fixed = git("commit", "-q", "-am", "fix the scaling", cwd=repos["bob"])
    FakeGitHub.pushed[fixed] = "2026-10-06T12:00:00Z"
    second = one_run(root, github)
    return root, repos, first, second, posted_first


def test_each_pushed_commit_is_answered_with_its_scores_and_feedback(term):
    root, repos, first, _, (statuses, comments) = term
    assert "4 repositories collected" in first[0] and "4 commits answered" in first[2]
    by_repo = {repo: payload for repo, _, payload in statuses}
    assert by_repo[f"{PREFIX}ada"]["context"] == "grade/scaled_attention"
    full = COURSE.assignment("scaled_attention").max_score
    assert by_repo[f"{PREFIX}ada"]["description"] == f"{full:g} / {full:g} points"
    assert by_repo[f"{PREFIX}bob"]["state"] == "success" and f"/ {full:g} points" in by_repo[f"{PREFIX}bob"]["description"]
    bob_comment = next(body for repo, _, body in comments if repo == f"{PREFIX}bob")
    assert "without the 1/sqrt(d_k) scaling" in bob_comment
    # a notebook committed as a link is fetched as the link's text: never followed
    assert by_repo[f"{PREFIX}eve"]["state"] == "error" and "not a readable notebook" in by_repo[f"{PREFIX}eve"]["description"]
    assert FakeGitHub.problems == []


def test_only_the_repository_that_moved_is_fetched_graded_and_answered_again(term):
    _, _, _, second, _ = term
    assert "1 repositories collected" in second[0] and "collected bob" in second[0]
    assert "1 submission(s) of 1 student(s) to grade" in second[1] and "3 unchanged" in second[1] and "1 commits answered" in second[2]


def test_a_late_push_is_late_by_githubs_clock(term):
    root, *_ = term
    bob = [payload for repo, _, payload in FakeGitHub.statuses if repo == f"{PREFIX}bob"][-1]
    full = COURSE.assignment("scaled_attention").max_score
    assert bob["description"].startswith(f"{full:g} / {full:g} points") or "taken for lateness" in bob["description"]
    record = json.loads((root / "grading" / "results" / "bob" / "scaled_attention" / "grade.json").read_text())
    assert record["submitted_at"].startswith("2026-10-06T12:00:00")
    assert (root / "submitted" / "bob" / "scaled_attention" / "timestamp.txt").read_text().startswith("2026-10-06")


def test_a_hostile_notebook_gets_nothing_of_the_course_or_the_token(term):
    root, _, _, _, (statuses, comments) = term
    hidden = [line for assignment in COURSE.assignments for notebook in assignment.notebooks
              for line in solution_lines(COURSE.source_notebook(assignment, notebook))
              if len(line) > 30 and not line.startswith(("#", '"""'))]
    suites = [line.strip() for path in (ROOT / "autograder" / "suites").glob("test_*.py")
              for line in path.read_text().splitlines() if len(line.strip()) > 40]
    everything = json.dumps([statuses, comments, FakeGitHub.statuses, FakeGitHub.comments])
    assert TOKEN not in everything
    assert not [line for line in hidden + suites if json.dumps(line)[1:-1] in everything]
    mallory = next(body for repo, _, body in comments if repo == f"{PREFIX}mallory")
    # her code reaches for files and descriptors: the reading of it says so, and it earns nothing
    assert "reaches os." in mallory and "Your instructor has been told" in mallory


def test_the_student_side_holds_no_secret_and_nothing_of_the_course(term):
    """A hostile student edits the workflow in their own repository to print every file and dump
    the environment: it runs with what their repository holds, which is the kit and no secret."""
    _, repos, *_ = term
    workflow = (KIT_FILES / "self-check.yml").read_text()
    assert "secrets." not in workflow and "COURSE" not in workflow
    hostile = repos["mallory"]
    dump = subprocess.run("env; find . -type f -not -path './.git/*' -exec cat {} +", shell=True, cwd=hostile,
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"], "GITHUB_REPOSITORY":
                                                                f"{ORG}/{hostile.name}"}).stdout
    assert TOKEN not in dump and "autograder/suites" not in dump
    assert not any(test in dump for e in COURSE.assignment("scaled_attention").exercises for test in e.points)


def test_each_repository_is_sent_its_own_numbers_once_and_nothing_secret(term, github, own_secret):
    """variants --push commits each student's variant.json into their repository (GitHub's contents API),
    and again only where it changed; what it commits holds that student's numbers and no secret."""
    from autograder import variants
    from autograder.variants import Variants
    basics = COURSE.assignment("attention_basics")
    argv = ("variants", "--push", "--assignment", "attention_basics", "--organization", ORG, "--prefix", PREFIX,
            "--api", github)
    first = run_grader(*argv, env={"COURSE_GITHUB_TOKEN": TOKEN})   # noted beside own_secret, the tests' copy
    assert first.returncode == 0, first.stderr
    students = sorted(name[len(PREFIX):] for name in FakeGitHub.repositories)
    assert first.stdout.strip().splitlines()[-1] == f"{len(students)} repositories sent their variant.json (attention_basics)"
    secret = variants.read_secret(COURSE).decode()
    for student in students:
        text = FakeGitHub.files[f"{PREFIX}{student}", "attention_basics/variant.json"]
        assert text == Variants.of(COURSE).file_text(basics, student) and secret not in text
        assert json.loads(text)["notebooks"]["attention_basics"] == Variants.of(COURSE).draw(basics, basics.notebooks[0], student)
    again = run_grader(*argv, env={"COURSE_GITHUB_TOKEN": TOKEN})
    assert again.returncode == 0 and again.stdout.strip().endswith("0 repositories sent their variant.json (attention_basics)")
    assert not FakeGitHub.problems, FakeGitHub.problems
