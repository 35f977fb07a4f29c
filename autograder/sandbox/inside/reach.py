"""What student code may reach by name: one rule for the names it writes and the names it computes.

The trusted side reads the code a student wrote (autograder/rules.py) and refuses the attributes
below wherever they are written; a name computed at run time (getattr with a string built from
parts, an alias of getattr) never reaches that reading, so the same rule is applied to it as it
runs: the built-ins a submission's cells see (handlers.fresh_namespace) have a getattr, hasattr,
setattr and delattr that refuse what the reading would have refused (and a getattr that hands back no
module outside ALLOWED_MODULES), and a type whose three-argument form refuses the same names.  Either way, what a name
reaches is decided by the name, not by how it was spelled.

Refused: every attribute in INTERNAL_ATTRIBUTES (torch's operator registry and internals, the grader's
guard and counters, Triton's interpreter and compiler, a function's closure and globals), and, deny
by default, every double-underscore name that is not one of the data model's ordinary ones (PROTOCOL),
and every single-underscore name on something the submission did not define (torch._C, a module's
private helpers).  This file runs on both sides of the wall; it imports nothing of the grader.
"""

import builtins
import types

# Attributes that reach torch internals, the guard, or what a function keeps hidden.
INTERNAL_ATTRIBUTES = {
    "_C": "torch internals (torch._C)", "ops": "torch's operator namespace (torch.ops)",
    "library": "torch's operator registry (torch.library)", "_ops": "torch internals",
    "__closure__": "a function's closure", "__defaults__": "a function's hidden defaults",
    "__kwdefaults__": "a function's hidden defaults", "__wrapped__": "the function behind a wrapper",
    "__globals__": "another module's globals", "__code__": "another function's code",
    "cell_contents": "a function's closure", "__builtins__": "the interpreter's built-ins",
    "__dict__": "an object's attributes as a dictionary (a way around the names this reading checks)",
    "__getattribute__": "attributes by a name computed at run time", "__setattr__": "attributes set by a computed name",
    "__delattr__": "attributes removed by a computed name", "modules": "loaded modules (sys.modules), the grader's among them",
    "interpreter": "Triton's interpreter (the grader counts a kernel's work there)",
    "InterpreterBuilder": "Triton's interpreter (the grader counts a kernel's work there)",
    "interpreter_builder": "Triton's interpreter (the grader counts a kernel's work there)",
    "GridExecutor": "Triton's interpreter (the grader counts a kernel's work there)", "get_objects": "the garbage collector",
    "code_generator": "Triton's compiler (the grader checks a kernel's body with it)",
    "CodeGenerator": "Triton's compiler (the grader checks a kernel's body with it)",
    "get_referrers": "the garbage collector", "get_referents": "the garbage collector",
    "_destroy": "torch's operator registry", "_library": "the grader's guard", "_refuse": "the grader's guard",
    "GUARD": "the grader's guard", "_python_dispatch": "torch's dispatch modes (the grader's FLOP counter is one)",
    "flop_counter": "torch's FLOP counter", "_disable_current_modes": "torch's dispatch modes",
    "_pop_mode": "torch's dispatch modes", "_push_mode": "torch's dispatch modes",
    "_get_current_dispatch_mode": "torch's dispatch modes", "_get_current_dispatch_mode_stack": "torch's dispatch modes",
    "_DisableTorchDispatch": "torch's dispatch modes", "_unset_dispatch_mode": "torch's dispatch modes",
    "_getframe": "the interpreter's call stack (the grader's frames below the submission's)",
    "_current_frames": "the interpreter's call stack", "f_back": "the interpreter's call stack",
    "f_globals": "another frame's globals", "f_locals": "another frame's variables", "tb_frame": "the call stack",
    "gi_frame": "the call stack", "cr_frame": "the call stack", "ag_frame": "the call stack",
    "settrace": "a tracer that sees every frame", "setprofile": "a profiler that sees every frame",
    # The allowed modules' own evaluators of strings as code (typing evaluates annotations).
    "get_type_hints": "code evaluated from strings (typing)", "ForwardRef": "code evaluated from strings (typing)",
    "_eval_type": "code evaluated from strings (typing)", "singledispatch": "code evaluated from annotations",
    "singledispatchmethod": "code evaluated from annotations",
    # Deserialisers that run code: a pickle loaded from bytes the submission wrote.
    "allow_pickle": "a pickle loaded from bytes (code that runs as it loads)",
    "weights_only": "a pickle loaded from bytes (code that runs as it loads)",
}
# The data model's ordinary double-underscore names: a class defines and calls them.
PROTOCOL = {f"__{name}__" for name in (
    "init new call repr str len iter next getitem setitem delitem contains enter exit bool hash eq ne lt le gt ge "
    "add radd iadd sub rsub isub mul rmul imul matmul rmatmul truediv rtruediv floordiv mod pow neg pos abs "
    "float int index round name qualname doc class module version post_init slots all file "
    "setstate getstate copy deepcopy format reversed missing init_subclass class_getitem main").split()}
