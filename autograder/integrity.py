"""Integrity and the class's shared mistakes, from what grading already holds (`make integrity`).

    answers     every student's answer cell per exercise, as it was graded (the submitted notebook
                merged with the release, submission.build_program), and where a read-only cell or
                nbgrader's metadata differs from the release
    similar     pairs of answers that share what is rare in the class: copydetect's winnowed
                fingerprints of normalised code (names, comments, blank lines and string contents
                do not count), less what the released stub holds and what many students wrote
                independently (`torch.tril(...)` alone never makes a pair)
    mistakes    per exercise, the named causes of lost tests over the class ("It matches what ...
                gives." in the feedback), with the points they cost and one anonymous example
    flags       what grading flagged for the instructor (grades.csv's flags)

It flags; it never changes a score.  Outputs, in the grading folder's report/: integrity.csv (the
pairs, most similar first), integrity.html (each pair side by side, shared regions marked; the
flags; the class's mistakes) and a section of report.md.
"""

import hashlib
import html
import io
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from copydetect import CodeFingerprint, compare_files
from copydetect.utils import get_token_coverage, highlight_overlap, winnow

from autograder.files import write_atomic, write_csv
from autograder.intake import SubmissionError
from autograder.submission import _nbgrader, _source, build_program, cell_kind, read_notebook

K = 16               # characters of normalised code in one fingerprint (copydetect's noise threshold)
WINDOW = 4           # winnowing window: every match of K + WINDOW - 1 characters is found
COMMON_SHARE = 0.2   # a fingerprint in more than this share of the class's answers is common,
COMMON_MIN = 5       # and in more than this many (a ring of five copies is still found in a small class)
MIN_RARE = 12        # rare fingerprints two answers must share to be compared at all
THRESHOLD = 0.6      # shared rare fingerprints / the smaller answer's rare fingerprints, to flag
CAUSE = re.compile(r"It matches what (.+?) gives\.", re.DOTALL)


@dataclass
class Pair:
    exercise: str
    first: str
    second: str
    score: float          # share of the smaller answer's rare fingerprints that the other holds
    shared: int           # rare fingerprints in common
    html: tuple = ("", "")


def _fingerprint(name, source, boilerplate=None):
    """copydetect's fingerprint of the code (its normalised text, winnowed k-grams less the boilerplate's),
    with each k-gram hashed by blake2b: copydetect hashes with Python's hash(), which changes from process to
    process (PYTHONHASHSEED), so that the same class gave 61 to 63 pairs from one run to the next."""
    try:
        found = CodeFingerprint(name, K, WINDOW, language="python", fp=io.StringIO(source))
    except Exception:  # code copydetect cannot tokenise counts as no code
        return None
    text = found.filtered_code
    hashes = np.array([int.from_bytes(hashlib.blake2b(text[i:i + K].encode(), digest_size=7).digest(), "little")
                       for i in range(len(text) - K + 1)], dtype=np.int64)
    if len(hashes):
        hashes, places = winnow(hashes, WINDOW, remove_duplicates=False)
        kept = ~np.isin(hashes, list(boilerplate or ()))
        hashes, places = hashes[kept], places[kept]
    else:
        places = np.array([], dtype=int)
    found.hash_idx = defaultdict(list)
    for value, place in zip(hashes.tolist(), places.tolist()):
        found.hash_idx[value].append(place)
    found.hash_idx = dict(found.hash_idx)
    found.hashes = set(found.hash_idx)
    found.token_coverage = get_token_coverage(found.hash_idx, K, len(text))
    return found


def collect(course, layout):
    """(answers, edits): exercise -> student -> answer source; [(student, assignment, line)]."""
    answers, edits, releases = defaultdict(dict), [], {}
    for record in layout.records():
        folder = record.get("folder")
        if not folder:
            continue
        assignment = course.assignment(record["assignment"])
        for notebook in assignment.notebooks:
            path = Path(folder) / notebook.filename
            try:
                submitted = read_notebook(path, folder)
            except SubmissionError:
                continue
            released = course.release_notebook(assignment, notebook)
            if released not in releases:  # read once for the whole class
                releases[released] = read_notebook(released)
            release = releases[released]
            program = build_program(submitted, release)
            for exercise in notebook.exercises:
                if exercise.id in program.answers:
                    answers[exercise.id][record["student"]] = program.answers[exercise.id]
            edits += [(record["student"], assignment.id, line) for line in release_edits(submitted, release)]
    return answers, edits


