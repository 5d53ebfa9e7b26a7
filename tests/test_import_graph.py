"""The import graph of the project has no cycles, and `import sparsetir_py` stays light.

Every `import` and `from ... import` statement counts, at module level or inside a function (a
deferred import is still a dependency). A package's `__init__` is a node of its own; importing
`a.b` adds an edge to `a.b`, not to `a`, as import-graph tools read it. Circles made layering
unclear before: `ir/layout` imported `arith` (whose interval analysis imports `ir`), `ops`
imported `schedules` (whose modules imported the `sparsetir_py` package), and the interpreter
imported the lowering pass it is the oracle for, and `bench.paired` held both sides of a paired
run (`bench.runner -> bench.worker -> bench.paired -> bench.runner`).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sparsetir_py", "schedules", "format_rules", "bench")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _known(name: str, modules: dict[str, Path]) -> bool:
    return name in modules or f"{name}.__init__" in modules


def _import_nodes(tree: ast.Module, deferred: bool) -> list[ast.stmt]:
    """Every import statement, or (deferred=False) only those that run when the module is
    imported: not inside functions, not under `if TYPE_CHECKING:`."""
    if deferred:
        return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    found: list[ast.stmt] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            pending += node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending += node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
    return found


def import_graph(deferred: bool = True) -> dict[str, set[str]]:
    """module -> the project modules it imports (submodules named in `from a import b` count);
    with `deferred=False`, only the imports that run at import time."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _import_nodes(ast.parse(path.read_text()), deferred):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                # `from a import b` depends on module `a.b` when that is a module, else on `a`.
                base = _resolve(module, is_package, node.level, node.module)
                targets = [
                    f"{base}.{alias.name}" if _known(f"{base}.{alias.name}", modules) else base for alias in node.names
                ]
            else:
                continue
            for target in targets:
                for candidate in (target, f"{target}.__init__"):
                    if candidate in modules and candidate != module:
                        edges.add(candidate)
                        break
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def package_graph() -> dict[str, set[str]]:
    """The same graph between packages (`sparsetir_py.ir`, `sparsetir_py.arith`, ..., `schedules`,
    `bench`, and top-level modules such as `sparsetir_py.ops`), every import counted."""

    def package(module: str) -> str:
        parts = module.removesuffix(".__init__").split(".")
        return ".".join(parts[:2]) if parts[0] == "sparsetir_py" else parts[0]

    graph: dict[str, set[str]] = {}
    for module, edges in import_graph().items():
        source = package(module)
        targets = {package(t) for t in edges}
        graph.setdefault(source, set()).update(targets - {source})
    return graph


def private_imports(packages: tuple[str, ...]) -> list[tuple[str, str]]:
    """(module, name) for every `from m import _name` in `packages` whose `m` is another module
    of the project: a module's underscore names are its own (STYLE.md 17)."""
    modules = _modules()
    found = []
    for module, path in modules.items():
        if module.startswith(packages):
            found += _private_names(module, path.name == "__init__.py", ast.parse(path.read_text()), modules)
    return found


def _private_names(module: str, is_package: bool, tree: ast.Module, modules: dict[str, Path]) -> list[tuple[str, str]]:
    found = []
    for node in _import_nodes(tree, deferred=True):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = _resolve(module, is_package, node.level, node.module)
        if _known(base, modules) and base != module:
            found += [(module, f"{base}.{alias.name}") for alias in node.names if alias.name.startswith("_")]
    return found


def test_no_import_cycles_between_packages():
    """Counting every import, deferred and type-only ones too."""
    assert cycles(package_graph()) == []


def test_no_import_cycles_at_import_time():
    """Between modules, counting what runs on import (a method that imports the printer lazily,
    as `PrimFunc.script()` does, is not a cycle of import order)."""
    assert cycles(import_graph(deferred=False)) == []


def test_no_import_cycles_in_the_tools():
    """Between the modules of `bench`, `schedules` and `format_rules`, deferred imports counted: a
    deferred import hides a circle from the import-time test only (`bench.worker` imported the
    paired run's worker side inside `main`)."""
    tools = ("bench.", "schedules.", "format_rules.")
    graph = {m: {t for t in edges if t.startswith(tools)} for m, edges in import_graph().items() if m.startswith(tools)}
    assert cycles(graph) == []


def test_no_private_names_across_modules():
    """The package, the benchmark, the shipped schedules and rule files use public names of the
    modules they import."""
    assert private_imports(("sparsetir_py.", "bench.", "schedules.", "format_rules.")) == []


def test_private_import_detection():
    tree = ast.parse("from .worker import _Wrong, run_paired\nfrom . import protocol\nfrom os import _exit")
    assert _private_names("bench.paired", False, tree, _modules()) == [("bench.paired", "bench.worker._Wrong")]


def test_cycle_detection_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_layers():
    """`ir` depends on no analysis, pass or backend; `arith` on no pass; the interpreter on no pass."""
    graph = import_graph()
    rules = {
        "sparsetir_py.ir.": (
            "sparsetir_py.arith",
            "sparsetir_py.transform",
            "sparsetir_py.codegen",
            "sparsetir_py.runtime",
            "sparsetir_py.schedule",
            "sparsetir_py.format",
        ),
        "sparsetir_py.arith.": (
            "sparsetir_py.transform",
            "sparsetir_py.codegen",
            "sparsetir_py.runtime",
            "sparsetir_py.schedule",
        ),
        "sparsetir_py.transform.": ("sparsetir_py.codegen", "sparsetir_py.runtime", "sparsetir_py.schedule"),
        "sparsetir_py.interp.": ("sparsetir_py.transform", "sparsetir_py.codegen", "sparsetir_py.runtime"),
        # Schedules read like a user's file: the schedule API and the errors, no IR walking.
        "schedules.": (
            "sparsetir_py.__init__",
            "sparsetir_py.ops",
            "sparsetir_py.ir",
            "sparsetir_py.arith",
            "sparsetir_py.transform",
            "sparsetir_py.format",
            "sparsetir_py.codegen",
            "sparsetir_py.runtime",
        ),
    }
    bad = [
        (module, target)
        for module, edges in graph.items()
        for prefix, forbidden in rules.items()
        if module.startswith(prefix)
        for target in edges
        if target.startswith(forbidden)
    ]
    assert bad == []


def test_import_is_light():
    """`import sparsetir_py` loads neither numba.cuda (the CUDA runtime helpers live in
    `runtime/` and are imported by generated kernels only) nor the shipped schedules."""
    code = "import sys, sparsetir_py; print(sorted(m for m in ('numba.cuda', 'schedules') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
