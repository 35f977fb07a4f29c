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
import io
import tokenize

from autograder.sandbox import inside_modules
from autograder.sandbox.inside.reach import INTERNAL_ATTRIBUTES, internal

FROM_SCRATCH_MESSAGE = ("No credit: this exercise must be written from scratch, but your code calls "
                        "torch's built-in attention (torch.nn.functional.scaled_dot_product_attention, "
                        "nn.MultiheadAttention or one of their kernels), or takes apart the guard that forbids it.")

# Modules whose import reaches below torch's public API or into the interpreter's own objects.
INTERNAL_MODULES = {"gc": "the garbage collector", "ctypes": "raw memory access", "torch._C": "torch internals",
                    "torch.utils._python_dispatch": "torch's dispatch modes (the grader's FLOP counter is one)",
                    "torch.utils.flop_counter": "torch's FLOP counter",
                    "torch.library": "torch's operator registry", "torch._ops": "torch internals",
                    "importlib": "re-importing modules", "inspect": "introspection of other code",
                    "_ctypes": "raw memory access", "builtins": "the interpreter's built-ins",
                    "triton.runtime": "Triton's launcher and interpreter (the grader counts a kernel's work there)",
                    "triton._C": "Triton internals",
                    "triton.compiler": "Triton's compiler (the grader checks a kernel's body with it)",
                    "triton.backends": "Triton's compiler (the grader checks a kernel's body with it)"}
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


def _reason(node):
    if isinstance(node, ast.Import):
        for alias in node.names:
            for module, why in INTERNAL_MODULES.items():
                if alias.name == module or alias.name.startswith(module + "."):
                    return f"imports {alias.name} ({why})"
    if isinstance(node, ast.ImportFrom) and node.module:
        for module, why in INTERNAL_MODULES.items():
            if node.module == module or node.module.startswith(module + "."):
                return f"imports from {node.module} ({why})"
        if node.module == "torch" and {alias.name for alias in node.names} & {"_C", "ops", "library", "_ops"}:
            return "imports torch internals"
        if node.module in ("guard", "autograder.sandbox.inside.guard"):
            return "imports the grader's guard"
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        for name in names:
            if name.split(".")[0] in SANDBOX_MODULES:
                return f"imports {name} (the grader's own code in the sandbox)"
    if isinstance(node, ast.Attribute) and node.attr == "modules" and getattr(node.value, "id", "") == "sys":
        return "uses sys.modules (loaded modules, the grader's among them)"
    if isinstance(node, ast.Attribute) and internal(node.attr):
        return f"uses .{node.attr} ({internal(node.attr)})"
    if isinstance(node, ast.ImportFrom) and node.module and any(internal(alias.name) for alias in node.names):
        name = next(alias.name for alias in node.names if internal(alias.name))
        return f"imports {name} from {node.module} ({internal(name)})"
    if isinstance(node, ast.Name) and node.id in INTERNAL_NAMES:
        return f"uses {node.id} ({INTERNAL_NAMES[node.id]})"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value.strip()
        if text in INTERNAL_ATTRIBUTES or text in INTERNAL_MODULES or text in ("aten", "torch.ops.aten"):
            return f"names {text!r} in a string (a way to reach {INTERNAL_ATTRIBUTES.get(text) or 'torch internals'})"
    return ""


def reaches_into_internals(source):
    """(line, reason) of the first place where code reaches into torch internals, the guard or the
    interpreter's hidden state; None for ordinary code.  Code that does not parse is read token
    by token, so a syntax error elsewhere hides nothing."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return _by_tokens(source)
    for node in ast.walk(tree):
        reason = _reason(node)
        if reason:
            return getattr(node, "lineno", 0), reason
    return None


def _by_tokens(source):
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME and (token.string in INTERNAL_ATTRIBUTES or token.string in INTERNAL_NAMES
                                                or token.string in ("gc", "ctypes")):
                return token.start[0], f"uses {token.string}"
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return None


def internals_flag(program, exercises):
    """The one-line flag for a notebook with from-scratch exercises or measured tests whose
    student-written code reaches into internals ('' when none)."""
    if not any(exercise.from_scratch or exercise.measured for exercise in exercises):
        return ""
    for label, source in program.written.items():
        found = reaches_into_internals(source)
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
