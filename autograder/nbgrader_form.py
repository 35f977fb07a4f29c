"""What nbgrader's gradebook and tools read, written the way they read it (no grading here):

  annotate            each exercise's autograded cell (check_<exercise>) gets the feedback as its
                      output and the points as an execute_result, which nbgrader's determine_grade
                      reads as partial credit: so formgrader, `generate_feedback` and `export` see
                      the scores and feedback of grades.csv, and no hidden test code or value;
  CourseLatePolicy    nbgrader's late-submission plugin, applying the late policy of course.yml
                      (or of the course already loaded: CourseLatePolicy.for_course);
  alembic_head        the revision nbgrader stamps on a new gradebook, without a new Python.

gradebook.py (make grade) and nbgrader_hooks.py (nbgrader autograde) both use them.
"""

import nbformat
from alembic.config import Config
from alembic.script import ScriptDirectory
from nbgrader import api
from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Unicode
from traitlets.config import Configurable

from autograder.pictures import Picture, png_base64
from autograder.render import cell_text, sections
from autograder.scoring import late_penalty


def alembic_head():
    """The revision nbgrader stamps on a new gradebook, from alembic's API in this process.

    nbgrader's own get_alembic_version runs the `alembic` command for it: a new Python that costs
    about 4 s per new gradebook and fails outright when the venv's bin/ is not on PATH."""
    with api._temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
        return ScriptDirectory.from_config(Config(ini)).get_current_head()


api.get_alembic_version = alembic_head


def annotate(nb, notebook_result):
    """Write each exercise's score and feedback into its check_<exercise> cell (in place)."""
    by_id = {section.exercise: section for section in sections(notebook_result)}
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        if cell.get("cell_type") != "code" or not str(grade_id).startswith("check_"):
            continue
        exercise_id = grade_id[len("check_"):]
        section = by_id.get(exercise_id)
        points, text = cell_text(notebook_result, exercise_id, section)
        pictures = [Picture.from_dict(picture) for _, _, picture in section.groups if picture] if section else []
        cell.outputs = [
            nbformat.v4.new_output("stream", name="stdout", text=text),
            *(nbformat.v4.new_output("display_data", data={"image/png": png_base64(picture),
                                                           "text/plain": picture.title})
              for picture in pictures),
            # no points where the grader failed on the notebook (cell_text): the gradebook records none
            *([nbformat.v4.new_output("execute_result", data={"text/plain": f"{points:g}"}, execution_count=1)]
              if points is not None else []),
        ]
        cell.execution_count = 1
    return nb


class CourseFile(Configurable):
    """The course both hooks grade by: course.yml, read once per nbgrader command (nbgrader_config.py
    may point `c.CourseFile.course_file` elsewhere)."""

    course_file = Unicode("", help="course.yml of the course (default: the one beside autograder/)").tag(config=True)

    @classmethod
    def for_course(cls, course):
        """The hook for a course already loaded (what grade-class was given with --course), so that
        it never reads another course.yml than the grading did."""
        hook = cls()
        hook._course = course
        return hook

    @property
    def course(self):
        if not hasattr(self, "_course"):
            from autograder.course import load_course
            self._course = load_course(self.course_file or None)
        return self._course


class CourseLatePolicy(LateSubmissionPlugin, CourseFile):
    """nbgrader's late-submission plugin, applying the course's late policy."""

    def late_submission_penalty(self, student_id, score, total_seconds_late):
        return late_penalty(score, total_seconds_late, self.course.late_policy)
