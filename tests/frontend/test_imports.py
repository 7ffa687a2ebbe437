"""The frontend's modules import each other without cycles (the normalizer's rule modules never import normalize)."""

from __future__ import annotations

import ast
from pathlib import Path

import models.frontend as frontend

FRONTEND = Path(frontend.__file__).parent


def _imports(path: Path) -> set[str]:
    """Frontend module names (``normalize``, ``tn_core`` …) imported by one file, at any level."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1:
                out.add(mod.split(".")[0] if mod else "")
                if not mod:
                    out.update(a.name for a in node.names)
            elif mod.startswith("models.frontend."):
                out.add(mod.split(".")[2])
            elif mod == "models.frontend":
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[2] for a in node.names if a.name.startswith("models.frontend."))
    return out - {""}


def test_frontend_import_graph_has_no_cycle() -> None:
    modules = {p.stem: p for p in FRONTEND.glob("*.py") if p.stem != "__init__"}
    graph = {name: _imports(path) & modules.keys() for name, path in modules.items()}
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            assert state.get(dep) != 1, f"import cycle: {' → '.join(trail + [name, dep])}"
            if dep not in state:
                visit(dep, trail + [name])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


def test_rule_modules_do_not_import_normalize() -> None:
    for path in FRONTEND.glob("tn_*.py"):
        assert "normalize" not in _imports(path), f"{path.name} imports normalize (use tn_options)"
