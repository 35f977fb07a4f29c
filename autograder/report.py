"""Item analysis of a graded class: score distributions, per-test pass rates, suspicious tests.

Reads what `grade-class` wrote (grades.csv and results/<student>/<assignment>/results.json) and
writes report/: scores.png (a histogram per assignment), item_analysis.csv (one row per test)
and report.md (the same, with the tests that nobody or everybody passed).  Submissions that could
not be graded (missing, corrupt) are left out of the pass rates: they say nothing about a test; those
the grader failed on (status "grader fault") are counted apart, in a section of their own.
"""

import json
import statistics
from collections import defaultdict
from pathlib import Path

from autograder.course import CourseError
from autograder.files import write_atomic, write_csv
from autograder.layout import Layout
from autograder.render import read_grades_csv
from autograder.results import GRADER_FAULT


def grade_rows(out):
    grades = Layout(out).grades_csv
    if not grades.is_file():
        raise CourseError(f"no {grades}: run `make grade` first")
    try:
        return read_grades_csv(grades)
    except (OSError, ValueError) as error:
        raise CourseError(f"{grades} cannot be read ({error}): run `make grade` again") from None


def graded_results(out, rows):
    """assignment -> list of (student, results.json dict) for the rows of grades.csv that were graded."""
    by_assignment = defaultdict(list)
    for row in rows:
        if row["status"] != "graded":
            continue
        path = Layout(out).results_json(row["student"], row["assignment"])
        try:
            by_assignment[row["assignment"]].append((row["student"], json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError):
            raise CourseError(f"{path} is missing or unreadable: grade the class again") from None
    return by_assignment


def item_rows(by_assignment):
    rows = []
    for assignment, results in by_assignment.items():
        passed, points = defaultdict(int), {}
        for _, result in results:
            for test in result["tests"]:
                points[test["name"]] = test["max_score"]
                passed[test["name"]] += test["score"] >= test["max_score"]
        for name, max_score in points.items():
            rows.append({"assignment": assignment, "test": name, "points": max_score,
                         "submissions": len(results), "passed": passed[name],
                         "pass_rate": round(passed[name] / len(results), 3)})
    return rows


def plot_scores(by_assignment, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.ticker import MaxNLocator

    assignments = list(by_assignment)
    columns = min(3, len(assignments))
    rows = -(-len(assignments) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(assignments):]:
        ax.set_visible(False)
    for ax, assignment in zip(axes.flat, assignments):
        percents = [100 * r["score"] / r["max_score"] for _, r in by_assignment[assignment] if r["max_score"]]
        ax.hist(percents, bins=10, range=(0, 100), color="tab:blue", edgecolor="white")
        ax.set_title(f"{assignment} (n={len(percents)})", fontsize=10)
        ax.set_xlabel("score (% of max)")
        ax.set_ylabel("submissions")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts are whole submissions
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(by_assignment, rows, flagged=(), faults=()):
    lines = ["# Class report", ""]
    if faults:
        lines += ["## Grader faults", "",
                  f"{len(faults)} submission(s) the grader failed on, through no fault of the student: no score, "
                  "left out of everything below; the next `make grade` grades them again.", ""]
        lines += [f"- {row['student']} / {row['assignment']}: {row['reason']}" for row in faults] + [""]
    if flagged:
        lines += ["## Flagged for the instructor", "",
                  "Code that reaches into torch internals or the grader's guard in an exercise that must be "
                  "written from scratch (scored 0 there):", ""]
        lines += [f"- {row['student']} / {row['assignment']}: {row['flags']}" for row in flagged] + [""]
    for assignment, results in by_assignment.items():
        scores = [r["score"] for _, r in results]
        top = results[0][1]["max_score"] if results else 0
        lines += [f"## {assignment}", "",
                  f"{len(results)} graded submissions; mean {statistics.mean(scores):.1f} / {top:g}, "
                  f"median {statistics.median(scores):g}.", "",
                  "| test | points | passed | pass rate |", "|---|---|---|---|"]
        mine = [row for row in rows if row["assignment"] == assignment]
        for row in sorted(mine, key=lambda row: row["pass_rate"]):
            lines.append(f"| {row['test']} | {row['points']:g} | {row['passed']}/{row['submissions']} | "
                         f"{row['pass_rate']:.0%} |")
        nobody = [row["test"] for row in mine if row["passed"] == 0]
        everybody = [row["test"] for row in mine if row["passed"] == row["submissions"]]
        lines += ["", "Nobody passed: " + (", ".join(nobody) or "none"),
                  "", "Everybody passed: " + (", ".join(everybody) or "none"), ""]
    return "\n".join(lines)


def _handed_in(layout, student, assignment):
    """When a student handed an assignment in (its graded record's submitted_at), or None."""
    from datetime import datetime
    try:
        return datetime.fromisoformat((layout.read_record(student, assignment) or {}).get("submitted_at") or "")
    except (TypeError, ValueError):
        return None


def checks_markdown(out, order=()):
    """report.md's section on the checks on demand (ondemand/ledger.py): per assignment, the students who
    checked, their checks before handing in, and the causes the checks named most often; "" without checks."""
    from collections import Counter
    from datetime import datetime

    from autograder.ondemand.ledger import read
    entries = read(out)
    if not entries:
        return ""
    layout, rank = Layout(out), {assignment: index for index, assignment in enumerate(order)}
    lines = ["## Checks before submission", "",
             "Checks on demand (make check-server) recorded in checks/checks.jsonl: how often each student checked "
             "before handing in, and the named causes the checks found most often.", "",
             "| assignment | students who checked | checks before handing in: median, most | failed checks | "
             "most frequent causes (checks) |", "|---|---|---|---|---|"]
    for assignment in sorted({e["assignment"] for e in entries}, key=lambda a: (rank.get(a, len(rank)), a)):
        mine = [e for e in entries if e["assignment"] == assignment]
        before = Counter()
        for entry in mine:
            handed_in = _handed_in(layout, entry["student"], assignment)
            if handed_in is None or datetime.fromisoformat(entry["at"]) <= handed_in:
                before[entry["student"]] += 1
        causes = Counter(cause for entry in mine for cause in entry.get("causes") or [])
        counts = sorted(before.values()) or [0]
        lines.append(f"| {assignment} | {len({e['student'] for e in mine})} | {statistics.median(counts):g}, "
                     f"{counts[-1]} | {sum(e.get('status') == 'failed' for e in mine)} | "
                     + ("; ".join(f"{cause} ({n})" for cause, n in causes.most_common(5)) or "none") + " |")
    return "\n".join(lines + [""])


def write_report(out, folder=None, order=(), course=None):
    """report.md, item_analysis.csv and scores.png; assignments in `order` (the course's) first;
    with the course, also the integrity report (integrity.py) and its sections in report.md."""
    grades = grade_rows(out)
    rank = {assignment: index for index, assignment in enumerate(order)}
    by_assignment = dict(sorted(graded_results(out, grades).items(), key=lambda item: (rank.get(item[0], len(rank)),
                                                                                     item[0])))
    if not by_assignment:
        raise CourseError(f"no graded submissions in {out}")
    folder = Path(folder or Path(out) / "report")
    folder.mkdir(parents=True, exist_ok=True)
    rows = item_rows(by_assignment)
    write_csv(folder / "item_analysis.csv", list(rows[0]), rows)
    plot_scores(by_assignment, folder / "scores.png")
    flagged = [row for row in grades if row.get("flags")]
    text = markdown(by_assignment, rows, flagged, [row for row in grades if row["status"] == GRADER_FAULT])
    if course is not None:
        from autograder.integrity import write_integrity
        from autograder.layout import Layout
        *_, lines = write_integrity(course, Layout(out), folder)
        text += "\n" + "\n".join(lines)
    checks = checks_markdown(out, order)   # the checks on demand before submission, where any were made
    text += ("\n" + checks) if checks else ""
    write_atomic(folder / "report.md", text)
    return folder
