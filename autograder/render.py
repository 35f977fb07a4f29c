"""Every rendering of a graded result, in one place; results.py holds the results themselves.

  for the student      markdown (feedback.md, the push's summary), html_page (feedback.html),
                       cell_text (an exercise's check_<exercise> cell in nbgrader's notebooks)
  for Gradescope       gradescope (results.json)
  for the instructor   csv_row (grades.csv), and on the console a class run's class_plan,
                       Progress and class_report (summary_table, changes, not_submitted_line)

Every one of them shows the same numbers (a result's final_score) and the same Sections; a result
the grader failed on (results.SubmissionResult.faulted) shows none: each rendering says it will be
graded again, and Gradescope gets no results.json at all (`gradescope`).
"""

import csv
import html
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from autograder.files import write_atomic, write_csv
from autograder.pictures import Picture, png_base64
from autograder.results import GRADER_FAULT

CSV_FIELDS = ["student", "assignment", "score", "max_score", "manual", "late_penalty", "final_score",
              "seconds_late", "status", "reason", "flags"]


# -- what every rendering of the feedback shows: one Section per exercise

@dataclass
class Section:
    """One exercise of a graded notebook as the feedback shows it: its points, the note said once at
    its top, and its tests in groups (see `grouped`)."""
    exercise: str
    score: float
    max_score: float
    note: str
    groups: list

    @staticmethod
    def passed(group):
        return group[0].score >= group[0].max_score


def grouped(tests):
    """[(tests, output, picture)]: the tests in order, those in a row that failed with the same
    words and no picture together, so that the feedback says a thing once."""
    groups = []
    for test in tests:
        failed = test.score < test.max_score
        output, picture = (test.output, test.picture) if failed else ("", None)
        last = groups[-1] if groups else None
        if last and failed and output and picture is None and last[2] is None and last[1] == output:
            last[0].append(test)
        else:
            groups.append(([test], output, picture))
    return groups


def sections(notebook):
    """One Section per exercise of a NotebookResult, in order."""
    return [Section(exercise, sum(t.score for t in tests), sum(t.max_score for t in tests),
                    notebook.notes.get(exercise, ""), grouped(tests))
            for exercise, tests in notebook.by_exercise().items()]


# What the student reads instead of a score when the grader failed on their submission.
NOT_YET = ("Not graded yet: the grader failed on this submission, through no fault of your work. It will be "
           "graded again, and this page will then give your score.")


def headline(result):
    """The score every rendering of the feedback leads with: the final one (grades.csv's final_score),
    with what it is made of when a manual score or a late penalty changed it; none for a fault."""
    if result.faulted:
        return "Score: not yet (the grader failed; it will be graded again)"
    parts = [f"automatic {result.score:g}"] if result.manual or result.late_penalty else []
    parts += [f"by hand {result.manual:+g}"] if result.manual else []
    parts += [f"late {-result.late_penalty:+g}"] if result.late_penalty else []
    return f"Score: {result.final_score:g} / {result.max_score:g}" + (f" ({', '.join(parts)})" if parts else "")


def summary(result):
    """The sentences under the score in every rendering of the feedback."""
    if result.faulted:
        return [NOT_YET]
    lines = []
    if result.manual:
        lines.append(f"Your instructor's grading by hand changes the automatic score of {result.score:g} by "
                     f"{result.manual:+g} points.")
    if result.late_penalty:
        lines.append(f"Handed in {result.seconds_late / 3600:.1f} hours after the due date: the late policy "
                     f"takes {result.late_penalty:g} points.")
    return lines


def points(notebook):
    """A notebook's points as its heading shows them: none where the grader failed on it."""
    return f"not graded yet / {notebook.max_score:g}" if notebook.fault else \
        f"{notebook.score:g} / {notebook.max_score:g}"


# -- for the student

