# nbgrader reads this file from the repository root: solutions/ is the source folder (instructor
# notebooks with solution regions) and exercises/ the release folder (what students get).
c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "attention"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
