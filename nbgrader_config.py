# nbgrader reads this file from the repository root: solutions/ is the source folder (instructor
# notebooks with solution regions) and exercises/ the release folder (what students get).
import os
import sys

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "attention"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
# nbgrader export writes here, not to a second grades.csv beside grading/grades.csv (the numbers
# agree: both are final scores, manual grading and late penalty included).
c.ExportPlugin.to = "nbgrader_export.csv"

# `nbgrader autograde` (and formgrader's Autograde button) grades with the hidden suites in the
# sandbox instead of running the visible checks in a kernel, and applies course.yml's late policy.
sys.path.insert(0, os.path.dirname(os.path.abspath(globals().get("__file__", "nbgrader_config.py"))))
try:
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import AssignLatePenalties, CheckCellMetadata, LimitOutput, SaveAutoGrades

    from autograder.nbgrader_form import CourseLatePolicy
    from autograder.nbgrader_hooks import HiddenSuites
except ImportError:  # a copy of this file outside the course (make release's scratch folder)
    pass
else:
    c.Autograde.autograde_preprocessors = [HiddenSuites, ClearMetadataPreprocessor, LimitOutput,
                                           SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
    c.AssignLatePenalties.plugin_class = CourseLatePolicy
