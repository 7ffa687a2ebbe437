"""The import rules of the repository, and no import cycles, read from the source with `ast` (nothing is imported):

* layers: `voxpool_cli → service → engine → models` and `clients → protos`; a package imports only the packages
  below it (`ALLOWED`), so models imports nothing of engine or service, engine nothing of service or clients,
  clients nothing of service, engine or models;
* product ↛ bench: protos, service, engine, models, clients and voxpool_cli import nothing from `bench/`, which
  may import anything;
* third-party: service never imports torch, engine never grpc, clients never torch (`FORBIDDEN_EXTERNAL`).

Every import counts: top level, inside functions, TYPE_CHECKING blocks; relative imports are resolved against the
importing module; `importlib.import_module("a.b")` and "a.b:function" references (the CLI's subcommand table)
count as importing a.b.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("protos", "models", "engine", "service", "clients", "voxpool_cli")
PACKAGES = (*PRODUCT, "bench")
# package → the project packages it may import (itself always); anything else of PACKAGES is a violation
ALLOWED = {
    "protos": set(),
    "models": set(),
    "engine": {"models"},
    "service": {"engine", "models", "protos"},
    "clients": {"protos"},
    "voxpool_cli": {"service", "engine", "models", "clients", "protos"},
    "bench": set(PACKAGES),
}
# package → third-party top-level names it must never import
FORBIDDEN_EXTERNAL = {
    "service": {"torch"},
    "engine": {"grpc"},
    "clients": {"torch"},
}
# Cycles allowed while being removed elsewhere: none now; a cycle not listed here fails the test.
KNOWN_CYCLES_BEING_FIXED: tuple[frozenset[str], ...] = ()
_REFERENCE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):[A-Za-z_]\w*$")  # "package.module:function"


def collect_modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name → file, for every .py file under root/<package> (a package's __init__ is its name)."""
    out = {}
    for pkg in packages:
        for path in (root / pkg).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _resolve(name: str, is_package: bool, module: str | None, level: int) -> str:
    """The absolute name of `from <level dots><module> import ...` written in module `name`."""
    if not level:
        return module or ""
    parts = name.split(".") if is_package else name.split(".")[:-1]
    if level - 1 > len(parts) - 1:
        raise ValueError(f"{name}: relative import beyond the top-level package (level {level})")
    anchor = parts[: len(parts) - (level - 1)]
    return ".".join([*anchor, *([module] if module else [])])


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module name `name` imports, anywhere in the file."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, is_package, node.module, node.level)
            for alias in node.names:  # `from pkg import submodule` depends on the submodule
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called == "import_module" and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            ref = _REFERENCE.match(node.value)
            if ref and ref.group(1).split(".")[0] in {m.split(".")[0] for m in modules}:
                found.add(ref.group(1))
    return {m for m in found if m}


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = collect_modules(root, packages)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def violations(graph: dict[str, set[str]]) -> list[str]:
    """'module imports name (rule)' for every import that breaks ALLOWED or FORBIDDEN_EXTERNAL."""
    bad = []
    for mod, imps in sorted(graph.items()):
        pkg = mod.split(".")[0]
        for imp in sorted(imps):
            top = imp.split(".")[0]
            if top in ALLOWED and top != pkg and top not in ALLOWED[pkg]:
                rule = "product ↛ bench" if top == "bench" else f"{pkg} may import {sorted(ALLOWED[pkg]) or 'nothing'}"
                bad.append(f"{mod} imports {imp} ({rule})")
            elif top in FORBIDDEN_EXTERNAL.get(pkg, ()):
                bad.append(f"{mod} imports {imp} ({pkg} never imports {top})")
    return bad


GRAPH = import_graph(REPO)


def test_every_package_is_checked():
    assert set(ALLOWED) == set(PACKAGES)
    assert {m.split(".")[0] for m in GRAPH} == set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_import_rules(package):
    bad = violations({m: imps for m, imps in GRAPH.items() if m.split(".")[0] == package})
    assert not bad, "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan), over project-internal edges."""
    edges = {m: sorted(i for i in imps if i in graph and i != m) for m, imps in graph.items()}
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
    unknown = [sorted(c) for c in _cycles(GRAPH) if not _known(c)]
    assert not unknown, f"import cycles: {unknown}"


# The checker itself, on a small tree with one violation of each rule planted in it.
_PLANTED = {
    "models/__init__.py": "",
    "models/net.py": "import numpy\n",
    "models/sub/__init__.py": "",
    "models/sub/deep.py": "def f():\n    from .. import net\n\n\ndef g():\n    from engine import core\n",
    "engine/__init__.py": "",
    "engine/core.py": "from models import net\nfrom .pool import x\n",
    "engine/pool.py": "import grpc\n",
    "service/__init__.py": "",
    "service/ok.py": "from engine.core import y\nfrom models.net import z\nfrom protos import api\n",
    "service/torchy.py": "def load():\n    import torch.nn\n",
    "service/client_use.py": "from clients import client\n",
    "clients/__init__.py": "",
    "clients/client.py": "from protos import api\n",
    "clients/helper.py": "from . import client\nfrom bench.load import main\n",
    "clients/lazy.py": "import importlib\nM = importlib.import_module('models.net')\n",
    "protos/__init__.py": "",
    "protos/api.py": "",
    "voxpool_cli/__init__.py": "",
    "voxpool_cli/commands.py": "TABLE = ('service.ok:run', 'bench.load:main', 'not a reference')\n",
    "bench/__init__.py": "",
    "bench/load.py": "from service import ok\nfrom engine.core import y\nimport torch\n",
}


def test_the_checker_finds_each_planted_violation(tmp_path):
    for rel, text in _PLANTED.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    graph = import_graph(tmp_path)
    assert graph["models.sub.deep"] == {"models.net", "engine.core"}  # relative import resolved, functions read
    assert graph["clients.helper"] == {"clients.client", "bench.load"}
    assert graph["voxpool_cli.commands"] == {"service.ok", "bench.load"}
    found = {line.split(" (")[0] for line in violations(graph)}
    assert found == {
        "models.sub.deep imports engine.core",
        "engine.pool imports grpc",
        "service.torchy imports torch.nn",
        "service.client_use imports clients.client",
        "clients.helper imports bench.load",
        "clients.lazy imports models.net",
        "voxpool_cli.commands imports bench.load",
    }
    assert "bench.load imports torch" not in found and "service.ok imports engine.core" not in found


def test_the_checker_finds_a_planted_cycle(tmp_path):
    for rel, text in {"engine/__init__.py": "", "engine/a.py": "def f():\n    from engine import b\n",
                      "engine/b.py": "from .a import f\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    assert _cycles(import_graph(tmp_path, ("engine",))) == [{"engine.a", "engine.b"}]


def test_a_relative_import_above_the_top_package_is_refused(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "x.py").write_text("from ...elsewhere import y\n", encoding="utf-8")
    with pytest.raises(ValueError, match="beyond the top-level package"):
        import_graph(tmp_path, ("models",))