def release_edits(submitted, release):
    """Lines for the read-only and autograded cells whose text or nbgrader metadata differ from the
    release (grading restored them, or skips them where they are demo cells, so they gained nothing; the
    instructor may want to know)."""
    released = {_nbgrader(cell).get("grade_id"): cell for cell in release.cells if _nbgrader(cell).get("grade_id")}
    found = []
    for cell in submitted.cells:
        grade_id = _nbgrader(cell).get("grade_id")
        original = released.get(grade_id)
        if original is None or cell_kind(original) in ("answer", "free"):
            continue
        if _source(cell).strip() != _source(original).strip():
            found.append(f"edited the read-only cell {grade_id} ("
                         + ("skipped when grading)" if cell_kind(original) == "demo" else "restored for grading)"))
        mine = {key: value for key, value in _nbgrader(cell).items() if key != "checksum"}
        theirs = {key: value for key, value in _nbgrader(original).items() if key != "checksum"}
        if mine != theirs:
            changed = sorted(key for key in set(mine) | set(theirs) if mine.get(key) != theirs.get(key))
            found.append(f"edited nbgrader's metadata of {grade_id} ({', '.join(changed)})")
    return found


def stubs(course):
    """exercise id -> what every student was given for it: the released stub, and the code of the
    notebook's read-only cells (a broken class to fix, helpers), which answers copy by design."""
    found = {}
    for assignment in course.assignments:
        for notebook in assignment.notebooks:
            path = course.release_notebook(assignment, notebook)
            if not path.is_file():
                continue
            cells = read_notebook(path).cells
            given = "\n".join(_source(cell) for cell in cells
                              if cell.get("cell_type") == "code" and cell_kind(cell) in ("locked", "demo"))
            for cell in cells:
                grade_id = _nbgrader(cell).get("grade_id")
                if cell_kind(cell) == "answer" and grade_id:
                    found[grade_id] = _source(cell) + "\n" + given
    return found


def similar_pairs(answers, stub_sources):
    """Every flagged pair, most similar first."""
    pairs = []
    for exercise, by_student in sorted(answers.items()):
        stub = _fingerprint("stub", stub_sources.get(exercise, ""))
        boilerplate = list(stub.hashes) if stub is not None and len(stub.hashes) else None
        prints = {student: _fingerprint(student, source, boilerplate) for student, source in by_student.items()}
        prints = {student: fp for student, fp in prints.items() if fp is not None}
        hashes = {student: set(int(h) for h in fp.hashes) for student, fp in prints.items()}
        counts = Counter(h for found in hashes.values() for h in found)
        common = max(COMMON_MIN, math.floor(COMMON_SHARE * len(hashes)))
        rare = {student: {h for h in found if counts[h] <= common} for student, found in hashes.items()}
        holders = defaultdict(list)
        for student, found in rare.items():
            for h in found:
                holders[h].append(student)
        shared = Counter()
        for students in holders.values():
            students.sort()
            for i, first in enumerate(students):
                for second in students[i + 1:]:
                    shared[first, second] += 1
        for (first, second), count in shared.items():
            smaller = min(len(rare[first]), len(rare[second]))
            if count < MIN_RARE or not smaller:
                continue
            score = count / smaller
            if score >= THRESHOLD:
                pairs.append(Pair(exercise, first, second, round(score, 3), count))
    pairs.sort(key=lambda pair: (-pair.score, -pair.shared, pair.exercise, pair.first, pair.second))
    return pairs


def highlighted(pair, answers):
    """The two answers as HTML, the regions they share marked."""
    first, second = (answers[pair.exercise][name] for name in (pair.first, pair.second))
    a, b = _fingerprint(pair.first, first), _fingerprint(pair.second, second)
    if a is None or b is None:
        return html.escape(first), html.escape(second)
    _, _, (slices_a, slices_b) = compare_files(a, b)
    marks = ("\x00", "\x01")
    out = []
    for text, slices in ((first, slices_a), (second, slices_b)):
        marked, _ = highlight_overlap(text, slices, *marks)
        out.append(html.escape(marked).replace(marks[0], "<mark>").replace(marks[1], "</mark>"))
    return tuple(out)


def class_mistakes(course, grades, answers):
    """exercise -> [(cause, students, tests, points lost, an anonymous example)], most students first."""
    found = defaultdict(lambda: defaultdict(lambda: {"students": set(), "tests": set(), "points": 0.0}))
    for result in grades:
        for test in result.tests:
            if test.score >= test.max_score:
                continue
            for cause in CAUSE.findall(test.output or ""):
                entry = found[test.exercise][" ".join(cause.split())]
                entry["students"].add(result.student)
                entry["tests"].add(test.test)
                entry["points"] += test.max_score - test.score
    table = {}
    for exercise in (e.id for a in course.assignments for e in a.exercises):
        rows = []
        for cause, entry in found.get(exercise, {}).items():
            students = sorted(entry["students"])
            example = next((answers.get(exercise, {}).get(s) for s in students if s in answers.get(exercise, {})), "")
            rows.append((cause, len(students), sorted(entry["tests"]), entry["points"], example))
        if rows:
            table[exercise] = sorted(rows, key=lambda row: (-row[1], row[0]))
    return table


