"""Course rules that decide a score beyond what the hidden tests check.

The from-scratch rule: an exercise marked `from_scratch: true` in course.yml earns nothing when
its code calls torch's built-in attention.  It is enforced where the student's code runs
(sandbox/guard.py: during that exercise's calls the built-in raises and the call is recorded),
requested for the right exercises by the grading context (harness/context.py), and decided here.
"""

FROM_SCRATCH_MESSAGE = ("No credit: this exercise must be written from scratch, but your code calls "
                        "torch's built-in attention (torch.nn.functional.scaled_dot_product_attention, "
                        "nn.MultiheadAttention or one of their kernels).")


def broken_rules(exercises, student):
    """exercise id -> the message that replaces every test's outcome, for exercises that broke a rule."""
    return {exercise.id: FROM_SCRATCH_MESSAGE for exercise in exercises
            if exercise.from_scratch and exercise.id in student.builtin_attention_users}
