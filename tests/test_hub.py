"""A whole term on the course's JupyterHub, in a real browser (Playwright driving Debian's Chromium).

Cost: two to three minutes on two cores (2 min 23 s to 3 min 11 s beside other test runs: the hub and
the check service's warm grader 31 to 50 s, three JupyterLab servers, formgrader's autograde of two
hand-ins, make grade's run after it; hub-artifacts/timings.txt has each step's); it runs as root (the hub
spawns each user's server as their own system account, which it creates), with Chromium and Node; marked
slow (make test-all and CI run it, make test does not), first in LONGEST_FIRST.

The instructor releases attention_basics (an assignment with each student's own numbers) in formgrader;
ada logs in, fetches it (the fetch brings her variant.json from the hub's `checks` service, as her),
writes softmax without subtracting the maximum, runs check() and reads the named cause, fixes it,
answers by hand on her own numbers and submits; the due date passes (the test moves it where the
instructor keeps it, course.yml and nbgrader's gradebook: a browser cannot make time pass); ben submits late; the instructor
collects, autogrades both in formgrader (the hidden suites, through nbgrader_hooks.HiddenSuites), gives
ada a score by hand, generates and releases feedback; ada fetches her feedback and reads the score that
grades.csv (make grade, afterwards) and the LMS export give too. Each step leaves a screenshot in the
test's tmp folder and in hub-artifacts/.
"""

import csv
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from playwright import sync_api as playwright_api

from autograder.course import ROOT
from autograder.hub.prepare import VENV_BIN, as_user, set_due
from tests.hub import PASSWORD, Hub

CHROMIUM = Path("/usr/bin/chromium")
ASSIGNMENT = "attention_basics"
ADA, BEN, TEACHER = "hubt_ada", "hubt_ben", "hubt_teacher"
ARTIFACTS = ROOT / "hub-artifacts"

MISTAKE = '''def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)), without the maximum subtracted."""
    exps = np.exp(x)
    return exps / np.sum(exps, axis=axis, keepdims=True)
'''
FIXED = '''def softmax(x, axis=-1):
    """exp(x - max) / sum(exp(x - max)) over each slice along axis."""
    shifted = x - np.max(x, axis=axis, keepdims=True)
    exps = np.exp(shifted)
    return exps / np.sum(exps, axis=axis, keepdims=True)
'''
BY_HAND = '''q, K, V = (np.array(VARIANT[name], dtype=float) for name in ("query", "keys", "values"))
s = K @ q / np.sqrt(2)
w = softmax(s)
by_hand = {"scores": s.round(3).tolist(), "weights": w.round(3).tolist(), "context": (w @ V).round(3).tolist()}
'''


class Term:
    """The browser's side of the term: one context per person, a screenshot per step."""

    def __init__(self, hub, browser, shots):
        self.hub, self.browser, self.shots, self.count = hub, browser, shots, 0
        self.pages, self.quiet = {}, set()

    def log_in(self, user):
        page = self.browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{self.hub.url}/hub/login")
        page.fill("#username_input", user)
        page.fill("#password_input", PASSWORD)
        page.click("#login_submit")   # the hub starts the user's server; waited for in lab()
        self.pages[user] = page
        return page

    def lab(self, user):
        page = self.pages[user]
        page.wait_for_url(f"**/user/{user}/lab**", timeout=180_000)
        page.wait_for_selector(".jp-LabShell", timeout=120_000)
        if user not in self.quiet:   # JupyterLab's question about news, answered once
            try:
                page.locator(".jp-toast-button", has_text="No").first.click(timeout=5000)
            except playwright_api.TimeoutError:
                pass
            self.quiet.add(user)
        return page

    def shot(self, page, name):
        self.count += 1
        path = self.shots / f"{self.count:02d}-{name}.png"
        page.screenshot(path=path)
        return path

    def modal_closed(self, page, expected="success-modal"):
        """formgrader's answer to an action: its success dialog, closed; AssertionError with its error text."""
        page.wait_for_selector(f"#{expected}, #error-modal", state="visible", timeout=240_000)
        if page.locator("#error-modal").is_visible():
            raise AssertionError("formgrader: " + page.locator("#error-modal").inner_text())
        page.locator(f"#{expected} button.close").first.click()
        page.wait_for_selector(f"#{expected}", state="hidden")

    def assignment_list(self, user):
        page = self.lab(user)
        page.get_by_text("Nbgrader", exact=True).click()
        page.get_by_text("Assignment List", exact=True).click()
        page.wait_for_selector("#released_assignments_list")
        return page

    def refreshed(self, page, section, text):
        """Wait until the assignment list's `section` shows `text`, refreshing it as a student would."""
        for _ in range(30):
            if text in page.locator(f"#{section}").inner_text():
                return
            page.locator("#refresh_assignments_list").first.click()
            page.wait_for_timeout(1000)
        raise AssertionError(f"{section} never showed {text!r}: {page.locator(f'#{section}').inner_text()}")


