"""Where voices live and which are installed: one folder per voice with a voice.json (see docs/voices.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from models.checkpoint import CheckpointError, read_json
from models.voices.packages import cache_dir

VOICE_FORMAT_VERSION = 1
DEFAULT_VOICE = "baker-zh"


class VoiceNotFound(LookupError):
    """No installed voice has that name."""


@dataclass(frozen=True)
class VoiceInfo:
    """What voice.json says about an installed voice, without loading weights."""

    name: str
    kind: str
    language: str
    sample_rate_hz: int
    description: str
    license: str
    path: Path


def voices_dir() -> Path:
    """Folder of installed voices: $VOXPOOL_VOICES, else <cache>/voices."""
    env = os.environ.get("VOXPOOL_VOICES")
    return Path(env).expanduser() if env else cache_dir() / "voices"


def read_voice_meta(path: Path) -> dict:
    """voice.json of the voice folder `path`, checked for the fields every voice needs."""
    meta = read_json(path / "voice.json")
    version = meta.get("format_version")
    if version != VOICE_FORMAT_VERSION:
        raise CheckpointError(
            f"{path / 'voice.json'}: format_version {version!r} not supported (expected {VOICE_FORMAT_VERSION})"
        )
    for key in ("name", "kind", "sample_rate_hz", "vocoder"):
        if key not in meta:
            raise CheckpointError(f"{path / 'voice.json'}: missing field {key!r}")
    if meta["kind"] == "voice":
        for key in ("acoustic", "symbols", "frontend"):
            if key not in meta:
                raise CheckpointError(f"{path / 'voice.json'}: a voice needs field {key!r}")
    elif meta["kind"] != "vocoder":
        raise CheckpointError(f"{path / 'voice.json'}: kind must be 'voice' or 'vocoder', not {meta['kind']!r}")
    return meta


def _info(path: Path, meta: dict) -> VoiceInfo:
    return VoiceInfo(
        name=meta["name"],
        kind=meta["kind"],
        language=meta.get("language", ""),
        sample_rate_hz=int(meta["sample_rate_hz"]),
        description=meta.get("description", ""),
        license=meta.get("license", ""),
        path=path,
    )


def list_voices(root: Path | None = None) -> list[VoiceInfo]:
    """Installed voices and vocoders under `root`, sorted by name; invalid folders are left out (see
    `invalid_voice_folders`)."""
    return _scan(root)[0]


def invalid_voice_folders(root: Path | None = None) -> list[tuple[Path, str]]:
    """Folders under `root` that are not usable voices, with why (the field or file at fault), sorted by path."""
    return _scan(root)[1]


def _scan(root: Path | None) -> tuple[list[VoiceInfo], list[tuple[Path, str]]]:
    root = root or voices_dir()
    if not root.is_dir():
        return [], []
    out, invalid = [], []
    for child in sorted(root.iterdir()):
        if child.name.startswith(".") or not child.is_dir():  # hidden: an install in progress
            continue
        if not (child / "voice.json").is_file():
            invalid.append((child, "no voice.json: not a voice folder (docs/voices.md)"))
            continue
        try:
            out.append(_info(child, read_voice_meta(child)))
        except CheckpointError as exc:
            invalid.append((child, str(exc)))
        except (TypeError, ValueError) as exc:  # a field of the wrong type (sample_rate_hz "fast")
            invalid.append((child, f"{child / 'voice.json'}: {exc}"))
    return out, invalid


def find_voice(name_or_path: str, root: Path | None = None) -> Path:
    """Folder of an installed voice by name, or a voice folder given by path."""
    as_path = Path(name_or_path).expanduser()
    if (as_path / "voice.json").is_file():
        return as_path
    candidate = (root or voices_dir()) / name_or_path
    if (candidate / "voice.json").is_file():
        return candidate
    installed = ", ".join(v.name for v in list_voices(root)) or "none"
    raise VoiceNotFound(
        f"voice {name_or_path!r} is not installed (installed: {installed}); "
        f"run `voxpool voices install {name_or_path}` or pass a voice folder"
    )
