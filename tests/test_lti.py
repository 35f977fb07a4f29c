"""lms-push against an LTI 1.3 platform on loopback (tests/lti_platform.py, lti1p3platform inside).

A part of the sample class is graded once; the tests push its final scores through the command
line, as an instructor does, and compare the platform's gradebook with grades.csv."""

import csv
import json
import subprocess

import pytest
import yaml
from nbgrader.api import Gradebook

from tests.conftest import run_grader
from tests.lti_platform import INSTRUCTOR, LEARNER, Platform
from tests.notebooks import COURSE, ROOT
from tests.sample_class import SUBMITTED

STUDENTS = ("ada_perfect", "cara_no_scaling", "dev_wrong_axes", "eli_three_d_only")
ASSIGNMENTS = ("masks", "scaled_attention")
MASKS = COURSE.assignment("masks").max_score   # ada_perfect's score there, whatever course.yml gives it


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(output folder, gradebook URL) of four students' masks and scaled_attention, graded once."""
    folder = tmp_path_factory.mktemp("graded")
    db = f"sqlite:///{folder / 'gradebook.db'}"
    process = run_grader("grade-class", "--submitted", SUBMITTED, "--out", folder / "out", "--db", db,
                         "--autograded", folder / "autograded",
                         *[arg for student in STUDENTS for arg in ("--student", student)],
                         *[arg for assignment in ASSIGNMENTS for arg in ("--assignment", assignment)])
    assert process.returncode == 0, process.stderr
    return folder, db


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    """The tool's key pair, made by lms-keys as an instructor makes it: (private key path, JWKS)."""
    path = tmp_path_factory.mktemp("keys") / "lti-private-key.pem"
    process = run_grader("lms-keys", "--out", path)
    assert process.returncode == 0, process.stderr
    text = process.stdout
    jwks = json.loads(text[text.index("{"):text.index("Moodle takes")])
    assert "-----BEGIN PUBLIC KEY-----" in text
    assert oct(path.stat().st_mode & 0o777) == "0o600" and "PRIVATE KEY" in path.read_text()
    assert [key["alg"] for key in jwks["keys"]] == ["RS256"] and "d" not in jwks["keys"][0]  # public only
    return path, jwks


def learner(student, **extra):
    return {"user_id": f"lms-{student}", "roles": [LEARNER], "email": f"{student}@uni.example",
            "name": student.replace("_", " "), "status": "Active", **extra}


@pytest.fixture
def platform(key):
    members = [learner(student) for student in STUDENTS]
    members += [{"user_id": "lms-tia", "roles": [INSTRUCTOR], "email": "tia_teacher@uni.example", "name": "Tia"},
                learner("zoe_not_in_roster")]
    running = Platform(tool_jwks=key[1], members=members).start()
    yield running
    running.stop()