def fill_cell(page, containing, code, lacking=None):
    """Replace the text of the notebook's code cell whose source holds `containing` (and not `lacking`)
    with `code`, as typed."""
    cell = page.locator(".jp-CodeCell .jp-InputArea").filter(has_text=containing)
    if lacking:
        cell = cell.filter(has_not_text=lacking)
    cell = cell.first
    cell.scroll_into_view_if_needed()
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(code)
    page.keyboard.press("Escape")


def run_check(page, marker):
    """A cell at the end with check(), saved and run; the answer once it holds `marker`."""
    last = page.locator(".jp-Notebook .jp-Cell").last
    last.scroll_into_view_if_needed()
    last.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.keyboard.press("Enter")
    page.keyboard.insert_text("from check import check\ncheck();")
    page.keyboard.press("Control+s")
    page.wait_for_timeout(1500)
    page.keyboard.press("Shift+Enter")
    answer = page.locator(".jp-Notebook .jp-Cell").filter(has_text="from check import check").last.locator(".jp-OutputArea")
    answer.get_by_text(marker, exact=False).first.wait_for(timeout=300_000)
    answer.evaluate("area => area.scrollIntoView({block: 'start'})")
    return answer.inner_text()


def as_instructor(hub, *args):
    return as_user(hub.term, hub.term.instructor, VENV_BIN / "python", "-m", "autograder", "--course",
                   hub.term.course / "course.yml", *args, cwd=hub.term.course)


@pytest.fixture(scope="module")
def hub():
    running = Hub([(ADA, "Lovelace, Ada"), (BEN, "Bennet, Ben")], TEACHER, ASSIGNMENT)
    try:
        running.start()
        yield running
    finally:
        running.stop(keep_log=ARTIFACTS / "hub.log")


@pytest.mark.slow   # make test-all and CI (.ci/run) run it; make test leaves it out
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (.ci/run installs it)")
def test_a_term_on_the_hub_from_release_to_feedback(hub, tmp_path):
    shots = tmp_path / "hub-artifacts"
    shots.mkdir()
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        term = Term(hub, browser, shots)
        try:
            for user in (TEACHER, ADA, BEN):   # the three servers start at once
                term.log_in(user)
            a_term(hub, term)
        finally:
            browser.close()
            ARTIFACTS.mkdir(exist_ok=True)
            for path in [*shots.glob("*.png"), *shots.glob("*.txt")]:
                shutil.copy(path, ARTIFACTS / path.name)


def a_term(hub, term):
    """Each step in turn, its seconds written beside the screenshots (timings.txt)."""
    took = []
    for step in (release, fetch_and_check, fix_and_submit, late_hand_in, collect_and_grade, read_feedback):
        started = time.monotonic()
        score = step(hub, term)
        took.append(f"{step.__name__}: {time.monotonic() - started:.0f} s")
    started = time.monotonic()
    same_score_everywhere(hub, score)
    took.append(f"same_score_everywhere: {time.monotonic() - started:.0f} s")
    (term.shots / "timings.txt").write_text("\n".join(took) + "\n")


