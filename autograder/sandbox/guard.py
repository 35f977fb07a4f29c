"""The from-scratch rule, enforced where the student's code runs (this file runs in the sandbox).

While the grader calls a function of an exercise that must be written from scratch, torch's own
attention does not work: every attention operator of PyTorch's dispatcher (the fused, flash, math
and multi-head kernels, however they are reached: torch.nn.functional, torch._C._nn, torch.ops.aten,
nn.MultiheadAttention's fast path) gets a kernel that records the call and raises.  Python-level
entry points that compute attention without those operators (nn.MultiheadAttention's slow path,
F.multi_head_attention_forward) are wrapped once, before any submission's code runs, so a reference
taken by the submission is the wrapper.

The grader reads the record from each reply.  Resetting the record changes nothing that counts:
the call raised, so the built-in never produced an answer.  What stays possible in principle is
code written to take this guard apart from the inside (finding and destroying its registrations);
the README says so.
"""

import warnings

import torch
import torch.nn.functional as F

# Dispatcher operators that compute attention (substrings of their aten names).
ATTENTION_OPERATORS = ("scaled_dot_product", "multi_head_attention", "flash_attention",
                       "efficient_attention", "cudnn_attention", "transformer_encoder_layer")
# Python functions that compute attention with ordinary operators.
ATTENTION_FUNCTIONS = ("multi_head_attention_forward",)
# Names a reader of the source would recognise as the built-in (for messages and the static check).
BUILTIN_NAMES = ("scaled_dot_product_attention", "multi_head_attention_forward", "MultiheadAttention",
                 "_scaled_dot_product_attention_math", "flex_attention")
DISPATCH_KEYS = ("CPU", "AutogradCPU")


class BuiltinAttentionForbidden(RuntimeError):
    pass


MESSAGE = "torch's built-in attention may not be used in this exercise"


class Guard:
    def __init__(self):
        self.active = False
        self.used = False
        self._library = None
        self._operators = sorted(
            name.split("::", 1)[1] for name in torch._C._dispatch_get_all_op_names()
            if name.startswith("aten::") and any(part in name for part in ATTENTION_OPERATORS)
            and "backward" not in name and "_fused_sdp_choice" not in name)

    def _refuse(self, *args, **kwargs):
        self.used = True
        raise BuiltinAttentionForbidden(MESSAGE)

    def wrap_python_functions(self):
        """Once, in the warm worker: Python-level attention goes through the guard."""
        for name in ATTENTION_FUNCTIONS:
            original = getattr(F, name)

            def guarded(*args, _original=original, **kwargs):
                if self.active:
                    self._refuse()
                return _original(*args, **kwargs)
            guarded.__name__ = guarded.__qualname__ = name
            setattr(F, name, guarded)

    def watch(self, forbidden):
        """Before each call: forbid torch's attention (or allow it again).  The registration stays
        while consecutive calls are forbidden, as the calls of one exercise are."""
        self.used = False
        if forbidden and self._library is None:
            self.__enter__()
        elif not forbidden and self._library is not None:
            self.__exit__()

    def __enter__(self):
        self.active, self.used = True, False
        self._library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            for operator in self._operators:
                for key in DISPATCH_KEYS:
                    try:
                        self._library.impl(operator, self._refuse, key)
                    except RuntimeError:
                        pass  # an operator without a schema for this key
        return self

    def __exit__(self, *exc):
        self.active = False
        if self._library is not None:
            self._library._destroy()
            self._library = None


GUARD = Guard()
