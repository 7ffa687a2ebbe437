"""The adapters reach voxpool over gRPC only: nothing in clients/integrations imports service, engine or models."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "integrations"
FORBIDDEN = ("service", "engine", "models", "torch")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_integrations_import_only_clients_protos_and_frameworks():
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) >= 6
    bad = {f.name: sorted(m for m in imported_modules(f) if m.split(".")[0] in FORBIDDEN) for f in files}
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_check_sees_a_forbidden_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from service.server import VoxpoolServer\nimport engine.runner\n", encoding="utf-8")
    assert {"service.server", "engine.runner"} <= imported_modules(probe)
