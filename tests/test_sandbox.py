"""The student process: isolation, time limits and what crosses the pipe."""

import pytest
import torch

from autograder.student import Cell, Limits, StudentCrash, StudentProcess, StudentTimeout, bubblewrap_works
from tests.notebooks import ROOT


def process(*sources, **limits):
    cells = [Cell(str(i), "import torch\n" + source) for i, source in enumerate(sources)]
    return StudentProcess(cells, Limits(**{"call_timeout": 2, "cell_timeout": 2, **limits}))


@pytest.mark.skipif(not bubblewrap_works(), reason="bubblewrap is not available here")
def test_student_code_cannot_read_course_files():
    probe = f"""
import os
def peek():
    found = []
    for path in {[str(ROOT / 'course.yml'), str(ROOT / 'autograder' / 'suites'), str(ROOT / 'solutions')]!r}:
        found.append(os.path.exists(path))
    return found
"""
    with process(probe) as student:
        assert student.call("peek")["output"] == [False, False, False]


def test_hanging_cell_is_stopped_and_the_rest_runs():
    with process("while True:\n    pass\n", "def f():\n    return 1\n") as student:
        assert [r.status for r in student.cell_reports] == ["timeout", "ok"]
        assert student.call("f")["output"] == 1


def test_hang_that_swallows_the_alarm_is_killed_and_charged_to_its_function():
    stubborn = ("def stuck():\n    while True:\n        try:\n            while True:\n                pass\n"
                "        except BaseException:\n            pass\n\ndef fine():\n    return 2\n")
    with process(stubborn) as student:
        with pytest.raises(StudentTimeout):
            student.call("stuck")
        with pytest.raises(StudentTimeout):
            student.call("stuck")  # charged at once, without waiting again
        assert student.call("fine")["output"] == 2  # a fresh process serves the others


def test_exit_mid_call_is_a_crash_not_a_grader_failure():
    with process("import os\ndef bye():\n    os._exit(3)\n\ndef fine():\n    return 5\n") as student:
        with pytest.raises(StudentCrash):
            student.call("bye")
        assert student.call("fine")["output"] == 5


def test_tensor_subclasses_arrive_as_plain_tensors():
    code = ("class Sneaky(torch.Tensor):\n    pass\n\n"
            "def make():\n    return torch.ones(3).as_subclass(Sneaky)\n")
    with process(code) as student:
        value = student.call("make")["output"]
        assert type(value) is torch.Tensor and torch.equal(value, torch.ones(3))


def test_unsupported_return_values_are_reported():
    with process("def f():\n    return object()\n") as student:
        with pytest.raises(Exception, match="returned a value of type object"):
            student.call("f")
