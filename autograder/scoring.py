"""Scoring: a pure function from what was observed to points.  No process, no files, no pytest."""

from autograder.results import NotebookResult, TestResult


def cell_notes(cell_reports):
    """label -> a remark for the student about a cell that did not run cleanly."""
    notes = {}
    for report in cell_reports or []:
        if report.status == "ok":
            continue
        where = f"cell {report.label}" if not report.label.isdigit() else f"code cell #{report.label}"
        if report.status == "syntax":
            notes[report.label] = (f"The {where} has a syntax error, so nothing in it was defined:\n"
                                   f"{report.traceback.rstrip()}")
        elif report.status == "timeout":
            notes[report.label] = (f"The {where} ran out of time and was stopped"
                                   f"{' (' + report.message + ')' if report.message.startswith('not run') else ''}; "
                                   "what follows it in that cell was not run.")
        else:
            notes[report.label] = f"The {where} raised an error while the notebook was run:\n{report.traceback.rstrip()}"
    return notes


def score_notebook(notebook, outcomes, cell_reports, broken_rules):
    """One TestResult per hidden test of the notebook's exercises.

    outcomes: (exercise id, test name) -> Outcome; cell_reports: how each cell ran;
    broken_rules: exercise id -> the message that replaces its tests' outcomes (see rules.py).
    """
    notes = cell_notes(cell_reports)
    results = []
    for exercise in notebook.exercises:
        note = notes.get(exercise.id)
        for test, points in exercise.points.items():
            outcome = outcomes.get((exercise.id, test))
            if exercise.id in broken_rules:
                results.append(TestResult(exercise.id, test, 0.0, points, broken_rules[exercise.id]))
            elif outcome is None:
                results.append(TestResult(exercise.id, test, 0.0, points, "This check did not run."))
            elif outcome.passed:
                results.append(TestResult(exercise.id, test, points, points))
            else:
                output = outcome.message + (f"\n\n{note}" if note else "")
                results.append(TestResult(exercise.id, test, 0.0, points, output))
    return NotebookResult(notebook.name, results, notes=list(notes.values()))


def late_penalty(score, seconds_late, policy):
    """Points the late policy takes from a score handed in this many seconds after the due date."""
    return round(score * policy.fraction(seconds_late), 4)