# The modules code in a notebook with measured or from-scratch exercises may use, deny by default: a
# module is allowed with its name here, or under a name that ends in ".*" here.  Not here, among others:
# sys, os, io, gc, inspect, traceback, ctypes, importlib, builtins, types, string, operator, pickle,
# threading, signal, mmap, socket (the interpreter's frames, objects, memory and file descriptors), and
# the parts of torch, NumPy and Triton that reach below their public API (torch.library, torch.ops,
# torch.utils' dispatch and FLOP counters, numpy.lib's raw strides, numpy.ctypeslib, triton.runtime).
ALLOWED_MODULES = (
    "__future__", "sys", "os", "os.path", "posixpath", "math", "cmath", "random", "time", "json", "typing", "dataclasses", "functools", "itertools",
    "collections", "collections.abc", "enum", "abc", "numbers", "statistics", "fractions", "decimal", "copy",
    "heapq", "bisect", "re", "textwrap", "pprint", "warnings", "contextlib", "einops", "einops.*",
    "matplotlib", "matplotlib.*", "mpl_toolkits.*",
    "numpy", "numpy.linalg", "numpy.random", "numpy.testing", "numpy.typing", "numpy.fft",
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.attention", "torch.nn.parameter",
    "torch.nn.modules", "torch.nn.modules.*", "torch.nn.utils", "torch.nn.utils.*", "torch.optim", "torch.optim.*",
    "torch.linalg", "torch.special", "torch.fft", "torch.autograd", "torch.autograd.function", "torch.autograd.grad_mode",
    "torch.cuda", "torch.backends", "torch.backends.*", "torch.testing", "torch.distributions", "torch.types",
    "torch.random", "torch.utils", "torch.utils.data", "torch.utils.checkpoint", "torch.amp", "torch.functional",
    "torch.serialization", "torch.version",
    "triton", "triton.language", "triton.language.*", "triton.testing",
)


# Modules allowed for a few of their attributes only: the rest of them reach the interpreter's state
# (sys.modules, its frames, its hooks) or raw descriptors (os.write on the grader's pipes).
ALLOWED_ATTRIBUTES = {
    "sys": {"stdout", "stderr", "version", "version_info", "platform", "maxsize", "float_info", "byteorder"},
    "os": {"path", "environ", "getcwd", "listdir", "makedirs", "cpu_count", "getpid", "sep", "linesep"},
}


def allowed_attribute(module, name):
    """May a measured notebook's own code read `name` on the module called `module`?"""
    return name in ALLOWED_ATTRIBUTES.get(module, (name,))


def allowed_module(name):
    """May a measured notebook's own code use this module?"""
    return any(name == allowed or (allowed.endswith(".*") and name.startswith(allowed[:-1]))
               for allowed in ALLOWED_MODULES)


def internal(name):
    """Why the attribute `name` is out of reach, whatever it is read on ('' when it is not)."""
    if name in INTERNAL_ATTRIBUTES:
        return INTERNAL_ATTRIBUTES[name]
    if name.startswith("__") and name.endswith("__") and name not in PROTOCOL:
        return "an interpreter attribute outside the data model's ordinary ones"
    return ""


def _own(value):
    """Defined by the submission: an instance or a class of a class its cells defined."""
    cls = value if isinstance(value, type) else type(value)
    return getattr(cls, "__module__", None) == "__main__"


def refused(value, name):
    if not isinstance(name, str):
        return ""
    why = internal(name)
    if not why and isinstance(value, types.ModuleType) and not allowed_attribute(value.__name__, name):
        why = f"{value.__name__}.{name}, outside what this course's measured notebooks may use of {value.__name__}"
    if not why and name.startswith("_") and not name.startswith("__") and not _own(value):
        why = "a private name of code the submission did not write"
    return why


def _module_refused(found):
    """A module getattr may not hand back: one outside the rule, or one allowed for some of its
    attributes only (sys, os), whose attributes, once it is a value, nothing would check."""
    if isinstance(found, types.ModuleType) and (not allowed_module(found.__name__)
                                                or found.__name__ in ALLOWED_ATTRIBUTES):
        return f"the module {found.__name__} as a value, which this course's measured notebooks may not hold"
    return ""


class ReachRefused(AttributeError):
    pass


def _checked(access):
    def checked(value, name, *rest):
        why = refused(value, name)
        if why:
            raise ReachRefused(f"{access.__name__}(..., {name!r}) is refused: it reaches {why}")
        found = access(value, name, *rest)
        why = _module_refused(found) if access is getattr else ""
        if why:
            raise ReachRefused(f"getattr(..., {name!r}) is refused: it reaches {why}")
        return found
    checked.__name__ = checked.__qualname__ = access.__name__
    checked.__doc__ = access.__doc__
    return checked


class _IsType(type):
    """isinstance(x, type) and issubclass(X, type) answer as for Python's own type."""

    def __instancecheck__(cls, value):
        return isinstance(value, type)

    def __subclasscheck__(cls, other):
        return issubclass(other, type)


class _Type(type, metaclass=_IsType):
    """type(name, bases, namespace) held to the rule: no attribute of a class made this way reaches what a
    class statement's could not (a NumPy array interface pointing anywhere in memory, say)."""

    def __new__(cls, *args, **kwargs):
        if len(args) == 3 and isinstance(args[2], dict):
            for name in args[2]:
                why = internal(name) if isinstance(name, str) else ""
                if why:
                    raise ReachRefused(f"type(..., {{{name!r}: ...}}) is refused: it reaches {why}")
        if cls is not _Type:   # a metaclass of the submission's own, derived from this type
            return super().__new__(cls, *args, **kwargs)
        return type.__new__(type, *args, **kwargs) if len(args) == 3 else type(*args)


def checked_builtins():
    """The built-ins of a submission's cells: Python's, with the attribute functions and type held to
    the rule."""
    names = dict(vars(builtins))
    for access in (getattr, hasattr, setattr, delattr):
        names[access.__name__] = _checked(access)
    names["type"] = _Type
    return names
