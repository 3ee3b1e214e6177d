"""The package's import graph: no circle among module-level imports, and every module
imports on its own.

`module_imports` reads each module's top-level imports with `ast` (imports under
`if TYPE_CHECKING:` and inside functions are left out: they run later, or never);
`cycles` finds the circles among them. A package's own `__init__` is never counted as
imported by its submodules: it is always imported before them.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import streambed

ROOT = Path(streambed.__file__).parent
PACKAGE = "streambed"


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    out: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported: its own statements, and those in
    top-level `if`/`try`/`with` blocks, but not under `if TYPE_CHECKING:`."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _top_level(block)
            for handler in node.handlers:
                yield from _top_level(handler.body)
        elif isinstance(node, ast.With):
            yield from _top_level(node.body)


def module_imports(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The package's modules that importing `name` imports first (each imported module's
    packages too, but not `name`'s own packages)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in _top_level(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for target in targets:
            parts = target.split(".")
            for n in range(1, len(parts) + 1):
                imported = ".".join(parts[:n])
                if imported in known and not (name + ".").startswith(imported + "."):
                    out.add(imported)
    return out


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: module_imports(name, path, known) for name, path in known.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The circles of `graph`: its strongly connected components of more than one module
    (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph.get(node, ()):
                        found.append(sorted(component))
    return found


def dependency_order(graph: Mapping[str, set[str]]) -> list[str]:
    """Every module after the modules it imports (the graph has no circle)."""
    order: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        if name in done:
            return
        done.add(name)
        for imported in sorted(graph[name]):
            visit(imported)
        order.append(name)

    for name in sorted(graph):
        visit(name)
    return order


def test_cycles_finds_a_circle_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": set(), "f": {"f"}}
    assert cycles(graph) == [["a", "b", "c"], ["f"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_module_imports_reads_top_level_imports_only(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    init = tmp_path / "pkg" / "__init__.py"
    init.write_text("from pkg import b\n")
    a = tmp_path / "pkg" / "a.py"
    a.write_text(
        "from typing import TYPE_CHECKING\n"
        "import pkg.b\n"
        "from . import c\n"
        "from pkg.d import thing\n"
        "if TYPE_CHECKING:\n    from pkg import e\n"
        "try:\n    import pkg.f\nexcept ImportError:\n    pass\n"
        "def later() -> None:\n    from pkg import g\n"
    )
    known = {f"pkg.{n}": a for n in "abcdefg"} | {"pkg": init}
    assert module_imports("pkg.a", a, known) == {"pkg.b", "pkg.c", "pkg.d", "pkg.f"}
    assert module_imports("pkg", init, known) == {"pkg.b"}


def test_no_import_circle() -> None:
    graph = import_graph()
    assert len(graph) > 100  # every module was read
    assert cycles(graph) == []


IMPORT_EACH = """
import importlib, json, sys, traceback
failed = {}
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m == "streambed" or m.startswith("streambed.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except BaseException:
        failed[name] = traceback.format_exc(limit=-3)
print(json.dumps(failed))
"""


def test_every_module_imports_on_its_own() -> None:
    """In a fresh interpreter, each module in dependency order, with none of the
    package's modules loaded before it (third-party ones stay loaded: it stays fast)."""
    order = dependency_order(import_graph())
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, json.dumps(order)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT.parent,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}


LAYERS = (
    "core",
    "storage",
    "pgoutput",
    "buffer",
    "state",
    "source",
    "lake",
    "spark",
    "copy",
    "metrics",
    "server",
    "ports",
    "pipeline",
    "verify",
    "commands",
    "cli",
)
"""The package's layers, lowest first (docs/architecture.md, "Packages"): a module imports,
at module level, only from its own package and from packages listed before it."""


def layer_violations(graph: Mapping[str, set[str]]) -> list[str]:
    """`a -> b` for each module-level import from a package that is not below a's own."""
    rank = {name: n for n, name in enumerate(LAYERS)}
    out = []
    for name, imported in sorted(graph.items()):
        if name == PACKAGE:
            continue
        own = name.split(".")[1]
        for target in sorted(imported):
            if target == PACKAGE:
                continue
            other = target.split(".")[1]
            if other != own and rank[other] > rank[own]:
                out.append(f"{name} -> {target}")
    return out


def test_layers_point_one_way() -> None:
    graph = import_graph()
    packages = {name.split(".")[1] for name in graph if name != PACKAGE}
    assert packages - {"__init__"} == set(LAYERS), "a package is missing from LAYERS"
    assert layer_violations(graph) == []


def test_layer_violations_names_an_upward_import() -> None:
    graph = {"streambed.core.errors": {"streambed.lake.sink"}, "streambed.lake.sink": set()}
    assert layer_violations(graph) == ["streambed.core.errors -> streambed.lake.sink"]
