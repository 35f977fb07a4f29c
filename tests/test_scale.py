"""Grading past one machine: grade-slurm on a live one-node Slurm cluster (tests/slurm_cluster.py),
Kubernetes' Indexed Job as k8s-manifests writes it, and the shard path under both.

A part of the sample class (six students' masks: one of the four shards holds none of them) is graded
through Slurm as an array of shards and a merge, and compared, file by file, with one grade-class of
the same part on this machine: grades.csv, the wide export, every feedback file and the gradebook.
"""

import copy
import csv
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from nbgrader.api import Gradebook

from autograder.classrun.tasks import Task, in_shard
from autograder.scale import kubernetes
from tests.conftest import run_grader
from tests.notebooks import COURSE, ROOT
from tests.sample_class import SUBMITTED
from tests import slurm_cluster

STUDENTS = ("ada_perfect", "ben_untouched", "cara_no_scaling", "dev_wrong_axes", "hal_corrupt", "kim_mask_bugs")
PART = [arg for student in STUDENTS for arg in ("--student", student)] + ["--assignment", "masks"]


@pytest.fixture(scope="module")
def slurm():
    """The environment of a running cluster: this machine's own, started for these tests."""
    reason = slurm_cluster.why_not()
    if reason:
        pytest.skip(f"no Slurm cluster can be started here: {reason}")
    with slurm_cluster.cluster() as env:
        yield env


@pytest.fixture(scope="module")
def one_machine(tmp_path_factory):
    """The same part of the class graded by grade-class on this machine: the result to equal."""
    out = tmp_path_factory.mktemp("one-machine")
    process = run_grader("grade-class", "--submitted", SUBMITTED, "--out", out / "out", "--db",
                         f"sqlite:///{out / 'gradebook.db'}", "--autograded", out / "autograded", *PART)
    assert process.returncode == 0, process.stderr
    return out


def grade_slurm(folder, env, *extra, shards=4, wait=True, popen=False):
    args = [sys.executable, "-m", "autograder", "grade-slurm", "--submitted", str(SUBMITTED), "--out",
            str(folder / "out"), "--db", f"sqlite:///{folder / 'gradebook.db'}", "--autograded",
            str(folder / "autograded"), "--shards", str(shards), "--poll", "0.5", *PART, *extra]
    args += ["--wait"] if wait else []
    if popen:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def gradebook_scores(db):
    with Gradebook(db) as gradebook:
        return {(submission.student.id, submission.assignment.name): (submission.score, submission.max_score)
                for assignment in gradebook.assignments for submission in assignment.submissions}


def assert_same_as_one_machine(folder, one_machine):
    ours, theirs = folder / "out", one_machine / "out"
    for name in ("grades.csv", "grades_wide.csv"):
        assert (ours / name).read_text() == (theirs / name).read_text(), name
    compared = filecmp.dircmp(ours / "feedback", theirs / "feedback")
    files = sorted(p.relative_to(theirs / "feedback") for p in (theirs / "feedback").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(ours / "feedback") for p in (ours / "feedback").rglob("*") if p.is_file())
    for path in files:
        assert (ours / "feedback" / path).read_bytes() == (theirs / "feedback" / path).read_bytes(), path
    assert compared.left_only == compared.right_only == []
    assert gradebook_scores(f"sqlite:///{folder / 'gradebook.db'}") == \
        gradebook_scores(f"sqlite:///{one_machine / 'gradebook.db'}")
    with open(ours / "grades.csv") as handle:
        assert {row["student"] for row in csv.DictReader(handle)} == set(STUDENTS)


def records(folder):
    return sorted(path.parent.relative_to(folder / "results") for path in (folder / "results").glob("*/*/grade.json"))


