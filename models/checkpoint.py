"""Weights on disk: one safetensors file per model plus its JSON config, no pickle on load."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np


class CheckpointError(ValueError):
    """A weights file or config is missing, unreadable or does not fit the model."""


def save_tensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """Write float arrays to `path` (safetensors), atomically (write to a temp name, then rename)."""
    from safetensors.numpy import save_file

    clean = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    tmp = path.with_name(path.name + ".tmp")
    save_file(clean, str(tmp), metadata=metadata)
    os.replace(tmp, path)


def load_tensors(path: Path) -> dict[str, Any]:
    """Read a safetensors file into torch tensors (CPU)."""
    from safetensors.torch import load_file

    if not path.is_file():
        raise CheckpointError(f"weights file {path} does not exist")
    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error types
        raise CheckpointError(f"cannot read weights {path}: {exc}") from exc


def write_json(path: Path, data: dict) -> None:
    """Write `data` as pretty JSON, atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    """Read a JSON object from `path` with a clear error."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object")
    return data


def load_into(module: Any, tensors: dict[str, Any], where: str) -> None:
    """Load `tensors` into `module` strictly; names every missing, unexpected or mis-shaped key."""
    own = module.state_dict()
    missing = sorted(set(own) - set(tensors))
    unexpected = sorted(set(tensors) - set(own))
    shapes = [
        f"{k}: file {tuple(tensors[k].shape)} vs model {tuple(own[k].shape)}"
        for k in sorted(set(own) & set(tensors))
        if tuple(tensors[k].shape) != tuple(own[k].shape)
    ]
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing {missing[:5]}{'…' if len(missing) > 5 else ''}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:5]}{'…' if len(unexpected) > 5 else ''}")
        if shapes:
            parts.append(f"shape mismatch {shapes[:3]}")
        raise CheckpointError(f"{where}: weights do not fit the model config: " + "; ".join(parts))
    module.load_state_dict(tensors, strict=True)
