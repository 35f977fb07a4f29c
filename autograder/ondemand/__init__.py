"""Grading on demand: the check server (`python -m autograder check-server`, make check-server).

A student calls `check()` in a notebook (the kit's check.py); it posts the saved notebook with the
student's token, and the course's check server grades it with the assignment's hidden suites through
the grader's front door (grading.py), as make grade would, and answers with what course.yml's
`checks:` policy lets a check show.

    tokens.py    who is checking: a token per student, signed with a key made from the course's secret
    hub.py       who is checking where the server runs as a JupyterHub service: the hub names the student
    ledger.py    every check recorded (student, time, score, causes), appended to one file
    pool.py      warm grading processes, each with its sandbox, and the fair queue in front of them
    server.py    the HTTP server (tornado): the policy, the limits, the answers, a student's variant.json

The package is named for what it does (grading on demand) rather than "check", which in this course
also names the author's loop (make check) and the notebooks' visible self-checks; "a check" in this
package always means one request of a student to have a notebook graded now.
"""
