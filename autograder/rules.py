"""Course rules that decide a score beyond what the hidden tests check.

The from-scratch rule: an exercise marked `from_scratch: true` in course.yml earns nothing when
its code calls torch's built-in attention, or when code the student wrote in that notebook
reaches into the machinery that could get around that (torch internals, the guard, the
garbage collector, a function's hidden defaults or closure).

It is enforced twice.  Where the student's code runs (sandbox/inside/guard.py), torch's attention
raises during that exercise's calls, and a guard found taken apart after a call counts as a use.
Here, on the trusted side, the code the student wrote is read before anything of it counts:
`reaches_into_internals` is what a student cannot switch off from inside their process.
Such an answer scores 0 for the from-scratch exercises of its notebook, with the line and the
reason, and is flagged to the instructor (grades.csv's `flags`, the report).
"""

import ast
import builtins
import functools
import importlib.util
import io
import os
import re
import sys
import tokenize
import types

from autograder.sandbox import inside_modules
from autograder.sandbox.inside.reach import PROTOCOL, allowed_attribute, allowed_module, internal, private

FROM_SCRATCH_MESSAGE = ("No credit: this exercise must be written from scratch, but your code calls "
                        "torch's built-in attention (torch.nn.functional.scaled_dot_product_attention, "
                        "nn.MultiheadAttention or one of their kernels), or takes apart the guard that forbids it.")

# Attributes that reach torch internals, the guard, or what a function keeps hidden: one rule for written
# and computed names (reach.py applies it to computed ones as the submission runs).
INTERNAL_NAMES = {"GUARD": "the grader's guard", "Guard": "the grader's guard", "__import__": "re-importing modules",
                  "guard": "the grader's guard", "BuiltinAttentionForbidden": "the grader's guard",
                  "__builtins__": "the interpreter's built-ins", "eval": "code built from text",
                  "exec": "code built from text", "compile": "code built from text", "globals": "module globals",
                  "TorchDispatchMode": "torch's dispatch modes (the grader's FLOP counter is one)",
                  "FlopCounterMode": "torch's FLOP counter", "no_dispatch": "torch's dispatch modes",
                  "Counted": "the grader's FLOP counter",
                  "vars": "an object's attributes as a dictionary (a way around the names this reading checks)",
                  "attrgetter": "attributes by a name computed at run time"}
# The grader's own modules, importable inside the sandbox: every module of autograder/sandbox/inside/.
SANDBOX_MODULES = inside_modules()


# Built-ins that code in a measured notebook may use, deny by default: the others reach code built from
# text (eval, exec, compile), namespaces as dictionaries (globals, locals, vars), memory addresses (id),
# files and descriptors (open), the import machinery (__import__) or the debugger (breakpoint).
ALLOWED_BUILTINS = set("""abs all any ascii bin bool bytearray bytes callable chr classmethod complex delattr dict dir
    divmod enumerate filter float format frozenset getattr hasattr hash hex int isinstance issubclass iter len list
    map max min next object oct ord pow print property range repr reversed round set setattr slice sorted
    staticmethod str sum super tuple type zip NotImplemented Ellipsis __name__ __doc__""".split())
_BUILTINS = set(dir(builtins))


def _allowed_builtin(name):
    value = getattr(builtins, name, None)
    return name in ALLOWED_BUILTINS or (isinstance(value, type) and issubclass(value, BaseException))


def _module(name):
    """The module object for a dotted name where the grader has it loaded (torch, NumPy: the suites'); else
    None.  Nothing is imported to read a notebook (Triton alone would cost each grading process a second)."""
    return sys.modules.get(name)


@functools.lru_cache(maxsize=None)
def _on_disk(name):
    """Is the dotted name a module of an installed package, found without importing it?"""
    top, *parts = name.split(".")
    try:
        spec = importlib.util.find_spec(top) if not parts or top not in sys.modules else sys.modules[top].__spec__
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    folders = list(spec.submodule_search_locations or ())
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        packages = [os.path.join(folder, part) for folder in folders if os.path.isdir(os.path.join(folder, part))]
        if last and (packages or any(entry.startswith(part + ".") and entry.endswith((".py", ".so"))
                                     for folder in folders if os.path.isdir(folder) for entry in os.listdir(folder))):
            return True
        folders = packages
    return not parts