@pytest.mark.slow
def test_shards_killed_mid_run_resume_and_merge_to_what_one_machine_gives(slurm, one_machine, tmp_path):
    """An array of 4 shards (shard 1 holds none of the six students) and the merge. Shard 4 (ada and
    dev) is cancelled after its first grade: the command fails, naming it, its log and the way on;
    the merge never runs; what was graded is kept. The same command again grades only what is
    missing and merges: grades.csv, the wide export, the feedback and the gradebook equal one machine's."""
    assert not any(in_shard(Task(student, "masks", ""), (1, 4)) for student in STUDENTS)   # an empty shard
    waiting = grade_slurm(tmp_path, slurm, popen=True)
    submitted = waiting.stdout.readline()
    assert re.search(r"Submitted 4 shard\(s\) as Slurm array job \d+ .* merge as job \d+", submitted)
    array = re.search(r"array job (\d+)", submitted).group(1)
    shard = tmp_path / "out" / "shards" / "shard-4"
    deadline = time.monotonic() + 300
    while not (shard / "results").is_dir() or not records(shard):
        assert time.monotonic() < deadline and waiting.poll() is None, waiting.communicate()
        time.sleep(0.1)
    subprocess.run(["scancel", f"{array}_4"], env=slurm, check=True)
    stdout, stderr = waiting.communicate(timeout=300)
    assert waiting.returncode == 1, stdout + stderr
    log = tmp_path / "out" / "slurm" / "shard-4.log"
    assert "shard 1/4 finished: 0 submission(s)" in stdout
    assert "nothing to grade" in (tmp_path / "out" / "slurm" / "shard-1.log").read_text()
    assert "shard 4/4 failed (CANCELLED" in stderr and str(log) in stderr
    assert "The merge did not run" in stderr and "run the same command again" in stderr
    assert not (tmp_path / "out" / "grades.csv").exists() and not (shard / "shard.json").exists()
    kept = records(shard)
    assert 1 <= len(kept) <= 2

    process = grade_slurm(tmp_path, slurm)
    assert process.returncode == 0, process.stderr
    assert "Merged 4 shard(s): 6 submissions" in process.stdout
    first = log.read_text().splitlines()[0]   # only what was missing is graded again
    assert first.startswith(f"{2 - len(kept)} submission(s) of" if len(kept) < 2 else "Nothing to grade")
    assert (tmp_path / "out" / "slurm" / "shard-3.log").read_text().startswith(
        "Nothing to grade; 2 unchanged since graded")
    assert_same_as_one_machine(tmp_path, one_machine)


@pytest.mark.slow
def test_a_job_sbatch_refuses_gets_one_line(slurm, tmp_path):
    process = grade_slurm(tmp_path, slurm, "--partition", "no_such_partition")
    assert process.returncode == 2
    assert process.stderr.strip() == "error: sbatch refused: sbatch: error: Batch job submission failed: " \
                                     "Invalid partition name specified"
    assert subprocess.run(["squeue", "-h"], env=slurm, capture_output=True, text=True).stdout.strip() == ""


def test_without_sbatch_the_command_says_where_to_run_it(tmp_path):
    process = run_grader("grade-slurm", "--submitted", SUBMITTED, "--out", tmp_path / "out", "--shards", "2",
                         env={"PATH": str(Path(sys.executable).parent)})
    assert process.returncode == 2
    assert process.stderr.strip() == "error: sbatch is not on PATH: run this on a Slurm login node " \
                                     "(or use make grade on one machine)"


# -- the shard path itself, as Kubernetes' pods run it -----------------------------------------------

@pytest.fixture(scope="module")
def pod_shards(tmp_path_factory):
    """ada_perfect's masks graded by the four pods of the Indexed Job k8s-manifests writes, each
    command run by a shell as the pod's container runs it (JOB_COMPLETION_INDEX 0 to 3): shards 1
    to 3 hold nothing.  ([the Job, the NetworkPolicy], [the merge Job], the shard folders, stdouts)."""
    folder = tmp_path_factory.mktemp("pods")
    shards, merge = kubernetes.manifests(name="grade", shards=4, image="course:1", claim="course", mount=str(ROOT),
                                         submitted=str(SUBMITTED), out=str(folder / "out"),
                                         gradebook=str(folder / "gradebook.db"), autograded=str(folder / "autograded"),
                                         selection=["--assignment", "masks", "--student", "ada_perfect"])
    assert list(yaml.safe_load_all(kubernetes.to_yaml(shards + merge))) == shards + merge
    command = shards[0]["spec"]["template"]["spec"]["containers"][0]["command"]
    stdouts = []
    for index in range(4):
        process = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                                 env={**os.environ, "JOB_COMPLETION_INDEX": str(index)})
        assert process.returncode == 0, process.stderr
        stdouts.append(process.stdout)
    return shards, merge, [folder / "out" / "shards" / f"shard-{k}" for k in (1, 2, 3, 4)], stdouts


