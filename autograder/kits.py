"""What leaves the course repository: the student kit and Gradescope's autograder.zip, and what
that zip's run_autograder grades (gradescope_result).

    student-kit/          the notebooks of the assignments released so far (course.yml's schedule),
                          a student README, requirements, self_check.py and a workflow that runs
                          it: no secret, nothing hidden (grading on push is the instructor's, push.py)
    student-kit-<id>/     one student's kit: the same, and their variant.json (variants.py); never
                          written over the class's; where checks are open, check.py beside the
                          notebooks and, in a student's kit, their check-server.json (ondemand/)
    autograder.zip        Gradescope's format: setup.sh and run_autograder at the root, the grader
                          and one assignment's hidden suites and reference solutions under source/,
                          and where it has variants the key of that one assignment and the roster of
                          `make variants` (variant-key.json)

Whatever carries students' numbers (a student's kit, a zip with a key) is noted beside the secret
as it is made (variants.note_handed_out): the secret is not replaced silently after that.

Both are made from an explicit list of files, never by copying the repository and deleting: a
file that is not named here does not leave.
"""

import shutil
import stat
import zipfile
from pathlib import Path

import yaml

from autograder.course import CourseError
from autograder.intake import SubmissionError, choose_notebooks, find_notebooks, gradescope_ids, student_name_problem
from autograder.ondemand.tokens import hand_out
from autograder.results import SubmissionResult, grader_failed, not_graded
from autograder.sandbox.jail import SandboxUnavailable
from autograder.schedule import kit_assignments, now
from autograder.variants import FILENAME, KEY_FILE, UnknownStudent, Variants, has_variants, note_handed_out

KIT_FILES = Path(__file__).resolve().parent / "kit"

# The packages a student needs to run the notebooks and their visible checks (pinned like the
# course's own requirements.txt; torch must be exactly this version).
STUDENT_PACKAGES = ("torch", "numpy", "matplotlib", "notebook", "ipykernel", "httpx")   # httpx: check.py


