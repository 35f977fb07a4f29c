"""The from-scratch rule, enforced where the student's code runs (this file runs in the sandbox).

While the grader calls a function of an exercise that must be written from scratch, torch's own
attention does not work: every attention operator of PyTorch's dispatcher, forward and backward
(the fused, flash, math and multi-head kernels, however they are reached: torch.nn.functional,
torch._C._nn, torch.ops.aten, nn.MultiheadAttention's fast path) gets a kernel that records the
call and raises.  Python-level
entry points that compute attention without those operators (nn.MultiheadAttention's slow path,
F.multi_head_attention_forward) are wrapped once, before any submission's code runs, so a reference
taken by the submission is the wrapper.

The grader reads the record from each reply.  Resetting the record changes nothing that counts:
the call raised, so the built-in never produced an answer.  After each guarded call the guard
checks that it is still whole (its wrappers in place, its kernels still refusing); one found taken
apart counts as a use, and is put back together.  Code written to take the guard apart and put it
back within one call could still get through in principle; the trusted side reads the student's
code for exactly that kind of reach (rules.reaches_into_internals), where the student's process
cannot interfere.
"""

import warnings

import torch
import torch.nn.functional as F

import kernels

# Dispatcher operators that compute attention (substrings of their aten names).
ATTENTION_OPERATORS = ("scaled_dot_product", "multi_head_attention", "flash_attention",
                       "efficient_attention", "cudnn_attention", "transformer_encoder_layer")
# Python functions that compute attention with ordinary operators.
ATTENTION_FUNCTIONS = ("multi_head_attention_forward",)
# Names a reader of the source would recognise as the built-in (for messages and the static check).
BUILTIN_NAMES = ("scaled_dot_product_attention", "multi_head_attention_forward", "MultiheadAttention",
                 "_scaled_dot_product_attention_math", "flex_attention")
# Where the guard refuses: the CPU, and the CUDA device where the grader runs kernels on one
# (kernels.kernel_device: a kernel assignment's tensors live there during its calls).
ON_CUDA = kernels.kernel_device() == "cuda"
DISPATCH_KEYS = ("CPU", "AutogradCPU") + (("CUDA", "AutogradCUDA") if ON_CUDA else ())


class BuiltinAttentionForbidden(RuntimeError):
    pass


MESSAGE = "torch's built-in attention may not be used in this exercise"


class Guard:
    def __init__(self):
        self.active = False
        self.used = False
        self._library = None
        self._wrappers = {}
        self._operators = sorted(
            name.split("::", 1)[1] for name in torch._C._dispatch_get_all_op_names()
            if name.startswith("aten::") and any(part in name for part in ATTENTION_OPERATORS)
            and "_fused_sdp_choice" not in name)

    def _refuse(self, *args, **kwargs):
        self.used = True
        raise BuiltinAttentionForbidden(MESSAGE)

    def wrap_python_functions(self):
        """Once, in the warm worker: Python-level attention goes through the guard."""
        for name in ATTENTION_FUNCTIONS:
            guarded = self._wrap(getattr(F, name))
            guarded.__name__ = guarded.__qualname__ = name
            self._wrappers[name] = guarded
            setattr(F, name, guarded)

    def _wrap(self, original):
        def guarded(*args, **kwargs):
            if self.active:
                self._refuse()
            return original(*args, **kwargs)
        return guarded

    def intact(self):
        """While forbidding: are the wrappers still in place and do the kernels still refuse?"""
        if not self.active or self._library is None:
            return False
        if any(getattr(F, name, None) is not wrapper for name, wrapper in self._wrappers.items()):
            return False
        used, probe = self.used, torch.zeros(1, 1, 1)
        try:
            torch.ops.aten._scaled_dot_product_attention_math(probe, probe, probe)
        except BuiltinAttentionForbidden:
            return True
        except Exception:  # noqa: BLE001 - anything but our refusal means the kernel ran or broke
            return False
        finally:
            self.used = used
        return False

    def check(self):
        """After a guarded call: a guard found taken apart counts as a use and is rebuilt."""
        if self.active and not self.intact():
            for name, wrapper in self._wrappers.items():
                setattr(F, name, wrapper)
            self.__exit__()
            self.__enter__()
            self.used = True  # after __enter__, which starts a fresh record

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
            try:
                self._library._destroy()
            except Exception:  # noqa: BLE001 - already taken apart by the code under the guard
                pass
            self._library = None


GUARD = Guard()
