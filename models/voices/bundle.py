"""A loaded voice: acoustic model + vocoder + streaming spec, built from a voice folder or tiny random weights."""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from models.checkpoint import CheckpointError, load_into, load_tensors
from models.voices.registry import find_voice, read_voice_meta

log = logging.getLogger(__name__)

# model type in voice.json → (module, class); classes expose Config.from_dict and from_config.
MODEL_TYPES: dict[str, tuple[str, str]] = {
    "tacotron2": ("models.tacotron2", "Tacotron2"),
    "mb_melgan": ("models.mb_melgan", "MBMelGAN"),
    "hifigan": ("models.hifigan", "HifiGan"),
}
WEIGHT_PATHS = ("fp32", "int8", "bf16")


@dataclass
class Voice:
    """Everything the engine needs to synthesize with one voice."""

    name: str
    acoustic: Any  # models.tacotron2.Tacotron2
    vocoder: Any  # models.mb_melgan.MBMelGAN or models.hifigan.HifiGan
    stream_spec: Any  # models.vocoder_stream.VocoderStreamSpec
    sample_rate_hz: int
    symbols: list[str]
    meta: dict = field(default_factory=dict)
    weights: str = "fp32"


def build_model(section: dict, where: str) -> torch.nn.Module:
    """Instantiate the model a voice.json section describes (random weights)."""
    kind = section.get("type")
    if kind not in MODEL_TYPES:
        raise CheckpointError(f"{where}: unknown model type {kind!r}; known: {', '.join(MODEL_TYPES)}")
    module_name, class_name = MODEL_TYPES[kind]
    cls = getattr(importlib.import_module(module_name), class_name)
    try:
        return cls.from_config(section.get("config", {}))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{where}: bad {kind} config: {exc}") from exc


def _load_model(folder: Path, section: dict, where: str) -> torch.nn.Module:
    model = build_model(section, where)
    weights = Path(section.get("weights", ""))
    path = weights if weights.is_absolute() else folder / weights
    load_into(model, load_tensors(path), where)
    return model.eval()


def apply_weight_path(model: torch.nn.Module, weights: str) -> torch.nn.Module:
    """The CPU fast paths: dynamic int8 for LSTM cells and linears, or bf16 weights; fp32 unchanged."""
    if weights not in WEIGHT_PATHS:
        raise ValueError(f"weights must be one of {WEIGHT_PATHS}, not {weights!r}")
    if weights == "int8":
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(model, {torch.nn.LSTMCell, torch.nn.Linear}, dtype=torch.qint8)
    if weights == "bf16":
        return model.to(torch.bfloat16)
    return model


def load_voice(name_or_dir: str, device: str = "cpu", weights: str = "fp32") -> Voice:
    """Load an installed voice (by name or folder) onto `device` with the chosen weight path."""
    from models.vocoder_stream import VocoderStreamSpec

    folder = find_voice(name_or_dir)
    meta = read_voice_meta(folder)
    if meta["kind"] != "voice":
        raise CheckpointError(f"{folder} holds a {meta['kind']}, not a voice with an acoustic model")
    acoustic = _load_model(folder, meta["acoustic"], f"{folder}/acoustic")
    vocoder = _load_model(folder, meta["vocoder"], f"{folder}/vocoder")
    if weights != "fp32" and device != "cpu" and weights == "int8":
        raise ValueError("int8 dynamic quantization is a CPU path; use fp32 or bf16 on CUDA")
    acoustic = apply_weight_path(acoustic, weights).to(device)
    vocoder = vocoder.to(device)
    return Voice(
        name=meta["name"],
        acoustic=acoustic,
        vocoder=vocoder,
        stream_spec=VocoderStreamSpec.for_vocoder(vocoder),
        sample_rate_hz=int(meta["sample_rate_hz"]),
        symbols=list(meta["symbols"]),
        meta={k: v for k, v in meta.items() if k not in ("acoustic", "vocoder", "symbols")},
        weights=weights,
    )


def tiny_voice(seed: int = 0, device: str = "cpu") -> Voice:
    """A voice of tiny random models with the real interfaces, for fast tests."""
    from models.mb_melgan import MBMelGAN, MBMelGANConfig
    from models.tacotron2 import Tacotron2, Tacotron2Config
    from models.vocoder_stream import VocoderStreamSpec

    torch.manual_seed(seed)
    acoustic = Tacotron2.from_config(Tacotron2Config.tiny()).eval().to(device)
    vocoder = MBMelGAN.from_config(MBMelGANConfig.tiny()).eval().to(device)
    n = acoustic.config.n_symbols
    return Voice(
        name="tiny",
        acoustic=acoustic,
        vocoder=vocoder,
        stream_spec=VocoderStreamSpec.for_vocoder(vocoder),
        sample_rate_hz=int(acoustic.config.sample_rate_hz),
        symbols=[f"s{i}" for i in range(n)],
        meta={"name": "tiny", "kind": "voice", "license": "test only"},
    )
