"""Past one machine: shards of a class, merged, give what one run gives."""

from nbgrader.api import Gradebook

from tests.conftest import run_grader
from tests.sample_class import SUBMITTED

ONLY = ["--assignment", "attention_basics", "--assignment", "kv_cache", "--jobs", "1"]


def grade(out, *extra):
    process = run_grader("grade-class", "--submitted", SUBMITTED, "--out", out, "--db",
                         f"sqlite:///{out / 'gradebook.db'}", "--autograded", out / "autograded", *ONLY, *extra)
    assert process.returncode == 0, process.stderr
    return process.stdout


def test_merged_shards_equal_one_run(tmp_path):
    grade(tmp_path / "whole")
    shards = [tmp_path / f"shard-{k}" for k in (1, 2)]
    graded = [grade(shard, "--shard", f"{k}/2") for k, shard in enumerate(shards, 1)]
    # Every submission is in exactly one shard.
    counts = [int(stdout.split(" to grade")[0].split()[-1]) for stdout in graded]
    total = sum(1 for line in (tmp_path / "whole" / "grades.csv").read_text().splitlines()[1:])
    assert sum(counts) == total and all(counts)
    merged = tmp_path / "merged"
    process = run_grader("merge", *shards, "--out", merged, "--db", f"sqlite:///{merged / 'gradebook.db'}",
                         "--autograded", merged / "autograded")
    assert process.returncode == 0, process.stderr
    for name in ("grades.csv", "grades_wide.csv"):
        assert (merged / name).read_text() == (tmp_path / "whole" / name).read_text()
    whole_feedback = sorted(p.relative_to(tmp_path / "whole") for p in (tmp_path / "whole" / "feedback").rglob("*.md"))
    assert whole_feedback == sorted(p.relative_to(merged) for p in (merged / "feedback").rglob("*.md"))
    for path in whole_feedback:
        assert (merged / path).read_text() == (tmp_path / "whole" / path).read_text()
    with Gradebook(f"sqlite:///{merged / 'gradebook.db'}") as one, \
            Gradebook(f"sqlite:///{tmp_path / 'whole' / 'gradebook.db'}") as other:
        assert sorted((s["student"], s["score"]) for s in one.submission_dicts("kv_cache")) == \
            sorted((s["student"], s["score"]) for s in other.submission_dicts("kv_cache"))
