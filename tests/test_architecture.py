"""The import rules of docs/architecture.md, read from the source (no import is executed).

Every `import` in src/corral is an edge of one of three kinds: module-level (run when the module is
imported; class bodies and `try`/`if` blocks included), typing-only (under `if TYPE_CHECKING:`) and
deferred (inside a function). The scheduling core must not reach anything but the standard library,
at any depth and through any kind of edge; no module-level cycle may exist; and the cycles that exist
through typing-only or deferred edges are exactly those listed in KNOWN_CYCLES, so that a new one
fails here. import-linter (`make check`) checks the package-level rules (pyproject.toml).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MODULE_LEVEL, TYPING, DEFERRED = "module-level", "typing-only", "deferred"

# Stdlib-only helpers the core shares with the Slurm commands (which load them on their start-up path,
# so they live outside any package that imports more): the core may use them, and they must themselves
# stay on the standard library.
CORE_MAY_USE = {"corral.gpu_models", "corral.hostlist", "corral.jobref"}

# Cycles through typing-only or deferred imports, as sets of modules. Remove an entry when its cycle is
# gone; never add one to make a new cycle pass.
KNOWN_CYCLES: list[set[str]] = []


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "corral").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if "migrations" in parts:  # alembic's scripts, loaded by path, not imported
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path) -> list[tuple[str, str]]:
    """(imported module, kind) for every import statement of one module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: list[tuple[str, str]] = []

    def target(module: str, level: int) -> str:
        if not level:
            return module
        base = package.split(".")
        base = base[:len(base) - (level - 1)]
        return ".".join(base + ([module] if module else []))

    def visit(node: ast.AST, kind: str) -> None:
        if isinstance(node, ast.Import):
            edges.extend((alias.name, kind) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = target(node.module or "", node.level)
            for alias in node.names:  # `from package import module` imports the module
                sub = f"{module}.{alias.name}"
                edges.append((sub if sub in MODULES else module, kind))
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, TYPING)
            for child in node.orelse:
                visit(child, kind)
        else:
            inner = DEFERRED if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else kind
            for child in ast.iter_child_nodes(node):
                visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), MODULE_LEVEL)
    return edges


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _internal(imported: str) -> str | None:
    """The corral module an import names (a name inside a module counts as the module), else None."""
    while imported and imported not in MODULES:
        imported = imported.rpartition(".")[0]
    return imported or None


def _is_stdlib(imported: str) -> bool:
    top = imported.partition(".")[0]
    return top in sys.stdlib_module_names or top == "__future__"


def _cycles(kinds: set[str]) -> list[set[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    edges = {name: {m for imp, kind in GRAPH[name] if kind in kinds and (m := _internal(imp)) is not None}
             for name in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges[v]:
                found.append(component)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(MODULES)))
    for name in sorted(MODULES):
        if name not in index:
            connect(name)
    return found


def test_the_graph_is_read():
    assert "corral.core.scheduler" in MODULES and "corral.engine.engine" in MODULES
    assert ("corral.core.cycle", MODULE_LEVEL) in GRAPH["corral.core.scheduler"]
    assert ("corral.engine.active", MODULE_LEVEL) in GRAPH["corral.engine.engine"]
    assert ("corral.controller.restore", DEFERRED) in GRAPH["corral.controller.service_core"]


def test_core_reaches_only_the_standard_library():
    """corral.core and everything it imports, at any depth and through any kind of import."""
    seen: set[str] = set()
    todo = [name for name in MODULES if name == "corral.core" or name.startswith("corral.core.")]
    outside = []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for imported, kind in GRAPH[name]:
            module = _internal(imported)
            if module is None:
                if not _is_stdlib(imported):
                    outside.append(f"{name} imports {imported} ({kind})")
            elif module.startswith("corral.core") or module in CORE_MAY_USE or module == "corral":
                todo.append(module)
            else:
                outside.append(f"{name} imports {module} ({kind})")
    assert outside == []


def test_no_module_level_import_cycle():
    assert _cycles({MODULE_LEVEL}) == []


def test_no_cycle_but_the_known_ones():
    cycles = _cycles({MODULE_LEVEL, TYPING, DEFERRED})
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert new == [], "a new import cycle: break it (a cycle through TYPE_CHECKING counts too)"
    assert gone == [], "a known cycle is gone or changed: update KNOWN_CYCLES"
