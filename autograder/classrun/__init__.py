"""Grade a whole class in nbgrader's layout: <submitted>/<student>/<assignment>/<notebook>.ipynb.

    tasks (tasks.py: the submissions found once, each one's fingerprint, the selection, the order)
    -> fan-out (fanout.py: one warm grading process per job, each with a sandbox taken from a
    SandboxPool, sandboxes.py; results on disk as each submission is done, events to this process)
    -> the run itself (run.py: a ClassRun from the folder to the gradebook, faults graded once more)
    -> publishing (publish.py: grades.csv, the wide export, merges of shards)

A submission whose notebooks, hidden suites, reference solutions, grader and course.yml are
unchanged since it was graded is not graded again unless forced; so after a crash or Ctrl-C the
same command grades only what is missing.  A submission the grader failed on (a fault, results.py)
is not done: a run grades it once more before it ends, and the next run grades it again.  A fault
that comes back with the same reason on unchanged work in the next run is set aside for the
instructor (`tasks.set_aside`): not graded again until the work changes or the run is forced, and said so.

One run owns an output folder at a time (`run.owning`: a lock with its pid), and nothing of a run
outlives it: its grading processes get SIGKILL when the process that runs the class dies
(PR_SET_PDEATHSIG), and each sandbox dies with the process that started it (bwrap's
--die-with-parent).  So a run killed at any moment leaves records, each whole, and the next run grades
the rest, records in the gradebook what the killed run saved but did not record
(`publish.is_recorded`), and publishes as a clean run would.
"""
