"""The Gradescope image's dependencies, locked once per Python that Gradescope's images carry.

Gradescope builds the autograder on the Ubuntu (or Debian) image the instructor picks, with that
image's Python: 3.10 on Ubuntu 22.04, 3.11 on Debian 12, 3.12 on Ubuntu 24.04.  The course's own
requirements.txt is a lock for its own .venv (Python 3.11.7, notebooks and nbgrader included), and
some of its pins have no build for 3.10 or need 3.11.5.  Grading needs far less: GRADING below.
`python -m tests.gradescope_locks` resolves it for each Python with pip's own resolver (metadata
only: nothing is installed), keeping the course's own pins wherever they fit, and writes
autograder/kit/gradescope/requirements-<python>.txt; setup.sh installs the one of the image's Python.
tests/test_delivery.py resolves each lock again for its Python.

What an assignment adds (course.yml's `packages`, e.g. Triton for the kernel track) is pinned by the
course's requirements.txt and may have no build for some of these Pythons (triton 3.9.0 has none for
3.10). The same script writes autograder/kit/gradescope/pythons.yml: for each such pin, the Pythons it
resolves on. `make gradescope` reads it, so that a zip says which images it installs on and setup.sh
refuses the others with one line.

torch is locked at the course's version and resolved on its own, without its dependencies: on
Gradescope it comes from PyTorch's CPU-only index (course.yml's torch_index_url), whose
wheels need only the packages listed here (filelock ... fsspec), not the CUDA libraries of PyPI's.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "autograder" / "kit" / "gradescope"
PYTHONS = {"3.10": "3.10.12", "3.11": "3.11.2", "3.12": "3.12.3"}   # Ubuntu 22.04, Debian 12, Ubuntu 24.04
GRADING = ["numpy>=1.26", "matplotlib>=3.8", "nbformat>=5.9", "pytest>=8", "PyYAML>=6", "tqdm>=4.66",
           "pyseccomp==0.1.2",
           # what torch's CPU wheel requires
           "filelock", "typing-extensions>=4.10.0", "setuptools>=77.0.3", "sympy>=1.13.3", "networkx>=2.5.1",
           "jinja2", "fsspec>=0.8.5"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "linux_x86_64", "any"]


def torch_pin():
    line = next(line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("torch=="))
    return line.strip()


def pip_for(python, *args, report=None):
    """pip's resolver for another Python on Linux x86_64, metadata only; the CompletedProcess."""
    abi = "cp" + "".join(python.split(".")[:2])
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
               "--abi", abi, "--abi", "abi3", "--abi", "none", *[f"--platform={tag}" for tag in PLATFORMS]]
    if report:
        command += ["--report", str(report)]
    return subprocess.run(command + list(args), capture_output=True, text=True, timeout=600)


def error_of(process):
    lines = [line for line in process.stderr.splitlines() if line.startswith("ERROR")]
    return lines[-1] if lines else process.stderr.strip().splitlines()[-1:]


def lock(python):
    """The pins of GRADING for `python` (the course's own pins where they fit), as lines."""
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        (folder / "grading.in").write_text("\n".join(GRADING) + "\n")
        course_pins = [line for line in (ROOT / "requirements.txt").read_text().splitlines()
                       if "==" in line and not line.startswith(("#", "torch=="))]
        (folder / "course.txt").write_text("\n".join(course_pins) + "\n")
        attempts = [["-c", str(folder / "course.txt")], []]   # the course's pins, else the newest that fit
        for constraints in attempts:
            process = pip_for(python, "-r", str(folder / "grading.in"), *constraints, report=folder / "report.json")
            if process.returncode == 0:
                installed = json.loads((folder / "report.json").read_text())["install"]
                return sorted((f"{item['metadata']['name']}=={item['metadata']['version']}" for item in installed),
                              key=str.lower)
        raise RuntimeError(f"Python {python}: {error_of(process)}")


PACKAGE_PYTHONS = LOCKS / "pythons.yml"


def package_pythons():
    """{pin: [the Pythons of PYTHONS it resolves on]} for every package an assignment of course.yml adds."""
    from autograder.course import load_course
    from autograder.kits import pinned
    course = load_course()
    pins = sorted({pin for assignment in course.assignments for pin in pinned(course, assignment.packages)})
    return {pin: [short for short, python in PYTHONS.items() if pip_for(python, pin).returncode == 0] for pin in pins}


def write_package_pythons():
    import yaml
    table = package_pythons()
    PACKAGE_PYTHONS.write_text("# The Pythons of Gradescope's images on which each package an assignment adds installs\n"
                               "# (python -m tests.gradescope_locks resolves them; make gradescope reads this file).\n"
                               + yaml.safe_dump(table, sort_keys=True))
    print(f"wrote {PACKAGE_PYTHONS.relative_to(ROOT)} ({len(table)} package(s))")


def write_locks():
    for short, python in PYTHONS.items():
        pins = lock(python)
        path = LOCKS / f"requirements-{short}.txt"
        path.write_text(f"# The Gradescope image's packages for Python {short} (resolved for {python} by\n"
                        f"# python -m tests.gradescope_locks; setup.sh installs this file on that Python).\n"
                        f"{torch_pin()}\n" + "\n".join(pins) + "\n")
        print(f"wrote {path.relative_to(ROOT)} ({len(pins) + 1} packages)")


if __name__ == "__main__":
    write_locks()
    write_package_pythons()
