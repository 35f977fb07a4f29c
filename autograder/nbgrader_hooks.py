"""The grader inside nbgrader's own tools, through nbgrader's configuration hooks.

nbgrader_config.py installs two of these:

  c.Autograde.autograde_preprocessors   HiddenSuites replaces nbgrader's Execute step, so
      `nbgrader autograde` (what formgrader's Autograde button runs) grades with the hidden suites
      in the sandbox instead of running the notebook's visible checks in a kernel;
  c.AssignLatePenalties.plugin_class    CourseLatePolicy applies course.yml's late policy
      (nbgrader_form.py, with the annotation both `make grade` and `nbgrader autograde` write).
"""

import tempfile
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.nbgrader_form import CourseFile, annotate


class HiddenSuites(NbGraderPreprocessor, CourseFile):
    """nbgrader preprocessor: grade the notebook with the hidden suites (in place of Execute)."""

    def preprocess(self, nb, resources):
        from autograder.grading import grade_one

        course = self.course
        assignment = course.assignment(resources["nbgrader"]["assignment"])
        name = resources["nbgrader"]["notebook"]
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"{name}.ipynb"
            nbformat.write(nb, path)
            result = grade_one(course, assignment, folder, resources["nbgrader"]["student"], {name: path})
        graded = next(notebook for notebook in result.notebooks if notebook.notebook == name)
        if graded.fault:   # no score at all: nbgrader reports this submission's autograde as failed
            raise RuntimeError(f"the grader failed on {name}: {graded.fault}; run nbgrader autograde again")
        return annotate(nb, graded), resources
