"""A kernel run in Triton's interpreter is held to what Triton's GPU compiler accepts (this file runs
in the sandbox, beside the submission, as kernels.py does).

In the interpreter a @triton.jit kernel's body is ordinary Python: it could call NumPy on the tiles it
loaded, keep Python lists, or run anything else, none of which a GPU compiles.  So before a kernel
runs for the first time with given argument types and constants (one specialization, as Triton
compiles a kernel once for each), `check()` compiles it the way Triton would for an NVIDIA GPU
(compute capability 9.0) without needing one: Triton's own front end turns the body into its IR
(ttir), which is where a body that is not Triton's language is refused: the call stops with
NotTriton, which names the kernel, the line and the compiler's words.

Triton under TRITON_INTERPRET=1 makes every @triton.jit function (Triton's own library's too) an
interpreter object; the compiler needs them as JIT functions.  `twin` makes one for each, over the
same Python function, whose globals the compiler reads with the twins in place, and `_language()`
gives the compiler copies of triton.language's modules that hold the twins.
"""

import contextlib
import hashlib
import sys
import types

from triton import knobs
from triton._C.libtriton import ir
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend
from triton.compiler.errors import CompilationError
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction, create_function_from_signature

TARGET = GPUTarget("cuda", 90, 32)   # an H100's compute capability and warp size
BACKEND = make_backend(TARGET)
_CHECKED = {}                        # specialization -> the NotTriton message, or "" when it compiled
_TWINS = {}
_LANGUAGE = {}
_ABSENT = object()


def _attributes():
    """(owner, name) -> value of triton.language's modules and their classes."""
    found = {}
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("triton.language") and isinstance(module, types.ModuleType):
            for name, value in vars(module).items():
                found[(module, name)] = value
                if isinstance(value, type) and value.__module__.startswith("triton.language"):
                    found.update(((value, key), member) for key, member in vars(value).items())
    return found


# The interpreter replaces triton.language's operations with its own while a kernel runs, and leaves
# some replaced (those its library's @triton.jit functions reach): the compiler needs them as they were
# before any kernel ran, when this module is imported (kernels.py, in the warm worker).
PRISTINE = _attributes()


class NotTriton(Exception):
    """A kernel's body is not what Triton's GPU compiler accepts."""


class Twin(JITFunction):
    """A JIT function over an interpreted function's Python function, whose globals the compiler
    reads with every interpreted function replaced by its twin."""

    def get_capture_scope(self):
        return {name: twin(found) for name, found in super().get_capture_scope().items()}

    @property
    def cache_key(self):   # Triton's own walks the globals, which hold interpreter objects
        return hashlib.sha256(self.src.encode()).hexdigest()


def twin(value):
    """The Twin of an interpreted function (anything else as it is)."""
    if not isinstance(value, InterpretedFunction):
        return value
    if value not in _TWINS:
        _TWINS[value] = Twin(value.fn)
    return _TWINS[value]


def check(kernel, args, kwargs):
    """Raise NotTriton unless the interpreted kernel, launched with args and kwargs, compiles for a
    GPU.  Each specialization is compiled once per process."""
    jit = twin(kernel)
    bound, specialization, options = create_function_from_signature(jit.signature, jit.params, BACKEND)(
        *args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(BACKEND, kwargs, bound, specialization, options)
    key = (jit, tuple(signature.items()), repr(sorted(constexprs.items())))
    if key not in _CHECKED:
        with _as_compiled():
            try:
                _compile(ASTSource(jit, signature, constexprs, attrs), options)
                _CHECKED[key] = ""
            except CompilationError as error:
                _CHECKED[key] = _describe(jit, error)
    if _CHECKED[key]:
        raise NotTriton(_CHECKED[key])


def warm():
    """Check one small kernel of the grader's own, in the warm worker before any child is forked (kernels.py):
    a process's first check loads the compiler's modules and dialects and makes the twins of Triton's library
    and the copies of triton.language, a tenth of a second that every child would otherwise pay."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def weights(S, P, N: tl.constexpr):
        rows, cols = tl.arange(0, N)[:, None], tl.arange(0, N)[None, :]
        s = tl.load(S + rows * N + cols, mask=cols <= rows, other=-float("inf"))
        p = tl.exp(s - tl.max(s, axis=1)[:, None])
        tl.store(P + rows * N + cols, tl.dot(p / tl.sum(p, axis=1)[:, None], p))

    check(weights, (torch.zeros(16, 16), torch.zeros(16, 16)), {"N": 16})


@contextlib.contextmanager
def _as_compiled():
    """triton.language as the compiler knows it (not interpreting, its operations as they were before
    any kernel ran), for the time of a compilation; then as the interpreter left it."""
    replaced = [(owner, name, value, owner.__dict__.get(name, _ABSENT)) for (owner, name), value in PRISTINE.items()
                if owner.__dict__.get(name, _ABSENT) is not value]
    interpreting = knobs.runtime.interpret
    knobs.runtime.interpret = False
    for owner, name, value, _ in replaced:
        setattr(owner, name, value)
    try:
        yield
    finally:
        knobs.runtime.interpret = interpreting
        for owner, name, _, now in replaced:
            if now is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, now)


def _compile(source, options):
    """Triton's front end: the body turned into Triton's IR, which it then verifies (where a body that is
    not Triton's language is refused).  The IR's optimisation passes and the GPU's layout that follow
    in a real compilation refuse nothing more and would double the cost."""
    context = ir.context()
    ir.load_dialects(context)
    BACKEND.load_dialects(context)
    source.make_ir(TARGET, options, BACKEND.get_codegen_implementation(options),
                   {**BACKEND.get_module_map(), **_language()}, context)


def _describe(jit, error):
    """One line: the kernel, the line of its body the compiler stopped at, and why."""
    lines = (error.src or "").split("\n")
    line = getattr(error.node, "lineno", 0)
    code = f" at `{lines[line - 1].strip()[:120]}`" if 0 < line <= len(lines) else ""
    cause = (error.error_message or "it does not compile").strip().splitlines()[-1][:300]
    return (f"{jit.__name__}{code}: {cause}. The kernel's body is not Triton that a GPU compiles (in the "
            f"interpreter it runs as Python; on a GPU only Triton's language does): compute with tl operations "
            f"on the tiles you load, not NumPy, Python lists or torch")


def _language():
    """Copies of triton.language's modules that hold @triton.jit functions, with the twins in them
    (the compiler maps a module it meets to its copy by name)."""
    if not _LANGUAGE:
        names = ("triton.language", "triton.language.standard", "triton.language.random")
        copies = {name: types.ModuleType(name) for name in names}
        for name, copy in copies.items():
            copy.__dict__.update({key: copies.get(getattr(value, "__name__", None), value)
                                  if isinstance(value, types.ModuleType) else twin(value)
                                  for key, value in vars(sys.modules[name]).items()})
        _LANGUAGE.update(copies)
    return _LANGUAGE
