"""The import rules of DESIGN.md §2, and no import cycles in the project's packages (lazy and TYPE_CHECKING imports
included): read from the source with `ast`, so nothing is imported to check it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("protos", "service", "engine", "models", "clients", "voxpool_cli")
# package → top-level names it must never import (DESIGN.md §2: service → engine → models, clients → protos)
FORBIDDEN = {
    "models": {"engine", "service"},
    "engine": {"service", "grpc", "protos"},
    "service": {"torch", "clients"},
    "clients": {"service", "engine", "models"},
}
# Cycles allowed while being removed elsewhere: none now (runner ↔ cuda_graphs and tn_* ↔ normalize are gone);
# a cycle not listed here fails the test.
KNOWN_CYCLES_BEING_FIXED: tuple[frozenset[str], ...] = ()


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module name `name` imports, anywhere in the file (top level, functions, TYPE_CHECKING blocks)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:  # `from pkg import submodule` depends on the submodule (parents are not edges)
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {m for m in found if m}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_rules(package):
    bad = sorted(
        f"{mod} imports {imp}"
        for mod, imps in GRAPH.items() if mod.split(".")[0] == package
        for imp in imps if imp.split(".")[0] in FORBIDDEN[package]
    )
    assert not bad, "\n".join(bad)


def _cycles() -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan), over project-internal edges."""
    edges = {m: sorted(i for i in imps if i in MODULES and i != m) for m, imps in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
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
            if len(component) > 1:
                out.append(component)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _known(component: set[str]) -> bool:
    def matches(pattern: str, module: str) -> bool:
        return module.startswith(pattern[:-1]) if pattern.endswith("*") else module == pattern

    return any(all(any(matches(p, m) for p in known) for m in component)
               and all(any(matches(p, m) for m in component) for p in known)
               for known in KNOWN_CYCLES_BEING_FIXED)


def test_no_import_cycles():
    unknown = [sorted(c) for c in _cycles() if not _known(c)]
    assert not unknown, f"import cycles: {unknown}"


def test_the_checker_sees_a_cycle_and_a_forbidden_import():
    """The checks above can fail: a cycle planted in a copy of the graph is found, and so is a lazy import."""
    GRAPH["service.errors"].add("service.servicer")  # service.servicer imports service.errors
    try:
        assert any({"service.errors", "service.servicer"} <= c for c in _cycles())
    finally:
        GRAPH["service.errors"].discard("service.servicer")
    assert "engine.errors" in GRAPH["service.errors"]  # a function-level import is seen
