"""`python -m tests.floors`: the grader's import floors, written into docs/layout.md between its two
markers; tests/test_layout.py checks that the page holds what this makes, that no import goes in a
circle, and that nothing bound into the sandbox imports the rest of the grader.

A module's floor is one more than the highest floor among the grader's modules it imports (a module
that imports none of them is on floor 1), so an import always points down a floor or more.  The
import graph is grimp's, read from the source without running it."""

import ast
import sys
from functools import cache

import grimp

from autograder.readme import between
from autograder.sandbox import INSIDE_DIR
from tests.notebooks import ROOT

PAGE = ROOT / "docs" / "layout.md"
START = "<!-- floors: written by python -m tests.floors -->"
END = "<!-- end of floors -->"
MOST_FLOORS = 10


def graph():
    return grimp.build_graph("autograder", cache_dir=None)


def imports(built, module):
    """The grader's modules `module` imports, less its own packages (imported with it anyway)."""
    return {other for other in built.find_modules_directly_imported_by(module)
            if other != module and not module.startswith(other + ".")}


def cycles(built):
    """Every chain of imports that comes back to where it started, as a list of modules."""
    found, done = [], set()

    def walk(module, path):
        if module in path:
            found.append(path[path.index(module):] + [module])
            return
        if module in done:
            return
        for other in sorted(imports(built, module)):
            walk(other, path + [module])
        done.add(module)

    for module in sorted(built.modules):
        walk(module, [])
    return found


def floors(built):
    """{module: floor} over the grader's modules (the import graph must have no cycle)."""
    @cache
    def floor(module):
        return 1 + max((floor(other) for other in imports(built, module)), default=0)
    return {module: floor(module) for module in built.modules}


def drawing(built):
    """The floors, top first, as docs/layout.md shows them: packages named once, suites' test modules
    and packages' __init__ left out (the suites are one module per exercise, all alike)."""
    by_floor = {}
    for module, level in floors(built).items():
        name = module.removeprefix("autograder.")
        if name == "autograder" or name.rsplit(".", 1)[-1].startswith("test_") or built.find_children(module):
            continue
        by_floor.setdefault(level, []).append(name)
    lines = ["```"]
    for level in sorted(by_floor, reverse=True):
        lines.append(f"{level:>2}  " + "  ".join(sorted(by_floor[level])))
    return "\n".join(lines + ["```"])


def inside_imports():
    """(file, module) for every import in autograder/sandbox/inside/ of the grader's own package, or
    relative: bound alone into the sandbox, its modules import each other by their own names."""
    found = []
    for path in sorted(INSIDE_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [("." * node.level) + (node.module or "")] if isinstance(node, ast.ImportFrom) else []
            found += [(path.name, name) for name in names if name.startswith((".", "autograder"))]
    return found


def written(text, built=None):
    return between(text, START, END, drawing(built or graph()))


def main():
    text = PAGE.read_text()
    if START not in text:
        sys.exit(f"{PAGE} has no marker {START!r}")
    PAGE.write_text(written(text))
    print(drawing(graph()))


if __name__ == "__main__":
    main()
