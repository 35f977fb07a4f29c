"""What every suite shares: inputs, sizes, crash hints, module runs, gradient checks, and the
attention maths on the grader's side (once, with the switches its named mistakes need).

A suite never talks to the student process directly: its calls (one per student function, in the
suite's own module) go through `run_module` or `student.call`, check that what came back has the
promised form, and raise Feedback in words the student understands when it does not.  Inputs are
made here, so every test uses sizes that are all distinct (B != H != Sq != Sk != d_k != d_v).

The helpers live beside the assignment that uses them: common.py (every suite), decoding.py,
tiled.py, latent.py, pruning.py and kernels.py (the Triton track).  A suite imports this package
as A and reaches them all through it (A.randn, A.memory_reference, A.mla, ...)."""

from autograder.suites.helpers.common import *  # noqa: F401,F403
from autograder.suites.helpers.decoding import *  # noqa: F401,F403
from autograder.suites.helpers.tiled import *  # noqa: F401,F403
from autograder.suites.helpers.latent import *  # noqa: F401,F403
from autograder.suites.helpers.pruning import *  # noqa: F401,F403
from autograder.suites.helpers.kernels import *  # noqa: F401,F403
