"""One rule for loading a config dataclass from a JSON or YAML mapping: every key must name a field.

A typo in a voice's voice.json or in the service's YAML must stop the load with a message that names the bad key and
the ones that exist, not be ignored (a silently ignored key is a setting the operator believes is in force)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping


def known_fields(cls: type, data: Any, error: Callable[[str], Exception], where: str) -> dict[str, Any]:
    """`data` as a dict once it is a mapping whose keys all name fields of the dataclass `cls`; otherwise raises
    `error(message)`, the message starting with `where` and naming the unknown keys and the known ones."""
    if not isinstance(data, Mapping):
        raise error(f"{where}: must be a mapping, got {type(data).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise error(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    return dict(data)
