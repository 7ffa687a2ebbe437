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
    "hifigan": ("models.hifigan", "HiFiGAN"),
}
WEIGHT_PATHS = ("fp32", "int8", "bf16")


@dataclass
class Voice:
    """Everything the engine needs to synthesize with one voice."""

    name: str
    acoustic: Any  # models.tacotron2.Tacotron2
    vocoder: Any  # models.mb_melgan.MBMelGAN or models.hifigan.HifiGan
    stream_spec: Any  # models.streaming_vocoder.VocoderStreamSpec
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
    """The weight paths: fp32 unchanged; "int8" = the CPU fast path, every nn.LSTMCell replaced by a dynamic-int8
    cell (models.int8; Tacotron2's decoder LSTMs, linears and convolutions stay fp32, vocoders are unchanged);
    "bf16" = every parameter and buffer in bfloat16. Converts `model` in place and returns it.

    int8 is the CPU default because it is faster than fp32 at the same DNSMOS (docs/benchmarks.md).
    """
    if weights not in WEIGHT_PATHS:
        raise ValueError(f"weights must be one of {WEIGHT_PATHS}, not {weights!r}")
    if weights == "int8":
        from models.int8 import quantize_lstm_cells

        return quantize_lstm_cells(model)
    if weights == "bf16":
        return model.to(torch.bfloat16)
    return model


def load_voice(name_or_dir: str, device: str = "cpu", weights: str = "fp32") -> Voice:
    """Load an installed voice (by name or folder) onto `device` with the chosen weight path."""
    from models.streaming_vocoder import VocoderStreamSpec

    folder = find_voice(name_or_dir)
    meta = read_voice_meta(folder)
    if meta["kind"] != "voice":
        raise CheckpointError(f"{folder} holds a {meta['kind']}, not a voice with an acoustic model")
    acoustic = _load_model(folder, meta["acoustic"], f"{folder}/acoustic")
    vocoder = _load_model(folder, meta["vocoder"], f"{folder}/vocoder")
    if weights != "fp32" and device != "cpu" and weights == "int8":
        raise ValueError("int8 dynamic quantization is a CPU path; use fp32 or bf16 on CUDA")
    acoustic = apply_weight_path(acoustic, weights).to(device)
    vocoder = apply_weight_path(vocoder, weights).to(device)  # int8 leaves a vocoder (no LSTM cells) in fp32
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


def tiny_voice(seed: int = 0, device: str = "cpu", decoder_steps: int = 40, n_symbols: int = 219) -> Voice:
    """A voice of tiny random models with the real interfaces, for fast service tests.

    It takes Baker ids (219 symbols), runs at 8 kHz with 12.5 ms mel frames like the real voice, and never
    fires its stop token, so every segment lasts exactly `decoder_steps` steps (r = 2): 25 ms of audio per step.
    """
    from models.mb_melgan import MBMelGAN, MBMelGANConfig
    from models.tacotron2 import Tacotron2, Tacotron2Config
    from models.streaming_vocoder import VocoderStreamSpec

    torch.manual_seed(seed)
    voc_cfg = MBMelGANConfig(num_mels=8, channels=16, upsample_scales=(5, 5), stacks_per_stage=2,
                             stack_dilations=(1, 3), subbands=4, pqmf_taps=30, sample_rate_hz=8000)
    acoustic = Tacotron2.from_config(Tacotron2Config.tiny(
        n_symbols=n_symbols, n_mels=voc_cfg.num_mels, max_decoder_steps=decoder_steps, max_input_len=512,
        sample_rate_hz=voc_cfg.sample_rate_hz, hop_samples=voc_cfg.hop_samples,
    )).eval().to(device)
    vocoder = MBMelGAN.from_config(voc_cfg).eval().to(device)
    with torch.no_grad():
        acoustic.frame_projection.bias += 1.0  # loud frames: above the trailing-trim threshold
        acoustic.stop_projection.bias.fill_(-50.0)  # never stops: fixed length per segment
    return Voice(
        name="tiny",
        acoustic=acoustic,
        vocoder=vocoder,
        stream_spec=VocoderStreamSpec.for_vocoder(vocoder),
        sample_rate_hz=voc_cfg.sample_rate_hz,
        symbols=[f"s{i}" for i in range(n_symbols)],
        meta={"name": "tiny", "kind": "voice", "language": "zh-CN", "license": "test only",
              "description": "tiny random models for tests"},
    )


def save_voice_dir(voice: Voice, dest: Path, license_note: str = "") -> Path:
    """Write `voice` as a voice folder (voice.json + safetensors): the bring-your-own-voice format."""
    from models.checkpoint import save_tensors, write_json
    from models.voices.registry import VOICE_FORMAT_VERSION

    types = {cls: kind for kind, (_, cls) in MODEL_TYPES.items()}
    dest.mkdir(parents=True, exist_ok=True)
    sections = {}
    for role, model in (("acoustic", voice.acoustic), ("vocoder", voice.vocoder)):
        kind = types.get(type(model).__name__)
        if kind is None:
            raise CheckpointError(f"cannot save a {type(model).__name__} ({role}); known: {sorted(types)}")
        save_tensors(dest / f"{role}.safetensors",
                     {k: v.detach().cpu().float().contiguous().numpy() for k, v in model.state_dict().items()})
        sections[role] = {"type": kind, "config": model.config.to_dict(), "weights": f"{role}.safetensors"}
    meta = {k: v for k, v in voice.meta.items() if k not in ("format_version", "kind", "name", "sample_rate_hz")}
    write_json(dest / "voice.json", {
        "format_version": VOICE_FORMAT_VERSION, "name": voice.name, "kind": "voice",
        "sample_rate_hz": voice.sample_rate_hz, "frontend": meta.pop("frontend", "mandarin-baker"),
        "symbols": list(voice.symbols), **meta, **sections,
    })
    if license_note:
        (dest / "LICENSE-NOTE.txt").write_text(license_note + "\n", encoding="utf-8")
    return dest