def release(hub, term):
    """The instructor releases the assignment in formgrader."""
    teacher = term.lab(TEACHER)
    teacher.goto(f"{hub.url}/user/{TEACHER}/formgrader/manage_assignments")
    row = teacher.locator("tr").filter(has_text=ASSIGNMENT)
    row.locator(".glyphicon-cloud-upload").click()
    term.modal_closed(teacher)
    row.get_by_text("released").wait_for()
    term.shot(teacher, "instructor-releases")
    assert (hub.term.exchange / "attention" / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()


def fetch_and_check(hub, term):
    """ada fetches it (the notebook, and her own numbers from the checks service), writes a mistake, checks
    it and reads the named cause; the check server knew her from her server's hub token alone."""
    course = hub.term.course
    ada = term.assignment_list(ADA)
    term.refreshed(ada, "released_assignments_list", ASSIGNMENT)
    ada.locator("#released_assignments_list button", has_text="Fetch").first.click()
    term.refreshed(ada, "fetched_assignments_list", ASSIGNMENT)
    term.shot(ada, "student-fetches")
    fetched = hub.term.home(ADA) / ASSIGNMENT
    mine = json.loads((fetched / "variant.json").read_text())
    assert mine == json.loads((course / "variants" / ADA / ASSIGNMENT / "variant.json").read_text())
    assert mine["student"] == ADA and (fetched / "variant.json").stat().st_uid == fetched.stat().st_uid

    ada.goto(f"{hub.url}/user/{ADA}/lab/tree/{ASSIGNMENT}/{ASSIGNMENT}.ipynb")
    ada.wait_for_selector(".jp-Notebook .jp-CodeCell")
    hub.checks_ready()
    fill_cell(ada, "def softmax(x, axis=-1):", MISTAKE)
    answer = run_check(ada, "without subtracting the maximum")
    assert "softmax" in answer
    term.shot(ada, "student-check-names-the-cause")
    assert not list(hub.term.home(ADA).rglob("check-server.json"))   # no kit: the hub said who she is
    checked = [json.loads(line) for line in (course / "grading" / "checks" / "checks.jsonl").read_text().splitlines()]
    assert [(c["student"], any("without subtracting the maximum" in cause for cause in c["causes"]))
            for c in checked] == [(ADA, True)]


def fix_and_submit(hub, term):
    """The fix, her numbers by hand, the submission."""
    ada = term.lab(ADA)
    fill_cell(ada, "without the maximum subtracted", FIXED)
    fill_cell(ada, "# YOUR CODE HERE", BY_HAND, lacking="def ")
    ada.keyboard.press("Control+s")
    ada.wait_for_timeout(1500)
    ada = term.assignment_list(ADA)
    term.refreshed(ada, "fetched_assignments_list", ASSIGNMENT)
    ada.locator("#fetched_assignments_list button", has_text="Submit").first.click()
    term.refreshed(ada, "submitted_assignments_list", ASSIGNMENT)
    term.shot(ada, "student-submits")


def late_hand_in(hub, term):
    """The due date passes (where the instructor keeps it: course.yml and nbgrader's gradebook; a browser
    cannot make time pass), then ben fetches and hands in."""
    set_due(hub.term, datetime.now(timezone.utc).isoformat(timespec="seconds"))
    ben = term.assignment_list(BEN)
    term.refreshed(ben, "released_assignments_list", ASSIGNMENT)
    ben.locator("#released_assignments_list button", has_text="Fetch").first.click()
    term.refreshed(ben, "fetched_assignments_list", ASSIGNMENT)
    ben.locator("#fetched_assignments_list button", has_text="Submit").first.click()
    term.refreshed(ben, "submitted_assignments_list", ASSIGNMENT)
    term.shot(ben, "second-student-submits-late")


def collect_and_grade(hub, term):
    """Collect, autograde both in formgrader (the hidden suites), a score by hand, feedback released."""
    teacher = term.pages[TEACHER]   # on formgrader's pages since the release
    teacher.goto(f"{hub.url}/user/{TEACHER}/formgrader/manage_assignments")
    teacher.locator("tr").filter(has_text=ASSIGNMENT).locator(".glyphicon-cloud-download").click()
    term.modal_closed(teacher)
    teacher.goto(f"{hub.url}/user/{TEACHER}/formgrader/manage_submissions/{ASSIGNMENT}")
    for student in (ADA, BEN):
        teacher.locator("tr").filter(has_text=student).locator(".autograde a").click()
        term.modal_closed(teacher)
    teacher.reload()
    teacher.locator("tr").filter(has_text=ADA).locator(".score").filter(has_text=re.compile(r"\d")).wait_for()
    term.shot(teacher, "instructor-autogrades")
    autograded = (hub.term.course / "autograded" / ADA / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text()
    assert "Hidden tests of by_hand: 10 / 10" in autograded   # graded on her own numbers, as she answered

    teacher.locator("tr").filter(has_text=ADA).locator(".student-name a").click()
    teacher.locator("a[href*='/formgrader/submissions/']").first.click()
    by_hand = teacher.locator("input.score#check_numpy_attention")   # the grader gave 0 of 8
    by_hand.scroll_into_view_if_needed()
    by_hand.fill("2")
    by_hand.press("Tab")
    teacher.wait_for_timeout(2000)
    term.shot(teacher, "instructor-scores-by-hand")

    teacher.goto(f"{hub.url}/user/{TEACHER}/formgrader/manage_assignments")
    row = teacher.locator("tr").filter(has_text=ASSIGNMENT)
    row.locator(".glyphicon-comment").click()
    term.modal_closed(teacher)
    row.locator(".glyphicon-envelope").click()
    term.modal_closed(teacher)
    term.shot(teacher, "instructor-releases-feedback")


def read_feedback(hub, term):
    """ada fetches her feedback and reads her score in it."""
    ada = term.assignment_list(ADA)
    term.refreshed(ada, "submitted_assignments_list", ASSIGNMENT)
    ada.locator("#submitted_assignments_list button", has_text="Fetch Feedback").first.click()
    feedback = wait_for_file(hub.term.home(ADA) / ASSIGNMENT / "feedback")
    ada.goto(f"{hub.url}/user/{ADA}/files/{feedback.relative_to(hub.term.home(ADA))}")
    shown = ada.locator("body").inner_text()
    term.shot(ada, "student-reads-feedback")
    return float(re.search(r"Score:\s*([\d.]+)\s*/\s*[\d.]+", shown).group(1))


def same_score_everywhere(hub, score):
    """make grade (as the instructor, afterwards) and the LMS export give the score her feedback gave."""
    course = hub.term.course
    db = f"sqlite:///{course / 'gradebook.db'}"
    as_instructor(hub, "grade-class", "--submitted", course / "submitted", "--out", course / "grading", "--db", db)
    as_instructor(hub, "export-lms", "--out", course / "grading", "--roster", course / "roster.csv", "--db", db)
    with open(course / "grading" / "grades.csv") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert float(rows[ADA]["final_score"]) == pytest.approx(score) and float(rows[ADA]["manual"]) == 2   # 0 -> 2
    assert float(rows[ADA]["seconds_late"]) == 0 and float(rows[BEN]["seconds_late"]) > 0   # ben handed in late
    with open(course / "grading" / "canvas.csv") as handle:
        canvas = list(csv.reader(handle))
    column = canvas[0].index("Attention from scratch with NumPy")
    assert float(next(r for r in canvas[2:] if r[0] == "Lovelace, Ada")[column]) == pytest.approx(score)


def wait_for_file(folder, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(Path(folder).rglob("*.html")) if Path(folder).is_dir() else []
        if found:
            return found[0]
        time.sleep(0.5)
    raise AssertionError(f"no feedback in {folder} within {timeout} s")


class Service:
    """A stand-in for the hub's `checks` service on loopback: one fixed answer, the requests it was sent."""

    def __init__(self, status, body, content_type):
        import http.server
        import threading

        sent = self.sent = []

        class Answer(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                sent.append((self.path, self.headers.get("Authorization")))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/checks/"


def fetch_from(service_url, tmp_path, monkeypatch):
    """nbgrader's fetch of the released assignment with the course's exchange class, as a student's server
    runs it: (the ExchangeError or None, the student's folder)."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange import ExchangeError
    from traitlets.config import Config

    from autograder.hub.exchange import FetchWithVariant

    shutil.copytree(ROOT / "exercises" / ASSIGNMENT, tmp_path / "exchange" / "attention" / "outbound" / ASSIGNMENT)
    (tmp_path / "exchange").chmod(0o1777)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "a-students-server-token")
    config = Config()
    config.CourseDirectory.course_id = "attention"
    config.CourseDirectory.assignment_id = ASSIGNMENT
    config.CourseDirectory.root = str(home)
    config.Exchange.root = str(tmp_path / "exchange")
    config.FetchWithVariant.service_url = service_url
    fetch = FetchWithVariant(coursedir=CourseDirectory(config=config), authenticator=Authenticator(config=config),
                             config=config)
    try:
        fetch.start()
    except ExchangeError as error:
        return error, home / ASSIGNMENT
    return None, home / ASSIGNMENT


def test_a_fetch_writes_the_variant_the_service_gives_for_the_servers_token(tmp_path, monkeypatch):
    numbers = json.dumps({"student": "ada", "assignment": ASSIGNMENT, "notebooks": {ASSIGNMENT: {"query": [1, 2]}}})
    service = Service(200, numbers + "\n", "application/json")
    failed, folder = fetch_from(service.url, tmp_path, monkeypatch)
    assert failed is None and (folder / "variant.json").read_text() == numbers + "\n"
    assert (folder / f"{ASSIGNMENT}.ipynb").is_file()
    assert service.sent == [(f"/services/checks/variant/{ASSIGNMENT}", "token a-students-server-token")]


def test_an_assignment_the_service_says_has_no_variants_is_fetched_without_one(tmp_path, monkeypatch):
    service = Service(404, json.dumps({"error": "masks has no numbers of each student's own"}), "application/json")
    failed, folder = fetch_from(service.url, tmp_path, monkeypatch)
    assert failed is None and (folder / f"{ASSIGNMENT}.ipynb").is_file() and not (folder / "variant.json").exists()


@pytest.mark.parametrize("answer, said", [
    (None, "the course's checks service could not be reached at {url}variant/attention_basics ("),
    ((404, "<html>404: Not Found</html>", "text/html"), "no checks service answers at {url}variant/attention_basics"),
    ((503, json.dumps({"error": "the hub did not answer"}), "application/json"),
     "the course's checks service answered 503 for your variant.json (the hub did not answer)"),
    ((200, "<html>Sign in</html>", "text/html"), "{url}variant/attention_basics answered something that is no "
                                                 "variant.json"),
], ids=["nothing listening", "a 404 not the service's", "a refusal", "a page"])
def test_a_fetch_without_its_variant_fails_in_one_line_and_leaves_nothing(answer, said, tmp_path, monkeypatch, caplog):
    """The student reads one line saying why, and no folder of notebooks on nobody's numbers is left."""
    from autograder.hub.prepare import free_port
    url = Service(*answer).url if answer else f"http://127.0.0.1:{free_port()}/services/checks/"
    failed, folder = fetch_from(url, tmp_path, monkeypatch)
    lines = [record.getMessage() for record in caplog.records if record.levelname in ("ERROR", "CRITICAL")]
    assert failed is not None and len(lines) == 1 and "\n" not in lines[0], lines
    assert lines[0].startswith(f"{ASSIGNMENT} was not fetched: " + said.format(url=url)), lines[0]
    assert not folder.exists()


# -- what other accounts reach: the checkout, the exchange ------------------------------------------

@pytest.mark.slow   # the hub's own accounts and checkout (its fixture); no browser
def test_a_students_account_reaches_nothing_of_the_graders_checkout_but_what_their_server_runs(hub):
    """As ada's system account, as her server runs: the hidden suites, the solutions, the catalogue of
    mistakes, the sample class, the checkout's listing are refused; her Python imports the fetch and
    check() from the student-lib and nothing of the grader; the instructor still reads the course."""
    from autograder.course import CourseError

    secrets = [("head", "-c1", ROOT / "autograder" / "suites" / "test_softmax.py"),
               ("head", "-c1", ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"),
               ("head", "-c1", ROOT / "tests" / "catalogue" / "numpy_attention.py"),
               ("ls", ROOT / "sample_class"), ("head", "-c1", ROOT / ".git" / "HEAD"), ("ls", ROOT)]
    for *command, secret in secrets:
        with pytest.raises(CourseError) as refused:
            as_user(hub.term, ADA, *command, secret)
        assert f"'{secret}'" in str(refused.value) and str(refused.value).endswith(": Permission denied"), refused.value
    for *command, secret in secrets:   # the instructor's server, formgrader and the check service read them
        assert as_user(hub.term, TEACHER, *command, secret)
    lib = hub.term.student_lib
    imports = "import check, autograder.hub.exchange as fetch; print(check.__file__, fetch.__file__)"
    assert as_user(hub.term, ADA, VENV_BIN / "python", "-c", imports).split() == [
        str(lib / "check.py"), str(lib / "autograder" / "hub" / "exchange.py")]
    with pytest.raises(CourseError, match="No module named 'autograder.grading'"):
        as_user(hub.term, ADA, VENV_BIN / "python", "-c", "import autograder.grading")
    course = hub.term.exchange / "attention"   # the exchange's course folder: the instructor's since prepare
    teacher = pwd.getpwnam(TEACHER).pw_uid
    assert [(course / name).stat().st_uid for name in ("", "inbound", "outbound", "feedback")] == [teacher] * 4


@pytest.fixture
def reachable():
    """A folder other accounts can reach (pytest's tmp_path is root's, 700)."""
    folder = Path(tempfile.mkdtemp(prefix="attention-hub-scratch-", dir="/var/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def modes(*paths):
    return [(oct(stat.S_IMODE(os.lstat(path).st_mode)), os.lstat(path).st_uid, os.lstat(path).st_gid)
            for path in paths]


def as_account(uid, gid, *command):
    """`command` as the account uid:gid (its groups: gid alone): its exit status and error output."""
    done = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *map(str, command)],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="a hub's prepare runs as root (groups, owners, other accounts)")
def test_a_closed_checkout_lets_others_run_its_venv_alone_and_undo_opens_it_again(reachable):
    """close_the_checkout on a checkout of a few entries, daemon its instructor: nobody (any other account)
    runs what .venv holds and reaches nothing else; daemon's group reads the course; undo restores all."""
    from autograder.hub.prepare import Term as HubTerm, close_the_checkout, undo

    checkout = reachable / "checkout"
    for name in ("autograder/suites/test_softmax.py", "solutions/a/a.ipynb", ".venv/bin/python", "course.yml"):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text("secret\n")
        (checkout / name).chmod(0o644)
    (checkout / "solutions").chmod(0o775)   # group-writable: the instructor's group gets no write
    entries = [checkout, *sorted(checkout.iterdir())]
    before = modes(*entries)
    term = HubTerm(state=str(reachable / "term"), instructor="daemon")
    close_the_checkout(term, checkout)
    close_the_checkout(term, checkout)   # a second prepare: undo still restores the first state
    assert dict(zip([e.name for e in entries], modes(*entries))) == {
        "checkout": ("0o751", 0, 1), ".venv": ("0o755", 0, 0), "autograder": ("0o750", 0, 1),
        "course.yml": ("0o640", 0, 1), "solutions": ("0o750", 0, 1)}
    assert as_account(65534, 65534, "cat", checkout / ".venv" / "bin" / "python") == (0, "")
    for secret in ("autograder/suites/test_softmax.py", "solutions/a/a.ipynb", "course.yml"):
        assert as_account(65534, 65534, "cat", checkout / secret) == (
            1, f"cat: {checkout / secret}: Permission denied")
        assert as_account(1, 1, "cat", checkout / secret) == (0, "")
    assert as_account(65534, 65534, "ls", checkout)[0] != 0 and as_account(1, 1, "ls", checkout)[0] == 0
    undo(term)
    assert modes(*entries) == before and term.closed == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a hub's prepare runs as root (groups, owners, other accounts)")
def test_an_instructors_group_that_holds_another_account_leaves_the_checkout_as_it_was(reachable, monkeypatch):
    """The checkout goes to the instructor's group: where a student is in it too (a group `users` of all),
    prepare refuses in one line before changing anything."""
    import grp

    from autograder.course import CourseError
    from autograder.hub.prepare import Term as HubTerm, close_the_checkout

    checkout = reachable / "checkout"
    (checkout / "solutions").mkdir(parents=True)
    before = modes(checkout, checkout / "solutions")
    monkeypatch.setattr(grp, "getgrgid", lambda gid: grp.struct_group(("daemon", "x", gid, ["daemon", "ada"])))
    term = HubTerm(state=str(reachable / "term"), instructor="daemon")
    with pytest.raises(CourseError) as refused:
        close_the_checkout(term, checkout)
    assert str(refused.value) == ("the instructor daemon's group daemon also holds ada, and the checkout is given "
                                  "to it: give the instructor a group of their own")
    assert modes(checkout, checkout / "solutions") == before and term.closed == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a hub's prepare runs as root (owners of the exchange's folders)")
def test_the_exchange_holds_the_courses_folders_as_the_instructors_with_nbgraders_modes(reachable):
    from autograder.hub.prepare import Term as HubTerm, make_exchange

    term = HubTerm(state=str(reachable / "term"), instructor="daemon")
    make_exchange(term)
    make_exchange(term)   # a second prepare reuses them
    course = term.exchange / "attention"
    assert modes(term.exchange, course, course / "outbound", course / "inbound", course / "feedback") == [
        ("0o1777", 0, 0), ("0o755", 1, 1), ("0o755", 1, 1), ("0o2733", 1, 1), ("0o711", 1, 1)]


@pytest.mark.skipif(os.geteuid() != 0, reason="a hub's prepare runs as root (owners of the exchange's folders)")
@pytest.mark.parametrize("planted", ["the course's folder", "a link", "its inbound"])
def test_a_course_folder_another_account_made_first_stops_the_hub_in_one_line(reachable, planted):
    """Before the instructor's first release, another account (uid 4242) made the course's folder in the
    exchange (or a link to its own, or inbound in it): nbgrader would refuse the instructor's release and
    serve what it planted. prepare refuses in one line, and the exchange stays closed to others."""
    from autograder.course import CourseError
    from autograder.hub.prepare import Term as HubTerm, make_exchange

    term = HubTerm(state=str(reachable / "term"), instructor="daemon")
    course = term.exchange / "attention"
    term.exchange.mkdir(parents=True)
    term.exchange.chmod(0o1777)
    owned = {"the course's folder": course, "a link": course, "its inbound": course / "inbound"}[planted]
    if planted == "a link":
        (reachable / "theirs").mkdir()
        course.symlink_to(reachable / "theirs")
    else:
        (owned / "outbound" / ASSIGNMENT).mkdir(parents=True)
        if planted == "its inbound":
            os.chown(course, 1, 1)
    os.chown(owned, 4242, 4242, follow_symlinks=False)
    with pytest.raises(CourseError) as refused:
        make_exchange(term)
    assert str(refused.value) == (f"{owned} is uid 4242's, not a folder of the instructor daemon's: made before "
                                  "the course's first release, it would hold the course's releases; remove it, "
                                  "then start the hub again")
    assert modes(term.exchange)[0][0] == "0o755"