def mistakes_markdown(table, class_size):
    lines = ["## The class's mistakes", "",
             "Named causes of lost tests, per exercise (the grader names a cause only when it recomputed "
             "what that mistake gives and the student's value matched):", ""]
    if not table:
        return lines + ["None named.", ""]
    for exercise, rows in table.items():
        lines += [f"### {exercise}", "", "| students | cause | tests it cost | points lost |", "|---|---|---|---|"]
        lines += [f"| {count} of {class_size} | {cause} | {', '.join(tests)} | {points:g} |"
                  for cause, count, tests, points, _ in rows]
        lines.append("")
    return lines


def write_integrity(course, layout, folder):
    """integrity.csv and integrity.html in `folder`; returns (pairs, edits, mistakes table, markdown lines)."""
    answers, edits = collect(course, layout)
    pairs = similar_pairs(answers, stubs(course))
    for pair in pairs:
        pair.html = highlighted(pair, answers)
    grades = layout.graded()
    flags = [(r.student, r.assignment, r.flags) for r in grades if r.flags]
    table = class_mistakes(course, grades, answers)
    class_size = len({r.student for r in grades})
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(folder / "integrity.csv", ["exercise", "first", "second", "score", "shared_fingerprints"],
              [(p.exercise, p.first, p.second, f"{p.score:.3f}", p.shared) for p in pairs])
    write_atomic(folder / "integrity.html", page(pairs, flags, edits, table, class_size))
    lines = ["## Similar answers", ""]
    lines += ([f"- {p.exercise}: {p.first} and {p.second}, {p.score:.0%} of the rarer answer's fingerprints"
               for p in pairs] or ["None above the threshold."]) + [""]
    lines += ["## Tampering", ""]
    lines += ([f"- {student} / {assignment}: {flag}" for student, assignment, flag in flags]
              + [f"- {student} / {assignment}: {line}" for student, assignment, line in edits]) or ["Nothing flagged."]
    lines += [""] + mistakes_markdown(table, class_size)
    return pairs, edits, table, lines


def page(pairs, flags, edits, table, class_size):
    esc = html.escape
    parts = ["<h1>Integrity and the class's mistakes</h1>",
             "<p>This page flags; it changes no score. A pair is listed when the two answers share what is "
             "rare in the class (names, comments, blank lines and strings do not count; the released stub "
             "and what many students wrote do not count either).</p>", f"<h2>Similar answers ({len(pairs)})</h2>"]
    for pair in pairs:
        parts.append(f"<h3>{esc(pair.exercise)}: {esc(pair.first)} and {esc(pair.second)} "
                     f"({pair.score:.0%}, {pair.shared} rare fingerprints in common)</h3>"
                     f"<div class='pair'><pre>{pair.html[0]}</pre><pre>{pair.html[1]}</pre></div>")
    parts.append("<h2>Tampering</h2><ul>")
    parts += [f"<li>{esc(s)} / {esc(a)}: {esc(line)}</li>" for s, a, line in flags + edits] or ["<li>Nothing flagged.</li>"]
    parts.append("</ul><h2>The class's mistakes</h2>")
    for exercise, rows in table.items():
        parts.append(f"<h3>{esc(exercise)}</h3><table><tr><th>students</th><th>cause</th><th>tests it cost</th>"
                     "<th>points lost</th><th>an example (anonymous)</th></tr>")
        parts += [f"<tr><td>{count} of {class_size}</td><td>{esc(cause)}</td><td>{esc(', '.join(tests))}</td>"
                  f"<td>{points:g}</td><td><pre>{esc(example)}</pre></td></tr>"
                  for cause, count, tests, points, example in rows]
        parts.append("</table>")
    return PAGE.format(body="\n".join(parts))


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Integrity and the class's mistakes</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; }}
.pair {{ display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }}
pre {{ background: #f6f6f6; padding: .5rem; white-space: pre-wrap; font-size: .85rem; line-height: 1.45; }}
mark {{ background: #ffd54f; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: .3rem; vertical-align: top; }}
</style></head>
<body>
{body}
</body></html>
"""
