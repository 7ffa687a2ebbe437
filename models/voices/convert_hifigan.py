"""Convert a jik876 HiFi-GAN generator checkpoint (+ its config.json) into HiFiGAN config + plain state-dict arrays."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

# jik876 config.json keys that describe the generator or its mel recipe (all others are training settings)
_REQUIRED_KEYS = ("resblock", "upsample_rates", "upsample_kernel_sizes", "upsample_initial_channel",
                  "resblock_kernel_sizes", "resblock_dilation_sizes", "sampling_rate", "hop_size")


class HiFiGANCheckpointError(ValueError):
    """The checkpoint or config is not a jik876 HiFi-GAN generator this converter understands."""


def config_from_jik876(raw: dict[str, Any]) -> dict[str, Any]:
    """Map a jik876 config.json dict to a HiFiGANConfig dict (training-only keys are dropped)."""
    missing = [k for k in _REQUIRED_KEYS if k not in raw]
    if missing:
        raise HiFiGANCheckpointError(f"HiFi-GAN config.json lacks {missing}")
    rates = [int(r) for r in raw["upsample_rates"]]
    hop = 1
    for r in rates:
        hop *= r
    if int(raw["hop_size"]) != hop:
        raise HiFiGANCheckpointError(f"hop_size {raw['hop_size']} != prod(upsample_rates) {hop}")
    return {
        "num_mels": int(raw.get("num_mels", 80)),
        "upsample_rates": rates,
        "upsample_kernel_sizes": [int(k) for k in raw["upsample_kernel_sizes"]],
        "upsample_initial_channel": int(raw["upsample_initial_channel"]),
        "resblock": str(raw["resblock"]),
        "resblock_kernel_sizes": [int(k) for k in raw["resblock_kernel_sizes"]],
        "resblock_dilation_sizes": [[int(d) for d in ds] for ds in raw["resblock_dilation_sizes"]],
        "sample_rate_hz": int(raw["sampling_rate"]),
        "mel_n_fft": int(raw.get("n_fft", 1024)),
        "mel_win_samples": int(raw.get("win_size", raw.get("n_fft", 1024))),
        "mel_fmin_hz": float(raw.get("fmin", 0.0)),
        "mel_fmax_hz": None if raw.get("fmax") is None else float(raw["fmax"]),
    }


def fold_weight_norm(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Replace every `X.weight_g` / `X.weight_v` pair by `X.weight = g·v/‖v‖` (norm over all dims but 0).

    Old-style `torch.nn.utils.weight_norm` uses dim 0 for Conv1d ([out, in, k], g [out, 1, 1]) and for
    ConvTranspose1d alike ([in, out, k], g [in, 1, 1]), so one rule covers both. Computed in float64.
    """
    out: dict[str, np.ndarray] = {}
    for key, value in state.items():
        if key.endswith(".weight_v"):
            continue
        if key.endswith(".weight_g"):
            base = key[: -len(".weight_g")]
            v_key = base + ".weight_v"
            if v_key not in state:
                raise HiFiGANCheckpointError(f"{key} has no matching {v_key}")
            g = value.astype(np.float64)
            v = state[v_key].astype(np.float64)
            if g.shape != (v.shape[0],) + (1,) * (v.ndim - 1):
                raise HiFiGANCheckpointError(f"{key} {g.shape} does not match {v_key} {v.shape} for dim-0 norm")
            norm = np.sqrt((v ** 2).reshape(v.shape[0], -1).sum(axis=1)).reshape(g.shape)
            out[base + ".weight"] = (g * v / norm).astype(np.float32)
        else:
            out[key] = np.asarray(value, dtype=np.float32)
    orphans = [k for k in state if k.endswith(".weight_v") and k[:-2] + "_g" not in state]
    if orphans:
        raise HiFiGANCheckpointError(f"weight_v without weight_g: {orphans[:3]}")
    return out


def convert_hifigan(checkpoint_path: str | Path, config_json_path: str | Path) -> tuple[dict, dict[str, np.ndarray]]:
    """Load a jik876 generator checkpoint (`{'generator': state_dict}`, torch.load weights_only) and its config.json
    → (HiFiGANConfig dict, {state_dict key: float32 array}) with weight norm folded into plain weights.

    Keys and shapes are checked against the generator the config describes.
    """
    import torch  # loading a .pth.tar needs torch; this converter is the one allowed to

    from models.hifigan import HiFiGAN, HiFiGANConfig, HiFiGANConfigError

    try:
        raw_cfg = json.loads(Path(config_json_path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise HiFiGANCheckpointError(f"cannot read HiFi-GAN config {config_json_path}: {exc}") from exc
    try:
        config = HiFiGANConfig.from_dict(config_from_jik876(raw_cfg))
    except HiFiGANConfigError as exc:
        raise HiFiGANCheckpointError(f"{config_json_path}: {exc}") from exc
    try:
        ckpt = torch.load(Path(checkpoint_path), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises assorted errors (pickle, zip, unsafe globals)
        raise HiFiGANCheckpointError(f"cannot load {checkpoint_path} with weights_only=True: {exc}") from exc
    state = ckpt.get("generator") if isinstance(ckpt, dict) and "generator" in ckpt else ckpt
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise HiFiGANCheckpointError(f"{checkpoint_path}: no generator state dict found")
    arrays = {k: v.detach().cpu().numpy() for k, v in state.items()}
    if any(k.startswith("module.") for k in arrays):
        arrays = {k.removeprefix("module."): v for k, v in arrays.items()}
    tensors = fold_weight_norm(arrays)

    expected = {k: tuple(v.shape) for k, v in HiFiGAN(config).state_dict().items()}
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise HiFiGANCheckpointError(
            f"{checkpoint_path} does not fit the generator in {config_json_path}: "
            f"missing {missing[:5]}{'…' if len(missing) > 5 else ''}, unexpected {extra[:5]}"
        )
    for key, shape in expected.items():
        if tensors[key].shape != shape:
            raise HiFiGANCheckpointError(f"{key}: checkpoint shape {tensors[key].shape}, generator expects {shape}")
    log.info("converted %s: %d tensors, %d values", checkpoint_path, len(tensors),
             sum(v.size for v in tensors.values()))
    return config.to_dict(), tensors