@pytest.mark.slow   # the shards of an Indexed Job graded as its pods would: make test-all
def test_kubernetes_manifests_grade_the_same_shards(pod_shards):
    (job, policy), (merge,), folders, _ = pod_shards
    assert (job["kind"], job["spec"]["completionMode"], job["spec"]["completions"]) == ("Job", "Indexed", 4)
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    assert pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "HOME", "value": "/tmp"} in pod["containers"][0]["env"]   # the grader's cache: the pod's /tmp
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "course"
    assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == str(ROOT) == pod["containers"][0]["workingDir"]
    assert (policy["kind"], policy["spec"]["ingress"], policy["spec"]["egress"]) == ("NetworkPolicy", [], [])
    assert policy["spec"]["podSelector"]["matchLabels"] == job["spec"]["template"]["metadata"]["labels"]
    assert [json.loads((folder / "shard.json").read_text())["shard"] for folder in folders] == \
        [[k, 4] for k in (1, 2, 3, 4)]
    process = subprocess.run(merge["spec"]["template"]["spec"]["containers"][0]["command"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    with open(folders[0].parent.parent / "grades.csv") as handle:
        full = COURSE.assignment("masks").max_score
        assert [(row["student"], row["score"]) for row in csv.DictReader(handle)] == [("ada_perfect", f"{full:g}")]
    assert gradebook_scores(f"sqlite:///{folders[0].parent.parent.parent / 'gradebook.db'}") == \
        {("ada_perfect", "masks"): (full, full)}


@pytest.mark.slow   # the shards of an Indexed Job graded as its pods would: make test-all
def test_an_empty_shard_succeeds_and_merge_takes_only_whole_runs(pod_shards, tmp_path):
    _, _, folders, stdouts = pod_shards
    for k, stdout in enumerate(stdouts[:3], 1):
        assert stdout.strip() == f"Shard {k}/4 holds none of the class's submissions: nothing to grade."
    assert json.loads((folders[0] / "shard.json").read_text()) == {"shard": [1, 4], "submissions": []}
    folders = [shutil.copytree(folder, tmp_path / folder.name) for folder in folders]

    def merge(*shards):
        return run_grader("merge", *shards, "--out", tmp_path / "merged", "--db",
                          f"sqlite:///{tmp_path / 'merged.db'}", "--autograded", tmp_path / "autograded")
    refused = {
        "error: shard 2 of 4 missing: merge all 4 shards of the run": merge(folders[0], *folders[2:]),
        f"error: shard 3/4 given twice ({folders[2]} and {folders[2]})": merge(*folders, folders[2]),
        f"error: {tmp_path} is not a finished shard (no shard.json): run its grade-class --shard K/N again "
        "(it grades only what is missing)": merge(*folders, tmp_path),
    }
    for line, process in refused.items():
        assert (process.returncode, process.stderr.strip()) == (2, line)
    assert not (tmp_path / "merged").exists()
    shutil.copytree(folders[3] / "results" / "ada_perfect", folders[1] / "results" / "ada_perfect")  # shard 4's
    (folders[1] / "shard.json").write_text(json.dumps({"shard": [2, 4], "submissions": ["ada_perfect/masks"]}))
    overlapping = merge(*folders)
    assert (overlapping.returncode, overlapping.stderr.strip()) == \
        (2, f"error: ada_perfect/masks is in two shards ({folders[1]} and {folders[3]}): merge the shards of one run")
    (folders[1] / "shard.json").write_text(json.dumps({"shard": [2, 4], "submissions": []}))
    process = merge(*folders)
    assert process.returncode == 0, process.stderr
    with open(tmp_path / "merged" / "grades.csv") as handle:
        assert [row["student"] for row in csv.DictReader(handle)] == ["ada_perfect"]


# -- the manifests as a cluster would take them: Kubernetes' own schemas and an admin's policy scanner

IMAGE = "registry.example.edu/attention-course@sha256:" + "5e" * 32   # by digest, as docs/scale.md asks
CHECKOV = ROOT / ".venv" / "checkov" / "bin" / "checkov"                  # make test installs it
# checkov's checks the manifests fail on purpose, each with its reason (docs/scale.md, "What a scanner says")
SKIPPED = {"CKV_K8S_21": "no namespace is written: kubectl apply -n, or the context's, puts the Jobs in the one the "
                         "cluster's admin gave the course"}
UNCONFINED = {("CKV_K8S_31", "Job.default.grade"): "the grading pods' seccomp profile is Unconfined: bubblewrap makes "
                                                   "the student's sandbox from user namespaces and mounts, which the "
                                                   "runtime's default profile refuses; it loads its own filter"}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The two files `make k8s-manifests` writes (its command, as the Makefile runs it)."""
    folder = tmp_path_factory.mktemp("k8s")
    process = run_grader("k8s-manifests", "--shards", "4", "--jobs", "2", "--image", IMAGE, "--claim",
                         "attention-course", "--output", folder / "grading-k8s.yaml")
    assert process.returncode == 0, process.stderr
    return folder, [folder / "grading-k8s.yaml", folder / "grading-k8s-merge.yaml"]


def test_the_manifests_hold_to_the_schemas_of_every_supported_kubernetes(written):
    """kubernetes-validate in strict mode (a field Kubernetes does not know is refused, not ignored), for
    each version docs/scale.md supports."""
    _, files = written
    documents = [doc for file in files for doc in yaml.safe_load_all(file.read_text())]
    assert [(doc["kind"], doc["metadata"]["name"]) for doc in documents] == \
        [("Job", "grade"), ("NetworkPolicy", "grade-no-network"), ("Job", "grade-merge")]
    for version in kubernetes.SUPPORTED:
        for document in documents:
            kubernetes_validate.validate(document, f"{version}.0", strict=True)   # ValidationError otherwise
    typo = copy.deepcopy(documents[0])
    typo["spec"]["backoffLimitPerIndx"] = typo["spec"].pop("backoffLimitPerIndex")
    unknown = copy.deepcopy(documents[0])
    unknown["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRoot"] = True
    for wrong in (typo, unknown):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(wrong, f"{kubernetes.SUPPORTED[-1]}.0", strict=True)


def test_a_policy_scanner_finds_only_what_the_sandbox_needs(written):
    """checkov's Kubernetes checks, as a cluster's admin runs them on the written files: every one
    passes but the skipped and the expected failures above, each with its reason."""
    folder, _ = written
    assert CHECKOV.exists(), "checkov is not installed: make test installs it into .venv/checkov"
    process = subprocess.run([str(CHECKOV), "--directory", str(folder), "--framework", "kubernetes", "--output", "json",
                              "--skip-download", "--skip-check", ",".join(SKIPPED)], capture_output=True, text=True,
                             timeout=300, env={**os.environ, "BC_SKIP_MAPPING": "TRUE"})
    report = json.loads(process.stdout)
    results = report["results"]
    failed = {(check["check_id"], check["resource"]) for check in results["failed_checks"]}
    assert failed == set(UNCONFINED), process.stdout[:2000]
    assert process.returncode == 1   # checkov's own word for a failed check
    ran = {check["check_id"] for check in results["passed_checks"] + results["failed_checks"]}
    assert not ran & set(SKIPPED) and {"CKV_K8S_31", "CKV_K8S_22"} <= ran   # skipped by id, the others run
    passed = {check["check_id"] for check in results["passed_checks"]}
    # what an admin looks for first, passed by both Jobs' pods: non-root with a high UID, a read-only root,
    # no privilege escalation, no capabilities, requests and limits, no token, the image by digest
    assert {"CKV_K8S_23", "CKV_K8S_40", "CKV_K8S_22", "CKV_K8S_20", "CKV_K8S_37", "CKV_K8S_28", "CKV_K8S_10",
            "CKV_K8S_11", "CKV_K8S_12", "CKV_K8S_13", "CKV_K8S_38", "CKV_K8S_43", "CKV_K8S_16"} <= passed
    assert ("CKV_K8S_31", "Job.default.grade-merge") in {(c["check_id"], c["resource"]) for c in results["passed_checks"]}


@pytest.mark.slow
def test_a_shard_whose_job_fails_leaves_its_submissions_grader_faults_when_merged_anyway(slurm, tmp_path):
    """A Slurm job of the array fails (shard 2 of 2 cannot write its results) and the merge is run anyway,
    by hand: shard 1's grade is merged, shard 2's submission is a grader fault (empty scores, never 0,
    nothing in the gradebook), and the merge says so and exits 1."""
    first, second = "cara_no_scaling", "ada_perfect"   # 22 / 22 each on one machine
    assert in_shard(Task(first, "masks", ""), (1, 2)) and in_shard(Task(second, "masks", ""), (2, 2))
    shards = tmp_path / "out" / "shards"
    (shards / "shard-2").mkdir(parents=True)
    (shards / "shard-2" / "results").write_text("a file where the shard's results go: its job fails at its first save")
    process = subprocess.run(
        [sys.executable, "-m", "autograder", "grade-slurm", "--submitted", str(SUBMITTED), "--out", str(tmp_path / "out"),
         "--db", f"sqlite:///{tmp_path / 'gradebook.db'}", "--autograded", str(tmp_path / "autograded"), "--shards", "2",
         "--poll", "0.5", "--assignment", "masks", "--student", first, "--student", second, "--wait"],
        cwd=ROOT, env=slurm, capture_output=True, text=True, timeout=600)
    assert process.returncode == 1 and "shard 2/2 failed (FAILED" in process.stderr, process.stdout + process.stderr
    merged = run_grader("merge", shards / "shard-1", shards / "shard-2", "--out", tmp_path / "out", "--db",
                        f"sqlite:///{tmp_path / 'gradebook.db'}", "--autograded", tmp_path / "autograded")
    assert merged.returncode == 1, merged.stderr
    assert f"{shards / 'shard-2'} did not finish: its submissions without a grade are grader faults" in merged.stderr
    with open(tmp_path / "out" / "grades.csv") as handle:
        rows = {row["student"]: row for row in csv.DictReader(handle)}
    assert (rows[first]["status"], rows[first]["final_score"]) == ("graded", "22")
    assert (rows[second]["status"], rows[second]["score"], rows[second]["final_score"]) == ("grader fault", "", "")
    assert "did not finish" in rows[second]["reason"]
    assert set(gradebook_scores(f"sqlite:///{tmp_path / 'gradebook.db'}")) == {(first, "masks")}
    assert "Not graded yet" in (tmp_path / "out" / "feedback" / second / "masks" / "feedback.md").read_text()