class Reading:
    """One reading of a notebook's code: what each name that code binds to a module stands for (aliases,
    from the whole notebook: its locked cells import torch as the student's cells use it), and what the
    student's own code defines (a private name it wrote is its own).  `reason(node)` says why a node
    reaches out of bounds ('' when it does not)."""

    def __init__(self, tree, context=()):
        self.aliases = {}
        for source in (*context, tree):
            self._bind(source if isinstance(source, ast.AST) or source is None else _parse(source))
        self.defined = {getattr(node, "name", None) or getattr(node, "id", None) or getattr(node, "attr", None)
                        or getattr(node, "arg", None)
                        for node in ast.walk(tree)
                        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.arg))
                        or (isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store))}

    def _bind(self, tree):
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        self.aliases.setdefault(alias.name.split(".")[0], alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if self._is_module(node.module, alias.name):
                        self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                dotted = self._dotted(node.value)
                value = self._resolve(dotted) if dotted else None
                if isinstance(value, types.ModuleType):
                    self.aliases[node.targets[0].id] = value.__name__

    @staticmethod
    def _is_module(package, name):
        loaded = _module(package)
        if loaded is not None:
            return isinstance(getattr(loaded, name, None), types.ModuleType)
        return _on_disk(f"{package}.{name}")

    def _dotted(self, node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return [self.aliases[node.id], *reversed(parts)]
        return None

    @staticmethod
    def _resolve(dotted):
        value = _module(dotted[0])
        for part in dotted[1:]:
            if not isinstance(value, types.ModuleType):
                return value
            value = getattr(value, part, None)
        return value

    def _module_reached(self, node):
        """The module outside ALLOWED_MODULES an attribute chain rooted at a module reaches, or None."""
        dotted = self._dotted(node)
        if not dotted:
            return None
        name, value = dotted[0], _module(dotted[0])
        for part in dotted[1:]:
            if not allowed_attribute(name, part):
                return f"{name}.{part}"
            if value is None:                    # a module the grader has not loaded: its submodules on disk
                if not _on_disk(f"{name}.{part}"):
                    return None
                name = f"{name}.{part}"
            else:
                value = getattr(value, part, None)
                if not isinstance(value, types.ModuleType):
                    return None
                name = value.__name__
            if not allowed_module(name):
                return name
        return None

    def reason(self, node):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return self._import_reason(node)
        if isinstance(node, ast.Attribute):
            if internal(node.attr):
                return f"uses .{node.attr} ({internal(node.attr)})"
            if node.attr in _MODULE_NAMES and self._dotted(node) is None:
                return f"uses .{node.attr} on a value the reading cannot follow (a module by that name is {_why(node.attr)})"
            if private(node.attr) and node.attr not in self.defined:
                return f"uses .{node.attr} (a private name of code it did not write)"
            reached = self._module_reached(node)
            if reached:
                return f"reaches {reached}: {_why(reached)}"
        if isinstance(node, ast.Name):
            if node.id in INTERNAL_NAMES:
                return f"uses {node.id} ({INTERNAL_NAMES[node.id]})"
            if node.id in _BUILTINS and node.id not in self.defined and not _allowed_builtin(node.id):
                return f"uses the built-in {node.id} (not among those a measured notebook's code may use)"
            if internal(node.id):
                return f"uses {node.id} ({internal(node.id)})"
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and internal(node.name):
            return f"defines {node.name} ({internal(node.name)})"
        if isinstance(node, ast.keyword) and node.arg and internal(node.arg):
            return f"passes {node.arg}= ({internal(node.arg)})"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return _string_reason(node.value) or self._as_code(node.value)
        return ""

    def _as_code(self, text):
        """A string that is a Python expression may become code without eval: typing evaluates the
        strings it is given as annotations (get_type_hints, a dataclass or NamedTuple made from names and
        strings, functools.singledispatch).  Such a string is read as the code it is."""
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError):
            return ""
        if isinstance(tree.body, (ast.Name, ast.Constant)):
            return ""   # a bare word or number: the reading of names and strings above has seen it
        for node in ast.walk(tree):
            reason = "" if isinstance(node, ast.Constant) else self.reason(node)
            if reason:
                return f"a string that is code: {reason}"
        return ""

    def _import_reason(self, node):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif node.level:
            return "imports relative to a package (the grader's own code in the sandbox)"
        else:
            names = [f"{node.module}.{alias.name}" if self._is_module(node.module, alias.name) else node.module
                     for alias in node.names]
            for alias in node.names:
                if internal(alias.name) or private(alias.name):
                    return f"imports {alias.name} from {node.module} ({internal(alias.name) or 'a private name'})"
                if not allowed_attribute(node.module, alias.name):
                    return f"imports {alias.name} from {node.module}: {_why(node.module)}"
        for name in names:
            if name.split(".")[0] in SANDBOX_MODULES:
                return f"imports {name} (the grader's own code in the sandbox)"
            if not allowed_module(name):
                return f"imports {name}: {_why(name)}"
        return ""


NOT_ALLOWED = "not among the modules a measured notebook's code may use"
# Names of the modules that reach the interpreter's state, memory, descriptors or evaluation of text,
# and of the parts of torch and NumPy below their public API: allowed modules hold some of them as
# attributes (torch.os, torch.inspect, numpy.lib), so read on a value the reading cannot follow to its
# module ([torch][0].inspect, a parameter's .os) such a name is refused.  sys and os are allowed for a
# few attributes, which only a followed chain can check.  (Names that are also tensor methods, such as
# select, are left out: the chain through an allowed module is still followed where it can be.)
_MODULE_NAMES = frozenset("""os sys inspect builtins ctypes importlib gc traceback types pickle marshal io
    subprocess threading _thread multiprocessing signal mmap socket string operator code codeop runpy pdb
    timeit weakref atexit faulthandler tracemalloc ast dis linecache pkgutil zipimport shutil tempfile fcntl
    posix asyncio concurrent lib ctypeslib fx jit overrides compiler export hub profiler""".split())

MODULE_WHY = {"gc": "the garbage collector", "ctypes": "raw memory access", "torch._C": "torch internals",
              "torch.utils._python_dispatch": "torch's dispatch modes (the grader's FLOP counter is one)",
              "torch.utils.flop_counter": "torch's FLOP counter", "torch.library": "torch's operator registry",
              "torch._ops": "torch internals", "importlib": "re-importing modules", "inspect": "introspection of other code",
              "builtins": "the interpreter's built-ins", "sys": "the interpreter's state beyond its streams and version (its modules, its frames)",
              "os": "files and descriptors beyond paths (the grader's pipes among them)", "traceback": "the call stack",
              "string": "attributes by a name computed at run time (Formatter.get_field)",
              "operator": "attributes by a name computed at run time (attrgetter, methodcaller)",
              "triton.runtime": "Triton's launcher and interpreter (the grader counts a kernel's work there)",
              "numpy.lib": "raw strides over any memory (numpy.lib.stride_tricks)"}


def _why(name):
    """Why a module (or one of its attributes, "os.write") is out of bounds, in a few words."""
    return MODULE_WHY.get(name) or MODULE_WHY.get(name.split(".")[0]) or NOT_ALLOWED


def _string_reason(text):
    """A string that names what the code may not reach: a refused attribute, whole or as a dotted part
    ("0.f_globals", a format field), or a module outside ALLOWED_MODULES."""
    stripped = text.strip()
    if stripped in ("aten", "torch.ops.aten"):
        return f"names {stripped!r} in a string (a way to reach torch internals)"
    if not stripped or any(character.isspace() for character in stripped):
        return ""   # prose, not a name
    for part in re.split(r"[^A-Za-z0-9_]+", stripped):
        if part and internal(part) and part not in PROTOCOL:
            return f"names {part!r} in a string (a way to reach {internal(part)})"
    return ""


def _parse(source):
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def reaches_into_internals(source, context=()):
    """(line, reason) of the first place where code reaches out of what a measured notebook's code may
    use (torch internals, the guard, the counters, the interpreter's frames and objects, files and
    descriptors); None for ordinary code.  context: the sources of the notebook's other cells, where the
    names it uses for modules are bound (as text, or parsed).  Code that does not parse is read token by token, so a syntax
    error elsewhere hides nothing."""
    tree = _parse(source)
    if tree is None:
        return _by_tokens(source)
    reading = Reading(tree, context)
    for node in ast.walk(tree):
        reason = reading.reason(node)
        if reason:
            return getattr(node, "lineno", 0), reason
    return None


def _by_tokens(source):
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME and (internal(token.string) or token.string in INTERNAL_NAMES
                                                or token.string in _MODULE_NAMES):   # nothing can be followed
                return token.start[0], f"uses {token.string}"
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return None


def internals_flag(program, exercises):
    """The one-line flag for a notebook with from-scratch exercises or measured tests whose
    student-written code reaches into internals ('' when none)."""
    if not any(exercise.from_scratch or exercise.measured for exercise in exercises):
        return ""
    context = [_parse(cell.source) for cell in program.cells] if hasattr(program, "cells") else []  # parsed once
    for label, source in program.written.items():
        found = reaches_into_internals(source, context)
        if found:
            where = f"cell {label}" if not label.isdigit() else f"code cell #{label}"
            return f"{where}, line {found[0]}: {found[1]}"
    return ""


MEASURED_MESSAGE = ("No credit: this point is measured (memory, counted work, what a cache serves), and your code "
                    "reaches into what measures it ({flag}). Your instructor has been told.")


def broken_rules(exercises, student, flag=""):
    """exercise id -> the message that replaces every test's outcome, for exercises that broke a rule;
    (exercise id, test) -> the message that replaces that test's, for measured tests in a notebook
    whose code reaches into internals.  flag: what internals_flag found in the notebook."""
    broken = {}
    for exercise in exercises:
        if flag and not exercise.from_scratch:
            broken.update({(exercise.id, test): MEASURED_MESSAGE.format(flag=flag) for test in exercise.measured})
        if not exercise.from_scratch:
            continue
        if flag:
            broken[exercise.id] = (f"No credit: this exercise must be written from scratch, without torch's built-in "
                                   f"attention, and your code reaches into what enforces that ({flag}). Your "
                                   f"instructor has been told.")
        elif exercise.id in student.builtin_attention_users:
            broken[exercise.id] = FROM_SCRATCH_MESSAGE
    return broken