@pytest.fixture
def course_copy(graded, tmp_path):
    """A copy of the graded output (each test may change its scores) and its gradebook, the roster
    (one teaching assistant who is no learner in the LMS, one student the LMS does not know)."""
    folder, _ = graded
    out = tmp_path / "out"
    subprocess.run(["cp", "-r", folder / "out", out], check=True)
    subprocess.run(["cp", folder / "gradebook.db", tmp_path / "gradebook.db"], check=True)
    roster = tmp_path / "roster.csv"
    with open(roster, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", "name", "email"])
        for student in (*STUDENTS, "tia_teacher", "yan_dropped"):
            writer.writerow([student, student, f"{student}@uni.example"])
    return out, f"sqlite:///{tmp_path / 'gradebook.db'}", roster


def push(platform, key, course_copy, *extra, config_extra=None):
    out, db, roster = course_copy
    config = out.parent / "lti.yml"
    config.write_text(yaml.safe_dump(platform.configuration_file(key[0], **(config_extra or {}))))
    return run_grader("lms-push", "--config", config, "--roster", roster, "--out", out, "--db", db, *extra)


def final_scores(out):
    with open(out / "grades.csv") as handle:
        return {(row["assignment"], f"lms-{row['student']}"): float(row["final_score"]) for row in csv.DictReader(handle)}


def test_a_push_gives_the_platform_the_scores_of_grades_csv(platform, key, course_copy):
    process = push(platform, key, course_copy)
    assert process.returncode == 0, process.stderr
    out = course_copy[0]
    assert platform.gradebook() == final_scores(out)   # every student, every assignment, the same numbers
    assert len(platform.scores) == len(STUDENTS) * len(ASSIGNMENTS)
    assert {item["resourceId"]: item["scoreMaximum"] for item in platform.lineitems.values()} == \
        {assignment: COURSE.assignment(assignment).max_score for assignment in ASSIGNMENTS}
    assert "lms-tia" not in {score["userId"] for _, score in platform.scores}   # an instructor gets nothing
    assert [form["scope"].split() for form in platform.token_requests] == [[
        "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem", "https://purl.imsglobal.org/spec/lti-ags/scope/score",
        "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly"]]
    assert {score["activityProgress"] for _, score in platform.scores} == {"Completed"}
    assert {score["gradingProgress"] for _, score in platform.scores} == {"FullyGraded"}
    assert "tia_teacher: not sent (not a learner of the LMS course)" in process.stdout
    assert "yan_dropped: not sent (no member of the LMS course has email yan_dropped@uni.example)" in process.stdout
    assert "Sent 8 score(s) to https://lms.example.edu; 0 unchanged since the last push; " \
           "line items created: scaled_attention, masks." in process.stdout
    assert ("GET", "/api/lti/courses/7/names_and_roles", 200) in platform.log   # pages of members, followed
    assert sum(1 for entry in platform.log if entry[1] == "/api/lti/courses/7/names_and_roles") == 3


def test_only_changed_scores_go_again_a_manual_score_and_a_late_penalty(platform, key, course_copy):
    assert push(platform, key, course_copy).returncode == 0
    again = push(platform, key, course_copy)
    assert again.returncode == 0 and "Sent 0 score(s)" in again.stdout and "8 unchanged" in again.stdout
    out, db, _ = course_copy
    with Gradebook(db) as gradebook:
        grade = gradebook.find_submission("masks", "ada_perfect").notebooks[0].grades[0]
        grade.manual_score = (grade.auto_score or 0) - 2
        gradebook.find_submission("scaled_attention", "cara_no_scaling").notebooks[0].late_submission_penalty = 3.0
        gradebook.db.commit()
    before = platform.gradebook()
    received = len(platform.scores)
    third = push(platform, key, course_copy)
    assert third.returncode == 0, third.stderr
    sent = [(platform.lineitems[item]["resourceId"], score["userId"]) for item, score in platform.scores[received:]]
    assert sorted(sent) == [("masks", "lms-ada_perfect"), ("scaled_attention", "lms-cara_no_scaling")]
    book = final_scores(out)
    assert platform.gradebook() == book
    assert book["masks", "lms-ada_perfect"] == MASKS - 2
    assert book["scaled_attention", "lms-cara_no_scaling"] == before["scaled_attention", "lms-cara_no_scaling"] - 3
    assert len(push(platform, key, course_copy, "--force").stdout.split("Sent 8 score(s)")) == 2


def test_a_dry_run_needs_no_network_and_says_what_would_go(platform, key, course_copy):
    """A dry run reads the roster and the state file only: the platform hears nothing, even with the
    key missing; it lists every roster row, then, after a push, only what changed."""
    out, db, _ = course_copy
    process = push(platform, (out / "no-such-key.pem", key[1]), course_copy, "--dry-run")
    assert process.returncode == 0, process.stderr
    assert f"would send ada_perfect masks: {MASKS:g} / {MASKS:g} (not pushed before)" in process.stdout
    assert f"would send yan_dropped masks: 0 / {MASKS:g} (not pushed before)" in process.stdout
    rows = (len(STUDENTS) + 2) * len(ASSIGNMENTS)
    assert f"Would send {rows} score(s) to https://lms.example.edu; 0 unchanged since the last push." in process.stdout
    assert platform.log == [] and platform.token_requests == [] and platform.scores == []
    assert not (out / "lms-pushed.json").exists()
    assert push(platform, key, course_copy).returncode == 0
    heard = len(platform.log)
    with Gradebook(db) as gradebook:
        grade = gradebook.find_submission("masks", "ada_perfect").notebooks[0].grades[0]
        grade.manual_score = (grade.auto_score or 0) - 2
        gradebook.db.commit()
    again = push(platform, key, course_copy, "--dry-run")
    assert f"would send ada_perfect masks: {MASKS - 2:g} / {MASKS:g} (was {MASKS:g})" in again.stdout
    sent = len(STUDENTS) * len(ASSIGNMENTS)
    assert f"Would send {rows - sent + 1} score(s)" in again.stdout and f"{sent - 1} unchanged" in again.stdout
    assert len(platform.log) == heard


def test_faults_retried_where_it_helps_and_one_line_per_student_otherwise(platform, key, course_copy):
    platform.fault("scores", 503, times=2)                              # twice, then fine
    platform.fault("scores", 429, retry_after="1")                     # rate limited once
    platform.fault("members", 0, delay=2.5)                            # one answer slower than the timeout
    platform.fault("scores", 422, times=99, user="lms-dev_wrong_axes")  # refused for good (Canvas: not a student)
    process = push(platform, key, course_copy, config_extra={"timeout": 1, "retries": 3})
    assert process.returncode == 1
    assert process.stderr.splitlines() == [
        "dev_wrong_axes/scaled_attention: not sent: 422 Unprocessable Entity: queued fault 422",
        "dev_wrong_axes/masks: not sent: 422 Unprocessable Entity: queued fault 422",
        "2 not sent: run the same command again once fixed (only what was not sent goes)."]
    book = final_scores(course_copy[0])
    assert platform.gradebook() == {key: value for key, value in book.items() if key[1] != "lms-dev_wrong_axes"}
    platform.faults.clear()
    received = len(platform.scores)
    process = push(platform, key, course_copy)
    assert process.returncode == 0, process.stderr
    assert sorted(score["userId"] for _, score in platform.scores[received:]) == ["lms-dev_wrong_axes"] * 2
    assert platform.gradebook() == book


def test_a_platform_down_stops_with_one_line_and_nothing_is_lost(platform, key, course_copy):
    platform.fault("scores", 500, times=99)
    process = push(platform, key, course_copy, config_extra={"retries": 0})
    assert process.returncode == 1
    assert process.stderr.splitlines()[0] == "ada_perfect/scaled_attention: not sent: 500 Internal Server Error: queued fault 500"
    assert platform.scores == []
    platform.faults.clear()
    assert push(platform, key, course_copy).returncode == 0 and platform.gradebook() == final_scores(course_copy[0])


def test_a_wrong_key_gets_one_line_naming_the_fix(platform, key, course_copy, tmp_path):
    other = tmp_path / "other-key.pem"
    assert run_grader("lms-keys", "--out", other).returncode == 0
    process = push(platform, (other, key[1]), course_copy)
    assert process.returncode == 2
    line, = process.stderr.splitlines()
    assert line.startswith("error: the platform refused the tool's token request (401 Unauthorized: "
                           "client assertion refused: ")
    assert line.endswith("check client_id and token_url, and that the JWKS make lms-keys printed is the one "
                         "registered in the LMS")


def test_the_private_key_is_refused_where_others_can_read_it(platform, key, course_copy, tmp_path):
    loose = tmp_path / "loose.pem"
    loose.write_bytes(key[0].read_bytes())
    loose.chmod(0o644)
    process = push(platform, (loose, key[1]), course_copy)
    assert (process.returncode, process.stderr.strip()) == (
        2, f"error: the private key {loose} can be read by others (mode 644): chmod 600 {loose}")
    inside = ROOT / "sample_class" / "lti-key-test.pem"
    try:
        inside.write_bytes(key[0].read_bytes())
        inside.chmod(0o600)
        process = push(platform, (inside, key[1]), course_copy)
    finally:
        inside.unlink()
    assert process.returncode == 2 and "lies inside the course repository: move it out" in process.stderr
    assert run_grader("lms-keys", "--out", key[0]).returncode == 2   # never over an existing key


def test_ambiguous_matches_are_refused(key, course_copy):
    members = [learner(student) for student in STUDENTS]
    members.append(learner("ada_twin", email="ada_perfect@uni.example"))   # two learners with one email
    platform = Platform(tool_jwks=key[1], members=members).start()
    try:
        process = push(platform, key, course_copy)
    finally:
        platform.stop()
    assert process.returncode == 1
    assert "ada_perfect: not sent (2 members of the LMS course have email ada_perfect@uni.example: ambiguous)" \
        in process.stderr
    assert "lms-ada_perfect" not in {score["userId"] for _, score in platform.scores}
    assert len(platform.scores) == 6


def test_the_make_targets_forward_their_variables():
    dry = subprocess.run(["make", "-n", "lms-push", "ROSTER=r.csv", "LTI=lti.yml", "ASSIGNMENT=masks", "DRY_RUN=1",
                          "FORCE=1"], cwd=ROOT, capture_output=True, text=True)
    assert "-m autograder lms-push --config lti.yml --roster r.csv --out grading --db sqlite:///" in dry.stdout
    assert "--assignment masks --dry-run --force" in dry.stdout
    assert "lms-keys --out" in subprocess.run(["make", "-n", "lms-keys", "KEY=k.pem"], cwd=ROOT, capture_output=True,
                                              text=True).stdout


def test_faults_mid_push_then_the_push_again_send_each_score_once(platform, key, course_copy):
    """429 with Retry-After, 500 and a connection dropped after the platform took the score, each past
    the retries, and the first line item's answer lost: the push stops with one line each; the push
    again sends only those, a lost answer's score again as the same update (its first timestamp).  The
    platform ends with every score once, at its value, and a third push sends nothing."""
    platform.fault("lineitems", method="POST", drop=True)                      # created; its answer lost
    platform.fault("scores", 429, times=2, retry_after="1", user="lms-cara_no_scaling")
    platform.fault("scores", 500, times=2, user="lms-dev_wrong_axes")
    platform.fault("scores", drop=True, times=2, user="lms-eli_three_d_only")  # taken twice, answered never
    out = course_copy[0]
    first = push(platform, key, course_copy, config_extra={"retries": 1, "timeout": 5})
    assert first.returncode == 1
    lines = first.stderr.splitlines()
    assert len(lines) == 4 and lines[-1] == "3 not sent: run the same command again once fixed (only what was not " \
                                           "sent goes)."
    assert lines[0].startswith("cara_no_scaling/") and lines[0].endswith(": not sent: 429 Too Many Requests: queued "
                                                                         "fault 429")
    assert lines[1].startswith("dev_wrong_axes/") and lines[1].endswith(": not sent: 500 Internal Server Error: "
                                                                        "queued fault 500")
    assert lines[2].startswith("eli_three_d_only/") and lines[2].endswith(": not sent: no answer from "
                                                                          f"{platform.token_url.split('/')[2]} "
                                                                          "(RemoteProtocolError)")
    assert len(platform.lineitems) == len(ASSIGNMENTS)   # the lost answer's line item found again, not made twice
    state = json.loads((out / "lms-pushed.json").read_text())
    unconfirmed = {(assignment, student) for assignment, records in state.items()
                   for student, record in records.items() if not record["confirmed"]}
    assert {student for _, student in unconfirmed} == {"cara_no_scaling", "dev_wrong_axes", "eli_three_d_only"}
    received = len(platform.scores)

    again = push(platform, key, course_copy)
    assert again.returncode == 0, again.stderr
    assert "Sent 3 score(s) to https://lms.example.edu; 5 unchanged since the last push (FORCE=1 sends them " \
           "again); 3 of them sent again as the same update" in again.stdout
    resent = platform.scores[received:]
    assert sorted(score["userId"] for _, score in resent) == ["lms-cara_no_scaling", "lms-dev_wrong_axes",
                                                               "lms-eli_three_d_only"]
    book = final_scores(out)
    assert platform.gradebook() == book                                    # none lost, each at its value
    updates = [(platform.lineitems[item]["resourceId"], score["userId"]) for item, score in platform.updates]
    assert sorted(updates) == sorted(book)                                 # each score counted once
    eli = [score for _, score in platform.scores if score["userId"] == "lms-eli_three_d_only"]
    assert len(eli) == len(ASSIGNMENTS) + 2 and len({(s["timestamp"], s["scoreGiven"]) for s in eli}) == 2
    third = push(platform, key, course_copy)
    assert third.returncode == 0 and "Sent 0 score(s)" in third.stdout and "8 unchanged" in third.stdout
    assert len(platform.updates) == len(book)


def test_a_grader_fault_is_held_back_from_the_csv_exports_and_the_push(platform, key, tmp_path):
    """grades.csv as published (written here): a grader fault (status "grader fault", its score cells
    empty) and a row without a final score are never sent, nor made 0; the rest goes as before."""
    from autograder import lms, lti
    from autograder.render import CSV_FIELDS
    from autograder.files import write_csv
    masks, scaled = COURSE.assignment("masks"), COURSE.assignment("scaled_attention")
    row = dict.fromkeys(CSV_FIELDS, "") | {"manual": "0", "seconds_late": "0", "status": "graded"}
    write_csv(tmp_path / "grades.csv", CSV_FIELDS, [
        row | {"student": "ada_perfect", "assignment": "masks", "score": f"{MASKS:g}", "final_score": f"{MASKS:g}"},
        row | {"student": "ada_perfect", "assignment": "scaled_attention", "score": "3", "final_score": "3"},
        row | {"student": "cara_no_scaling", "assignment": "masks", "status": "grader fault",
               "reason": "masks: the grader failed: the sandbox was killed (SIGKILL)", "flags": "masks: reaches into torch"},
        row | {"student": "cara_no_scaling", "assignment": "scaled_attention", "score": "2", "final_score": "2"},
        row | {"student": "dev_wrong_axes", "assignment": "masks", "score": "1"},   # no final score
        row | {"student": "eli_three_d_only", "assignment": "scaled_attention", "score": "1", "final_score": "1"}])
    scores, held = lms.final_scores(COURSE, tmp_path / "grades.csv")
    assert held == [("cara_no_scaling", "masks", "a grader fault, not the student's score: masks: the grader failed: "
                     "the sandbox was killed (SIGKILL); the next make grade grades it again"),
                    ("dev_wrong_axes", "masks", "grades.csv holds no final score for it")]
    assert scores == {"masks": {"ada_perfect": (MASKS, MASKS), "cara_no_scaling": None, "dev_wrong_axes": None,
                                "eli_three_d_only": (0.0, MASKS)},   # eli handed in no masks: 0, as before
                      "scaled_attention": {"ada_perfect": (3.0, scaled.max_score), "cara_no_scaling": (2.0, scaled.max_score),
                                           "dev_wrong_axes": (0.0, scaled.max_score),
                                           "eli_three_d_only": (1.0, scaled.max_score)}}
    roster = {student: {"student": student, "email": f"{student}@uni.example", **dict.fromkeys(
        ("name", "sis_user_id", "sis_login_id", "section", "lms_user_id"), "")} for student in STUDENTS}
    files, _ = lms.exports(COURSE, scores, roster)
    canvas = {line[3]: line for line in csv.reader(files["canvas.csv"].splitlines())}
    column = canvas["SIS Login ID"].index(masks.title)
    assert [canvas[s][column] for s in STUDENTS] == [f"{MASKS:g}", "", "", "0"]
    moodle = {line["Username"]: line for line in csv.DictReader(files["moodle.csv"].splitlines())}
    assert [moodle[s][masks.title] for s in STUDENTS] == [f"{MASKS:g}", "", "", "0"]
    config = tmp_path / "lti.yml"
    config.write_text(yaml.safe_dump(platform.configuration_file(key[0])))
    outcome = lti.push(COURSE, lti.load_platform(config), lti.read_private_key(key[0], ROOT), scores, roster, tmp_path)
    assert outcome.failed == [] and len(outcome.sent) == 6
    assert platform.gradebook() == {("masks", "lms-ada_perfect"): MASKS, ("masks", "lms-eli_three_d_only"): 0.0,
                                    ("scaled_attention", "lms-ada_perfect"): 3.0,
                                    ("scaled_attention", "lms-cara_no_scaling"): 2.0,
                                    ("scaled_attention", "lms-dev_wrong_axes"): 0.0,
                                    ("scaled_attention", "lms-eli_three_d_only"): 1.0}
    would = []
    lti.dry_run(COURSE, scores, roster, tmp_path, force=True, say=would.append)
    assert not [line for line in would if "cara_no_scaling masks" in line or "dev_wrong_axes masks" in line]
    assert len(would) == 6


def test_a_submission_the_grader_failed_on_is_held_back_then_sent_once_regraded(platform, key, course_copy):
    """As an instructor meets it: cara's masks was a grader fault (its record says so), the rest graded.
    make lms leaves her cell empty and make lms-push sends nothing for it, each saying so; once it is
    graded again, the next push sends that score and nothing else."""
    out, db, roster = course_copy
    record_path = out / "results" / "cara_no_scaling" / "masks" / "grade.json"
    graded = record_path.read_text()
    record = json.loads(graded)
    for notebook in record["notebooks"]:
        notebook["fault"] = "the sandbox was killed (SIGKILL)"
    record_path.write_text(json.dumps(record))
    held = ("cara_no_scaling/masks: held back, {} (a grader fault, not the student's score: masks: the grader failed: "
            "the sandbox was killed (SIGKILL); the next make grade grades it again)")
    exported = run_grader("export-lms", "--out", out, "--roster", roster, "--db", db)
    assert exported.returncode == 0, exported.stderr
    assert held.format("its cell left empty") in exported.stdout.splitlines()
    with open(out / "grades.csv") as handle:
        row, = [row for row in csv.DictReader(handle) if (row["student"], row["assignment"]) == ("cara_no_scaling", "masks")]
    assert (row["status"], row["final_score"]) == ("grader fault", "")
    with open(out / "canvas.csv") as handle:
        canvas = {line[3]: line for line in csv.reader(handle)}
    column = canvas["SIS Login ID"].index(COURSE.assignment("masks").title)
    assert canvas["cara_no_scaling"][column] == "" and canvas["ada_perfect"][column] == f"{MASKS:g}"
    process = push(platform, key, course_copy)
    assert process.returncode == 0, process.stderr
    assert held.format("not sent") in process.stdout.splitlines()
    assert "Sent 7 score(s)" in process.stdout and "; 1 held back" in process.stdout
    assert ("masks", "lms-cara_no_scaling") not in platform.gradebook() and len(platform.scores) == 7
    record_path.write_text(graded)                                    # graded again: her score now
    received = len(platform.scores)
    again = push(platform, key, course_copy)
    assert again.returncode == 0 and "held back" not in again.stdout and "Sent 1 score(s)" in again.stdout
    assert [(platform.lineitems[item]["resourceId"], score["userId"]) for item, score in platform.scores[received:]] \
        == [("masks", "lms-cara_no_scaling")]
    assert platform.gradebook() == final_scores(out)