def markdown(result):
    """Markdown for the student: what passed, what failed and why; no hidden code or values."""
    lines = [f"# Feedback: {result.assignment}", "",
             f"**{headline(result)}**", ""]
    for sentence in summary(result):
        lines += [sentence, ""]
    for notebook in result.notebooks:
        lines += [f"## {notebook.notebook}.ipynb ({points(notebook)})", ""]
        if notebook.reason:
            lines += [f"Not graded: {notebook.reason}.", ""]
            continue
        for section in sections(notebook):
            lines += [f"### {section.exercise} ({section.score:g} / {section.max_score:g})", ""]
            if section.note:
                lines += ["```", *section.note.splitlines(), "```", ""]
            for group, output, _ in section.groups:
                mark = "passed" if section.passed(group) else "failed"
                lines.append("- " + ", ".join(f"**{t.test}** ({t.score:g}/{t.max_score:g})" for t in group)
                             + f" {mark}")
                if output:
                    lines += ["", "  ```", *[f"  {line}" for line in output.splitlines()], "  ```"]
            lines.append("")
    return "\n".join(lines)


def html_page(result):
    """The same feedback as one standalone HTML page, with the pictures inline."""
    esc = html.escape
    parts = [f"<h1>Feedback: {esc(result.assignment)}</h1>",
             f"<p><strong>{esc(headline(result))}</strong></p>"]
    parts += [f"<p>{esc(sentence)}</p>" for sentence in summary(result)]
    for notebook in result.notebooks:
        parts.append(f"<h2>{esc(notebook.notebook)}.ipynb ({esc(points(notebook))})</h2>")
        if notebook.reason:
            parts.append(f"<p>Not graded: {esc(notebook.reason)}.</p>")
            continue
        for section in sections(notebook):
            parts.append(f"<h3>{esc(section.exercise)} ({section.score:g} / {section.max_score:g})</h3>")
            if section.note:
                parts.append(f"<pre class='note'>{esc(section.note)}</pre>")
            parts.append("<ul>")
            for group, output, picture in section.groups:
                passed = section.passed(group)
                parts.append(f"<li class='{'passed' if passed else 'failed'}'>"
                             + ", ".join(f"<strong>{esc(t.test)}</strong> ({t.score:g}/{t.max_score:g})" for t in group)
                             + f" {'passed' if passed else 'failed'}")
                if output:
                    parts.append(f"<pre>{esc(output)}</pre>")
                picture = Picture.from_dict(picture) if picture else None
                if picture is not None:
                    parts.append(f"<img alt='{esc(picture.title)}' src='data:image/png;base64,"
                                 f"{png_base64(picture)}'>")
                parts.append("</li>")
            parts.append("</ul>")
    return FEEDBACK_PAGE.format(title=esc(f"Feedback: {result.assignment}"), body="\n".join(parts))


