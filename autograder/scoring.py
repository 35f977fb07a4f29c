"""Scoring: a pure function from what was observed to points.  No process, no files, no pytest."""

import re

from autograder.results import NotebookResult, TestResult


# A test that did not count says why in its own words too (views such as Gradescope's list the tests
# one by one): these prefixes, then the cause in one line, then where the whole story is.
NOT_RUN = "Not run:"
NOT_COUNTED = "Not counted:"
SAME_AS_GATE = "Not passed:"


def _cause_line(message):
    """The first line of a finding, without the "Your code raised X: " that the note already gives."""
    line = (message or "").strip().splitlines()[0] if (message or "").strip() else ""
    return re.sub(r"^Your code raised \w+: ", "", line)


def not_run(affecting):
    """A test kept from running by a cell that failed: which cell, and how, in one line."""
    report = affecting[0] if affecting else None
    if report is None:
        return f"{NOT_RUN} a cell it needs did not run (see the error above)."
    where = f"cell {report.label}" if not report.label.isdigit() else f"code cell #{report.label}"
    last = report.traceback.strip().splitlines()[-1] if report.traceback.strip() else ""
    how = {"syntax": "has a syntax error", "timeout": "ran out of time"}.get(
        report.status, f"raised {last.split(':', 1)[0]}" if last else "raised an error")
    return f"{NOT_RUN} the {where} {how}, so what it defines is missing (see the error above)."


def not_counted(gate, same=False):
    """A test of an answer that failed its exercise's gate: the gate's finding, in one line."""
    return f"{SAME_AS_GATE if same else NOT_COUNTED} {_cause_line(gate.message)} (see the note at the top of this exercise)"


def gate_note(exercise, outcome):
    """What the student reads, once, when an answer fails its exercise's gate."""
    basic = ", ".join(exercise.basic) or "none"
    return (f"{outcome.message}\nThis is what the exercise is about, so until it holds only its basic "
            f"checks count ({basic}); the other checks were not run.")


def cell_note(report):
    """What the student reads about a cell that did not run cleanly, with their own traceback."""
    where = f"cell {report.label}" if not report.label.isdigit() else f"code cell #{report.label}"
    if report.status == "syntax":
        return f"The {where} has a syntax error, so nothing in it was defined:\n{report.traceback.rstrip()}"
    if report.status == "timeout":
        why = f" ({report.message})" if report.message.startswith("not run") else ""
        return f"The {where} ran out of time and was stopped{why}; what follows it in that cell was not run."
    return f"The {where} raised an error while the notebook was run:\n{report.traceback.rstrip()}"


def affecting_cells(exercise, outcomes, failed_cells):
    """The failed cells that an exercise's tests depend on: its own answer cell, and any cell
    that should have defined a name one of its tests could not find."""
    missing = {outcome.missing for (exercise_id, _), outcome in outcomes.items()
               if exercise_id == exercise.id and not outcome.passed and outcome.missing}
    return [report for report in failed_cells
            if report.label == exercise.id or missing & set(report.defines)]


def score_notebook(notebook, outcomes, cell_reports, broken_rules):
    """One TestResult per hidden test of the notebook's exercises, and a note per exercise about
    the cells it depends on that did not run (each such cell is reported once per exercise, and
    the tests it kept from running say so instead of repeating the error).

    outcomes: (exercise id, test name) -> Outcome; cell_reports: how each cell ran;
    broken_rules: exercise id -> the message that replaces its tests' outcomes, or (exercise id, test)
    -> the message that replaces that test's (see rules.py).
    """
    failed_cells = [report for report in cell_reports or [] if report.status != "ok"]
    results, notes = [], {}
    for exercise in notebook.exercises:
        affecting = affecting_cells(exercise, outcomes, failed_cells)
        if affecting:
            notes[exercise.id] = "\n\n".join(cell_note(report) for report in affecting)
        undefined = {name for report in affecting for name in report.defines}
        # The exercise's own answer cell failed: a name its tests could not find is what it did not define
        # (an answer written as a value, `by_hand = {...}`, is defined only when its cell runs through).
        own_cell_broken = any(report.label == exercise.id for report in affecting)
        gate = outcomes.get((exercise.id, exercise.gate)) if exercise.gate else None
        gate_failed = gate is not None and gate.refused
        cell_error = gate_failed and (gate.missing in undefined or (own_cell_broken and bool(gate.missing)))
        capped = gate_failed and not cell_error  # a failed cell is reported as such, not as the gate
        if capped and exercise.id not in broken_rules:
            notes[exercise.id] = "\n\n".join(filter(None, [notes.get(exercise.id), gate_note(exercise, gate)]))
        for test, points in exercise.points.items():
            outcome = outcomes.get((exercise.id, test))
            if exercise.id in broken_rules or (exercise.id, test) in broken_rules:
                message = broken_rules.get(exercise.id) or broken_rules[(exercise.id, test)]
                results.append(TestResult(exercise.id, test, 0.0, points, message))
            elif capped and test not in exercise.basic:
                results.append(TestResult(exercise.id, test, 0.0, points, not_counted(gate)))
            elif capped and outcome is not None and not outcome.passed and outcome.message == gate.message:
                results.append(TestResult(exercise.id, test, 0.0, points, not_counted(gate, same=True)))
            elif outcome is None:
                results.append(TestResult(exercise.id, test, 0.0, points,
                                          not_run(affecting) if cell_error else "This check did not run."))
            elif outcome.passed:
                results.append(TestResult(exercise.id, test, points, points))
            elif outcome.missing in undefined or (own_cell_broken and outcome.missing):
                results.append(TestResult(exercise.id, test, 0.0, points, not_run(affecting)))
            else:
                results.append(TestResult(exercise.id, test, 0.0, points, outcome.message, outcome.picture))
    return NotebookResult(notebook.name, results, notes=notes)


def late_penalty(score, seconds_late, policy):
    """Points the late policy takes from a score handed in this many seconds after the due date."""
    return round(score * policy.fraction(seconds_late), 4)