def _requirement_lines(course):
    """package name -> its whole line in requirements.txt (the pin and any environment marker)."""
    lines = {}
    for line in (course.root / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            lines[line.split("==", 1)[0].strip().lower()] = line.strip()
    return lines


def pinned_versions(course):
    return {name: line.split("==", 1)[1].split(";", 1)[0].strip() for name, line in _requirement_lines(course).items()}


def pinned(course, names):
    """The requirement lines of `names` in the course's requirements.txt; CourseError names any missing."""
    lines = _requirement_lines(course)
    missing = [name for name in names if name not in lines]
    if missing:
        raise CourseError(f"requirements.txt does not pin {', '.join(missing)}")
    return [lines[name] for name in names]


def student_requirements(course, assignments=()):
    """The student kit's requirements: what every notebook needs, and what the given assignments add
    (course.yml's `packages`, e.g. triton for the kernel track), pinned as the course pins them; first
    the index of torch's CPU build where course.yml names one (`torch_index_url`)."""
    extra = [name for assignment in assignments for name in assignment.packages]
    index = [f"--extra-index-url {course.torch_index_url}"] if course.torch_index_url else []
    return "".join(line + "\n" for line in [*index, *pinned(course, [*STUDENT_PACKAGES, *dict.fromkeys(extra)])])


def extra_packages(course, assignments):
    """The README's sentence on what some assignments need beyond the core ("" when none do)."""
    needs = [f"`{a.id}` needs `{line}`" for a in assignments for line in pinned(course, a.packages)]
    if not needs:
        return ""
    linux = any('sys_platform == "linux"' in need for need in needs)
    return ("\n" + "; ".join(needs) + " (in requirements.txt)."
            + (" That package is built for Linux only: on macOS or Windows, work in WSL, on a Linux machine or in "
               "a hosted notebook." if linux else ""))


# The kit README's sentences on what course.yml's torch_index_url and ai_policy put in the kit.
TORCH_INDEX_SENTENCE = (
    "\n\n`requirements.txt` starts with the index of PyTorch's CPU-only build: the install downloads about\n"
    "190 MB for torch, not the 2.3 GB of the CUDA build and its libraries. For the Triton track on a Linux\n"
    "machine with an NVIDIA GPU, delete that first line before installing: pip then takes the CUDA build of\n"
    "the same torch version, and the kernel notebook runs its kernels on the GPU.")
AI_POLICY_SENTENCE = (
    "\n\n## AI assistants\n\n`AGENTS.md` (the same text as `CLAUDE.md`) holds the course's rules for AI assistants: they\n"
    "may explain, review your code and suggest checks, never write your answers. Coding assistants read it\n"
    "from this folder; read it too, it is the course's policy.")


def assignments_table(assignments):
    """The kit's table of its assignments: folder, title, when it is due and its points."""
    rows = ["| folder | assignment | due | points |", "| --- | --- | --- | --- |"]
    rows += [f"| `{a.id}/` | {a.title} | {a.due.strftime('%Y-%m-%d %H:%M UTC') if a.due else 'no due date'} | "
             f"{a.max_score:g} |" for a in assignments]
    return "\n".join(rows)


def kit_folder(out, student=None):
    """The folder of the class's kit (`out`), or of one student's: `out`-<id>, beside it and never it;
    CourseError where the id cannot name a folder."""
    if student is None:
        return Path(out)
    problem = student_name_problem(student)
    if problem:
        raise CourseError(f"{student!r} cannot name a student's kit ({problem})")
    return Path(out).with_name(f"{Path(out).name}-{student}")


def build_student_kit(course, folder, moment=None, student=None):
    """Write the student kit as it stands at `moment` (default: now) to `folder` and a zip beside
    it; returns (the zip's path, the assignments in it).  With `student`, that student's own kit: the
    variant.json of each assignment with variants beside its notebooks (variants.py)."""
    folder = Path(folder)
    chosen = kit_assignments(course, moment or now())  # refuses before anything is written
    if course.ai_policy and not course.ai_policy.is_file():
        raise CourseError(f"ai_policy: {course.ai_policy} is not a file (name one in course.yml, or write "
                          "`ai_policy: none`)")
    missing = [str(course.release_notebook(a, nb).relative_to(course.root)) for a in chosen for nb in a.notebooks
               if not course.release_notebook(a, nb).is_file()]
    if missing:
        raise CourseError(f"{missing[0]} is not released yet: run `make release` first")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    variants = Variants.of(course) if student is not None else None
    for assignment in chosen:
        for notebook in assignment.notebooks:
            target = folder / assignment.id / notebook.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(course.release_notebook(assignment, notebook), target)
        if variants and has_variants(assignment):
            (folder / assignment.id / FILENAME).write_text(variants.handed_out_text(assignment, student))
    pins = pinned_versions(course)
    readme = (KIT_FILES / "STUDENT_README.md").read_text().replace("{torch}", pins.get("torch", "?"))
    readme = readme.replace("{assignments}", assignments_table(chosen)).replace("{extra}", extra_packages(course, chosen))
    readme = readme.replace("{torch_index}", TORCH_INDEX_SENTENCE if course.torch_index_url else "")
    readme = readme.replace("{ai_policy}", AI_POLICY_SENTENCE if course.ai_policy else "")
    (folder / "README.md").write_text(readme.replace("{course}", course.name))
    (folder / "requirements.txt").write_text(student_requirements(course, chosen))
    if course.ai_policy:   # one text, under the two names coding assistants look for
        for name in ("AGENTS.md", "CLAUDE.md"):
            shutil.copyfile(course.ai_policy, folder / name)
    shutil.copyfile(KIT_FILES / "self_check.py", folder / "self_check.py")
    hand_out(course, folder, chosen, student)   # check.py, and a student's check-server.json (ondemand/)
    workflow = folder / ".github" / "workflows" / "self-check.yml"
    workflow.parent.mkdir(parents=True)
    shutil.copyfile(KIT_FILES / "self-check.yml", workflow)
    archive = folder.with_name(folder.name + ".zip")
    _zip(folder, archive)
    with_numbers = [assignment.id for assignment in chosen if has_variants(assignment)]
    if student is not None and with_numbers:
        note_handed_out(course, f"the student kit of {student} ({archive}: {', '.join(with_numbers)})", [student])
    return archive, chosen


def _zip(folder, archive, executable=()):
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                name = str(path.relative_to(folder))
                info = zipfile.ZipInfo(name)
                mode = 0o755 if name in executable else 0o644
                info.external_attr = (stat.S_IFREG | mode) << 16
                handle.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)


def gradescope_files(course, assignment):
    """(source path, path inside the zip) for everything Gradescope's autograder needs; Gradescope
    unpacks the zip into /autograder/source."""
    root = course.root
    files = [(KIT_FILES / "gradescope" / "setup.sh", "setup.sh"),
             (KIT_FILES / "gradescope" / "run_autograder", "run_autograder"),
             *[(path, path.name) for path in sorted((KIT_FILES / "gradescope").glob("requirements-3.*.txt"))],
             (root / "course.yml", "course.yml"),
             (root / "nbgrader_config.py", "nbgrader_config.py")]
    package = root / "autograder"
    suites = package / "suites"
    own = {exercise.suite for exercise in assignment.exercises}
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".ini", ".sh", ".yml", ".md", ""):
            if KIT_FILES in path.parents or (path.parent == suites and path.name.startswith("test_") and path not in own):
                continue
            files.append((path, f"{path.relative_to(root)}"))
    for notebook in assignment.notebooks:
        for path in (course.source_notebook(assignment, notebook), course.release_notebook(assignment, notebook)):
            files.append((path, f"{path.relative_to(root)}"))
    return files


