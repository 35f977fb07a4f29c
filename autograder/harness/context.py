"""The student as the hidden suites see it: one submission's grading context.

Tests receive a `Student` (the `student` fixture) and call its functions and classes through it.
It holds what grading one submission needs to remember: which exercise is being graded, which
exercises must be written from scratch (their calls run under the attention guard), which of
them called torch's attention anyway, and results the suites reuse within this submission (a
model trained once, checked by several tests).  The process underneath only carries messages.

It is also where the suites get what they need of the sandbox without reaching into it (a suite never
talks to the student process, nor imports from autograder/sandbox/): `StudentError`, what a call of the
student's that raised comes back as, and `Strided`, a tensor sent with its layout in memory.
"""

from autograder.sandbox import replies
from autograder.sandbox.inside.protocol import Strided
from autograder.sandbox.student import StudentError
from autograder.submission import _nbgrader, _source

__all__ = ["Student", "StudentError", "Strided", "released_cells"]


def released_cells(notebook):
    """(label, source) of each code cell of the released notebook (the instructor's release copy), the course's
    own text: label is the cell's nbgrader grade_id, or None.  What feedback on a student's exception may quote
    or name (plugin.said_of) is read from these, never from the student's own cells."""
    return tuple((_nbgrader(cell).get("grade_id") if isinstance(_nbgrader(cell).get("grade_id"), str) else None,
                  _source(cell)) for cell in notebook.cells if cell.get("cell_type") == "code")


class Student:
    def __init__(self, process, from_scratch=(), device=None, variant=None, others=None, values_shown=False,
                 released=None):
        self.process = process
        self.released = tuple(released or ())  # released_cells of the notebook: the course's own code
        # whether feedback may show the right values worked out from the student's own numbers (course.yml's
        # feedback policy at the time of grading); checks.where words a failure either way
        self.values_shown = values_shown
        self.device = device                   # "cuda": the calls' tensors go to the GPU (kernel assignments)
        self.variant = variant                 # the student's own numbers of this notebook (variants.py), or None
        self._others = others or dict          # makes the others' numbers, when a suite first asks
        self.flags = []                        # for the instructor's eyes: an answer that is another's variant
        self.from_scratch = set(from_scratch)  # exercise ids under the from-scratch rule
        self.exercise = None                   # the exercise whose tests are running
        self.builtin_attention_users = set()   # exercises whose calls reached torch's attention
        self.memo = {}

    def _request(self, key, message, check, measure_memory=False, fresh=False):
        message = {**message, "from_scratch": self.exercise in self.from_scratch}
        try:
            value = self.process.request(key, message, check, measure_memory, **({"fresh": True} if fresh else {}))
        except StudentError as error:
            if error.kind == "BuiltinAttentionForbidden":  # the guard refused: the built-in was called
                self.builtin_attention_users.add(self.exercise)
            raise
        if value.get("used_builtin_attention"):
            self.builtin_attention_users.add(self.exercise)
        return value

    @property
    def others(self):
        """whose -> numbers: the released notebook's and each classmate's (drawn once, when first asked)."""
        if callable(self._others):
            self._others = self._others()
        return self._others

    def value(self, name):
        """The value the notebook gave `name` (an answer written as numbers), in the reply's "output"."""
        return self._request(name, {"op": "value", "name": name}, replies.value)

    def names(self, names):
        return self.process.request("names", {"op": "names", "names": list(names)}, replies.names)

    def call(self, name, *args, grad=False, grad_outputs=(), seed=0, echo_args=False, count=False,
             measure_memory=False, fresh=False, **kwargs):
        """Call the student's function `name`.  count: the reply's "work" (a replies.Work) is what the
        call did, counted in the student's process: torch's products and exponentials and, in a
        kernel assignment, what its Triton kernels did (sandbox/inside/counter.py); measure_memory:
        the reply's "peak_memory" is the call's peak memory, read from outside; fresh: the call runs in
        a fresh child of the sandbox that has only run the notebook's cells, so nothing any earlier call
        left behind (a global it set) reaches it (checks.students_functions, a witness of the grader's)."""
        message = {"op": "call", "name": name, "args": list(args), "kwargs": kwargs, "grad": grad,
                   "grad_outputs": list(grad_outputs), "seed": seed, "echo_args": echo_args,
                   "count": count}
        if self.device:
            message["device"] = self.device
        return self._request(name, message, replies.call, measure_memory, fresh)

    def module(self, cls, init_args=(), init_kwargs=None, *, steps=(), parameters=None, dtype=None,
               train=False, grad=False, grad_outputs=(), attributes=(), seed=0, stand_in=None, held=False, fresh=False):
        """Build the student's class `cls` (or, with stand_in, a plain module built from torch with
        the given attributes and linear layers: see sandbox/inside/worker.py), then run `steps` on it.  The
        reply's "held_elements" counts the numbers the module keeps outside its parameters after the
        steps (its cache), and with held=True its "held" lists those tensors themselves; the work of
        the steps with "count": True is counted in the reply's "work", as Student.call(count=True) does; fresh:
        it runs in a fresh child, as Student.call(fresh=True) does."""
        message = {"op": "module", "cls": cls, "stand_in": stand_in, "init_args": list(init_args),
                   "init_kwargs": dict(init_kwargs or {}), "steps": list(steps), "parameters": parameters,
                   "dtype": dtype, "train": train, "grad": grad, "grad_outputs": list(grad_outputs),
                   "attributes": list(attributes), "seed": seed, "held": held}
        # A hang inside a notebook function that was handed the module is charged to that function.
        functions = [step["function"] for step in steps if step.get("function")]
        return self._request(functions[-1] if functions else cls, message, replies.module, fresh=fresh)
