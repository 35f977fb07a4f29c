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

# Attributes that reach torch internals, the guard, the counters, the call stack or what a function keeps
# hidden, by what each reaches.
_REACHES = {
    'torch internals (torch._C)': '_C',
    "torch's operator namespace (torch.ops)": 'ops',
    "torch's operator registry (torch.library)": 'library',
    'torch internals': '_ops',
    "a function's closure": '__closure__ cell_contents',
    "a function's hidden defaults": '__defaults__ __kwdefaults__',
    'the function behind a wrapper': '__wrapped__',
    "another module's globals": '__globals__',
    "another function's code": '__code__',
    "the interpreter's built-ins": '__builtins__',
    "an object's attributes as a dictionary (a way around the names this reading checks)": '__dict__',
    'attributes by a name computed at run time': '__getattribute__',
    'attributes set by a computed name': '__setattr__',
    'attributes removed by a computed name': '__delattr__',
    "loaded modules (sys.modules), the grader's among them": 'modules',
    "Triton's interpreter (the grader counts a kernel's work there)":
        'interpreter InterpreterBuilder interpreter_builder GridExecutor',
    'the garbage collector': 'get_objects get_referrers get_referents',
    "Triton's compiler (the grader checks a kernel's body with it)": 'code_generator CodeGenerator',
    "torch's operator registry": '_destroy',
    "the grader's guard": '_library _refuse GUARD',
    "torch's dispatch modes (the grader's FLOP counter is one)": '_python_dispatch',
    "torch's FLOP counter": 'flop_counter',
    "torch's dispatch modes":
        "_disable_current_modes _pop_mode _push_mode _get_current_dispatch_mode _get_current_dispatch_mode_stack "
        "_DisableTorchDispatch _unset_dispatch_mode",
    "the interpreter's call stack (the grader's frames below the submission's)": '_getframe',
    "the interpreter's call stack": '_current_frames f_back',
    "another frame's globals": 'f_globals',
    "another frame's variables": 'f_locals',
    'the call stack': 'tb_frame gi_frame cr_frame ag_frame',
    'a tracer that sees every frame': 'settrace',
    'a profiler that sees every frame': 'setprofile',
    'code evaluated from strings (typing)': 'get_type_hints ForwardRef _eval_type',
    'code evaluated from annotations': 'singledispatch singledispatchmethod',
    'a pickle loaded from bytes (code that runs as it loads)': 'allow_pickle weights_only',
}
INTERNAL_ATTRIBUTES = {name: reason for reason, names in _REACHES.items() for name in names.split()}
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
    "triton", "triton.language", "triton.language.*", "triton.testing", "triton.tools.tensor_descriptor",
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


def private(name):
    """A single-underscore name: a module's or a class's own, not the data model's."""
    return name.startswith("_") and not name.startswith("__")


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
    if not why and private(name) and not _own(value):
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