def one_assignment(course_yml, assignment):
    """course.yml reduced to one assignment: the zip carries that one's suites and nothing else."""
    raw = yaml.safe_load(course_yml)
    raw["assignments"] = [item for item in raw["assignments"] if item.get("id") == assignment.id]
    raw.pop("released", None)
    return ("# course.yml of the course, reduced to the assignment this autograder grades\n"
            + yaml.safe_dump(raw, sort_keys=False)).encode()


# Gradescope's images and their Python (setup.sh installs the lock of the image's own python3).
IMAGES = {"3.10": "Ubuntu 22.04", "3.11": "Debian 12", "3.12": "Ubuntu 24.04"}


def gradescope_pythons(pins):
    """The Pythons of IMAGES on which every one of `pins` installs (kit/gradescope/pythons.yml, which
    `python -m tests.gradescope_locks` writes)."""
    table = yaml.safe_load((KIT_FILES / "gradescope" / "pythons.yml").read_text()) or {}
    unknown = [pin for pin in pins if pin not in table]
    if unknown:
        raise CourseError(f"autograder/kit/gradescope/pythons.yml does not say where {unknown[0]} installs: "
                          "run `python -m tests.gradescope_locks`")
    return [python for python in IMAGES if all(python in table[pin] for pin in pins)]


def build_gradescope(course, assignment, archive):
    """Write Gradescope's autograder.zip for `assignment`; returns (the zip's path, the Pythons of the
    images it installs on)."""
    archive = Path(archive)
    pins = pinned(course, assignment.packages)
    pythons = gradescope_pythons(pins)
    if not pythons:
        raise CourseError(f"{assignment.id}: {', '.join(pins)} installs on none of Gradescope's images "
                          f"(Python {', '.join(IMAGES)})")
    key = Variants.of(course).key_file_text(assignment) if has_variants(assignment) else None   # refuses first
    archive.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as handle:
        for source, name in gradescope_files(course, assignment):
            if not source.is_file():
                raise CourseError(f"{source} is missing: run `make release` first")
            data = source.read_bytes()
            if name == "run_autograder":
                data = data.replace(b"{assignment}", assignment.id.encode())
            if name == "course.yml":
                data = one_assignment(data, assignment)
            info = zipfile.ZipInfo(name)
            mode = 0o755 if name in ("setup.sh", "run_autograder") else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            handle.writestr(info, data, zipfile.ZIP_DEFLATED)
        if course.torch_index_url:
            handle.writestr("torch-index.txt", course.torch_index_url + "\n")
        if assignment.packages:   # what this assignment adds to grading (setup.sh installs it after the lock)
            handle.writestr("packages.txt", "".join(line + "\n" for line in pins))
            handle.writestr("pythons.txt", " ".join(pythons) + "\n")   # setup.sh refuses another image
        handle.writestr("assignment.txt", assignment.id + "\n")
        if key:   # the key of this one assignment and the class's ids; never the course's secret
            info = zipfile.ZipInfo(KEY_FILE)
            info.external_attr = (stat.S_IFREG | 0o600) << 16
            handle.writestr(info, key, zipfile.ZIP_DEFLATED)
    if key:
        note_handed_out(course, f"Gradescope's zip of {assignment.id} ({archive})")
    return archive, pythons


# -- what the zip's run_autograder grades

def gradescope_result(course, assignment, submission, check_sandbox):
    """The result of the notebook in Gradescope's submission folder, and the lines for the instructor
    (stdout, which run_autograder's results hide from students).  Whose numbers: the roster shipped in
    the zip says, from the submitter's sid or email.  A submission that cannot be graded (no notebook,
    several, a link out) scores nothing with its reason; a submitter the roster does not know, or a
    sandbox that cannot be built here (`check_sandbox` raises), is a grader fault, never a score (nor
    one on another id's numbers)."""
    ids = gradescope_ids(submission)
    student, notes, fault, reason = (ids or ["student"])[0], [], "", ""
    if has_variants(assignment):
        try:
            student = Variants.of(course).whose(ids, "Gradescope's submitter: ")
        except UnknownStudent as error:
            notes.append(f"instructor: {error}")
            fault = str(error)
    try:
        chosen = choose_notebooks(assignment, find_notebooks(submission))
        check_sandbox(course)
    except SubmissionError as error:
        reason = str(error)
    except SandboxUnavailable as error:  # the instructor's to fix
        notes.append(f"instructor: the grader's sandbox cannot be built in this container ({error}); "
                     "rebuild the autograder image (setup.sh checks the sandbox)")
        fault = fault or f"its sandbox cannot be built in this container ({error})"
    if reason:
        return SubmissionResult(student, assignment.id, [not_graded(nb, reason) for nb in assignment.notebooks]), notes
    if fault:
        return SubmissionResult(student, assignment.id, [grader_failed(nb, fault) for nb in assignment.notebooks]), notes
    from autograder.grading import grade_one  # torch: only when there is something to grade
    return grade_one(course, assignment, submission, student, notebooks=chosen), notes
