"""Batch helpers and the engine's import boundaries."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from engine.batching import bucket_up, pad_ids, pow2_bucket

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def test_buckets() -> None:
    assert [pow2_bucket(n) for n in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]
    assert [bucket_up(n, 8) for n in (1, 8, 9, 24)] == [8, 8, 16, 24]
    with pytest.raises(ValueError):
        pow2_bucket(0)


def test_pad_ids() -> None:
    ids, lengths = pad_ids([[3, 4, 5], [7]])
    assert ids.tolist() == [[3, 4, 5], [7, 0, 0]] and lengths.tolist() == [3, 1]


def test_engine_never_imports_grpc_protos_or_service() -> None:
    for path in ENGINE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in ("grpc", "protos", "service"), f"{path.name} imports {name}"