FEEDBACK_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; }}
pre {{ background: #f6f6f6; padding: .5rem; white-space: pre-wrap; }}
pre.note {{ border-left: 4px solid #c33; }}
li.passed {{ color: #2a6; }} li.failed {{ color: #222; }}
img {{ max-width: 100%; display: block; margin: .5rem 0; }}
</style></head>
<body>
{body}
</body></html>
"""


def cell_text(notebook, exercise_id, section):
    """(points, text) of one exercise of a NotebookResult, as the plain text of its check_<exercise>
    cell; section: its Section (None when it has no results).  points is None where the grader failed
    on the notebook."""
    if notebook.fault:   # no points: the gradebook records no automatic score (gradebook.record)
        return None, f"Hidden tests of {exercise_id}: not graded yet\nNot graded: {notebook.reason}.\n"
    points, possible = (section.score, section.max_score) if section else (0, 0)
    lines = [f"Hidden tests of {exercise_id}: {points:g} / {possible:g}"]
    if notebook.reason:
        lines.append(f"Not graded: {notebook.reason}.")
    elif section:
        if section.note:
            lines += [section.note, ""]
        for group, output, _ in section.groups:
            mark = "passed" if section.passed(group) else "failed"
            lines.append("- " + ", ".join(f"{t.test} ({t.score:g}/{t.max_score:g})" for t in group) + f" {mark}")
            lines += [f"    {line}" for line in output.splitlines()]
    return points, "\n".join(lines) + "\n"


# -- for Gradescope

def gradescope(result, visibility=None):
    """The shape Gradescope reads from results.json; visibility: exercise id -> when its tests are
    shown (default: visible)."""
    visibility = visibility or {}
    exercises = list(dict.fromkeys(test.exercise for test in result.tests))   # in the notebook's order
    seen = {}

    def number(test):  # "exercise.test", both counted from 1, as Gradescope orders and shows them
        seen[test.exercise] = seen.get(test.exercise, 0) + 1
        return f"{exercises.index(test.exercise) + 1}.{seen[test.exercise]}"
    return {
        "score": round(result.final_score, 4),
        "max_score": round(result.max_score, 4),
        "execution_time": round(result.seconds, 3),
        "output": result.reason or "\n\n".join(
            [f"{result.final_score:g} / {result.max_score:g} points"
             + (f" ({result.late_penalty:g} taken for lateness)" if result.late_penalty else "")]
            + [f"{exercise}: {note}" for notebook in result.notebooks for exercise, note in notebook.notes.items()]),
        "output_format": "md",
        "test_output_format": "md",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": [{"name": test.name, "number": number(test), "tags": [test.exercise],
                   "score": round(test.score, 4), "max_score": test.max_score,
                   "status": "passed" if test.score >= test.max_score else "failed",
                   "output": test.output, "output_format": "md",
                   "visibility": visibility.get(test.exercise, "visible")}
                  for test in result.tests],
    }


def write_gradescope(result, path, visibility=None):
    """results.json; for a result the grader failed on, none (an earlier one removed): Gradescope's
    documented contract for an autograder that failed is a missing or invalid results.json, which it
    shows as "The autograder failed to execute correctly", records no score for, and lets the
    instructor run again.  Any results.json is a score: its "score" (or its tests' scores) is required,
    and an explanatory "output" cannot come without one.  The reason goes to stdout (the caller's),
    which Gradescope shows the instructor only."""
    if result.faulted:
        Path(path).unlink(missing_ok=True)
        return
    write_atomic(path, json.dumps(gradescope(result, visibility), indent=2))


# -- for the instructor

def csv_row(result):
    """grades.csv's row: a fault's score cells are empty (status "grader fault"), never 0."""
    fault = result.faulted
    return {"student": result.student, "assignment": result.assignment,
            "score": "" if fault else f"{result.score:g}",
            "max_score": f"{result.max_score:g}", "manual": f"{result.manual:g}",
            "late_penalty": "" if fault else f"{result.late_penalty:g}",
            "final_score": "" if fault else f"{result.final_score:g}", "seconds_late": f"{result.seconds_late:.0f}",
            "status": result.status, "reason": result.reason, "flags": result.flags}


def write_grades_csv(results, path):
    """grades.csv: one row per graded submission."""
    write_csv(path, CSV_FIELDS, [csv_row(result) for result in results])


def read_grades_csv(path):
    """grades.csv's rows as write_grades_csv wrote them (a dict per row, text values, keyed by
    CSV_FIELDS): OSError where it cannot be read, ValueError where it is not a grades.csv."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if rows and set(CSV_FIELDS) - set(rows[0]):
        raise ValueError(f"{path} lacks the columns {', '.join(sorted(set(CSV_FIELDS) - set(rows[0])))}")
    return rows


def class_plan(chosen, jobs):
    """The console's first line of a class run: what is to be graded, with how many processes."""
    to_grade = chosen.to_grade
    return ((f"{len(to_grade)} submission(s) of {len({task.student for task in to_grade})} student(s) to grade "
             f"with {jobs} job(s)" if to_grade else "Nothing to grade")
            + (f"; only {', '.join(chosen.exercises)} of each (an author's check: no gradebook)"
               if chosen.exercises else "")
            + (f"; {chosen.unchanged} unchanged since graded (make grade FORCE=1, or --force, grades them again)"
               if chosen.unchanged else ""))


def class_report(chosen, submitted, db, table=False):
    """What the console says after a class run (classrun.run.ClassRun): the table if asked, the scores
    that changed, the flags for the instructor, the folders that are no submission, who handed
    nothing in, and where the outputs are."""
    results, graded, layout = chosen.results, chosen.graded, chosen.layout
    parts = ["\n" + summary_table(graded)] if table else []   # graded: published, manual points and penalty in
    changed = changes(chosen.before, results)
    parts.append(("\nScores that changed:\n" + "\n".join(changed)) if changed
                 else "\nNo score changed." if chosen.before else "")
    flagged = [result for result in graded if result.flags]
    if flagged:
        parts.append("\nFor the instructor (code that reaches into torch internals or the grader's guard scores 0 "
                     "there):\n"
                     + "\n".join(f"  {result.student} / {result.assignment}: {result.flags}" for result in flagged))
    if chosen.strays:
        parts.append(f"\nNot graded: {len(chosen.strays)} entr{'y' if len(chosen.strays) == 1 else 'ies'} under "
                     f"{submitted}/ that are no <student>/<assignment>/ folder:\n"
                     + "\n".join(f"  {stray.path}: {stray.reason}" for stray in chosen.strays))
    faults = fault_lines(graded)
    if faults:
        parts.append(faults)
    aside = chosen.set_aside
    if aside:
        parts.append(f"Set aside for the instructor: {len(aside)} submission(s) with the same grader fault on unchanged "
                     f"work in two runs, not graded again until the work changes or FORCE=1: "
                     + ", ".join(task.key for task in aside))
    missing = not_submitted_line(graded)
    if missing:
        parts.append(missing)
    rows = [r for r in results if not r.missing]
    parts.append(f"Grades: {layout.grades_csv} ({len(rows)} submission(s) of {len({r.student for r in rows})} "
                 f"student(s){f', {len(results) - len(rows)} not submitted' if len(results) > len(rows) else ''})   "
                 f"wide: {layout.wide_csv}   feedback: {layout.feedback_root}   "
                 f"gradebook: {'not written (--exercise)' if chosen.exercises else db}")
    return "\n".join(parts)


def last_line(result):
    """grade's and gradescope's last line (setup.sh reads it): the score, or the grader's fault."""
    if result.faulted:
        return f"grader fault, no score: {result.fault}"
    return f"{result.score:g} / {result.max_score:g}" + (f"  ({result.reason})" if result.reason else "")


def score_text(result):
    """A result's final score as the console gives it; "grader fault" instead of a number for a fault."""
    return GRADER_FAULT if result.faulted else f"{result.final_score:g} / {result.max_score:g}"


def summary_table(results):
    """The console's table of a class run: one row per submission, with its final score (grades.csv's)."""
    rows = [("student", "assignment", "score", "status", "seconds")]
    for result in results:
        rows.append((result.student, result.assignment, score_text(result),
                     result.reason or "graded", f"{result.seconds:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[4])
        if index == 0:
            lines.append("-" * (sum(widths) + 2 * len(widths) + 7))
    return "\n".join(lines)


def fault_lines(results):
    """For the instructor: the submissions the grader failed on (no score; the next run grades them
    again), each with why, or ""."""
    faulted = [result for result in results if result.faulted]
    if not faulted:
        return ""
    return (f"\nGrader faults: {len(faulted)} submission(s) not graded, through no fault of the student (no score in "
            "grades.csv, the gradebook or the feedback; the next run grades them again):\n"
            + "\n".join(f"  {result.student} / {result.assignment}: {result.fault}" for result in faulted))


def not_submitted_line(results):
    """One line for the results that are assignments not handed in (a row of 0 each), or ""."""
    missing = {}
    for result in results:
        if result.missing:
            missing[result.student] = missing.get(result.student, 0) + 1
    if not missing:
        return ""
    shown = ", ".join(f"{student} ({count})" for student, count in sorted(missing.items())[:8])
    more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
    return (f"Not submitted: {sum(missing.values())} assignment(s) of {len(missing)} student(s), a row of 0 each in "
            f"grades.csv: {shown}{more}")


def changes(before, results):
    """Lines saying whose scores changed, from what to what; before: (student, assignment) -> score."""
    lines = []
    for result in results:
        key = (result.student, result.assignment)
        now = None if result.faulted else result.final_score   # before: None where it was a fault
        if key in before and before[key] != now:
            was = GRADER_FAULT if before[key] is None else f"{before[key]:g}"
            lines.append(f"  {result.student}/{result.assignment}: {was} -> {score_text(result).split(' / ')[0]}")
    return lines


class Progress:
    """What the console shows as a class is graded: progress(task, result) after each graded
    submission, a tqdm bar on a terminal, one line each otherwise (none for an assignment that was not
    handed in); close() at the end."""

    def __init__(self, total, stream=None):
        self.stream = stream or sys.stderr
        self.bar = None
        if self.stream.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="submission", file=self.stream, dynamic_ncols=True)

    def __call__(self, task, result):
        if self.bar is not None:
            self.bar.set_postfix_str(task.key, refresh=False)
            self.bar.update(1)
        elif not result.missing:  # what was not handed in is summed up once, at the end
            print(f"graded {task.key}: {score_text(result)}"
                  + (f"  ({result.reason})" if result.reason else ""), file=self.stream, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
