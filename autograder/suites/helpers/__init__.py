"""What every suite shares: inputs, sizes, crash hints, module runs, gradient checks, and the
attention maths on the grader's side (once, with the switches its named mistakes need).

A suite never talks to the student process directly, nor imports from autograder/sandbox/ (what it
needs of it, the student's errors and a tensor sent with its layout, the harness hands it:
autograder/harness/context.py): its calls (one per student function, in the
suite's own module) go through `run_module` or `student.call`, check that what came back has the
promised form, and raise Feedback in words the student understands when it does not.  Inputs are
made here, so every test uses sizes that are all distinct (B != H != Sq != Sk != d_k != d_v).

The helpers live beside the assignment that uses them: common.py (every suite: inputs and sizes, crash
hints, module runs, gradient checks, the grader's attention maths once: `scores`, `attention`,
`attention_lse`), decoding.py, tiled.py (with `tiled_attention`, the tiled forward and its mistakes'
switches), latent.py, pruning.py and kernels.py (the Triton track).  A suite imports what it uses by
name (`from autograder.suites.helpers.common import randn, attention`)."""
