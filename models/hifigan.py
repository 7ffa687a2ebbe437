"""HiFi-GAN generator compatible with the jik876 checkpoints (V1/V2/V3; resblock types 1 and 2), plain weights."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from models.mb_melgan import EmptyMelError
from models.strict_config import known_fields
from models.vocoder_base import ConfiguredVocoder

log = logging.getLogger(__name__)

RESBLOCK_SLOPE = 0.1  # LeakyReLU slope inside the generator (jik876 LRELU_SLOPE)
FINAL_SLOPE = 0.01  # the generator's last LeakyReLU uses torch's default slope


class HiFiGANConfigError(ValueError):
    """A HiFi-GAN configuration is malformed (unknown key, wrong type, inconsistent sizes)."""


def _int_tuple(name: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not value or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value
    ):
        raise HiFiGANConfigError(f"{name} must be a non-empty list of positive ints, got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class HiFiGANConfig:
    """Generator sizes (jik876 names) plus the mel recipe the voice was trained on (informative)."""

    num_mels: int = 80
    upsample_rates: tuple[int, ...] = (8, 8, 2, 2)
    upsample_kernel_sizes: tuple[int, ...] = (16, 16, 4, 4)
    upsample_initial_channel: int = 512
    resblock: str = "1"
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    sample_rate_hz: int = 22050
    mel_n_fft: int = 1024
    mel_win_samples: int = 1024
    mel_fmin_hz: float = 0.0
    mel_fmax_hz: float | None = 8000.0

    def __post_init__(self) -> None:
        for name in ("num_mels", "upsample_initial_channel", "sample_rate_hz", "mel_n_fft", "mel_win_samples"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise HiFiGANConfigError(f"{name} must be a positive int, got {value!r}")
        object.__setattr__(self, "upsample_rates", _int_tuple("upsample_rates", self.upsample_rates))
        object.__setattr__(self, "upsample_kernel_sizes",
                           _int_tuple("upsample_kernel_sizes", self.upsample_kernel_sizes))
        object.__setattr__(self, "resblock_kernel_sizes",
                           _int_tuple("resblock_kernel_sizes", self.resblock_kernel_sizes))
        if not isinstance(self.resblock_dilation_sizes, (list, tuple)):
            raise HiFiGANConfigError("resblock_dilation_sizes must be a list of lists of ints")
        object.__setattr__(self, "resblock_dilation_sizes", tuple(
            _int_tuple("resblock_dilation_sizes[]", d) for d in self.resblock_dilation_sizes))
        if self.resblock not in ("1", "2"):
            raise HiFiGANConfigError(f"resblock must be '1' or '2', got {self.resblock!r}")
        if len(self.upsample_rates) != len(self.upsample_kernel_sizes):
            raise HiFiGANConfigError("upsample_rates and upsample_kernel_sizes differ in length")
        for u, k in zip(self.upsample_rates, self.upsample_kernel_sizes):
            if k < u or (k - u) % 2:
                raise HiFiGANConfigError(f"upsample kernel {k} must be ≥ rate {u} with k − u even (output = T·u)")
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise HiFiGANConfigError("resblock_kernel_sizes and resblock_dilation_sizes differ in length")
        want = 3 if self.resblock == "1" else 2
        for d in self.resblock_dilation_sizes:
            if len(d) != want:
                raise HiFiGANConfigError(f"resblock {self.resblock} needs {want} dilations per block, got {list(d)}")
        if any(k % 2 == 0 for k in self.resblock_kernel_sizes):
            raise HiFiGANConfigError("resblock kernel sizes must be odd")
        if self.upsample_initial_channel % (2 ** len(self.upsample_rates)):
            raise HiFiGANConfigError("upsample_initial_channel must be divisible by 2**len(upsample_rates)")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HiFiGANConfig:
        """Build from a JSON-style dict of this class's fields; unknown keys are rejected."""
        return cls(**known_fields(cls, data, HiFiGANConfigError, "HiFi-GAN config"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        out = dataclasses.asdict(self)
        for name in ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes"):
            out[name] = list(getattr(self, name))
        out["resblock_dilation_sizes"] = [list(d) for d in self.resblock_dilation_sizes]
        return out

    @classmethod
    def v1(cls) -> HiFiGANConfig:
        """jik876 config_v1 (also UNIVERSAL_V1)."""
        return cls()

    @classmethod
    def v2(cls) -> HiFiGANConfig:
        """jik876 config_v2."""
        return cls(upsample_initial_channel=128)

    @classmethod
    def v3(cls) -> HiFiGANConfig:
        """jik876 config_v3 (resblock type 2)."""
        return cls(resblock="2", upsample_rates=(8, 8, 4), upsample_kernel_sizes=(16, 16, 8),
                   upsample_initial_channel=256, resblock_kernel_sizes=(3, 5, 7),
                   resblock_dilation_sizes=((1, 2), (2, 6), (3, 12)))

    @classmethod
    def tiny(cls, resblock: str = "1") -> HiFiGANConfig:
        """Small random-test model (hop 4·2 = 8 samples)."""
        dil = ((1, 3, 5), (1, 3, 5)) if resblock == "1" else ((1, 2), (2, 6))
        return cls(num_mels=8, upsample_rates=(4, 2), upsample_kernel_sizes=(8, 4), upsample_initial_channel=16,
                   resblock=resblock, resblock_kernel_sizes=(3, 5), resblock_dilation_sizes=dil,
                   sample_rate_hz=8000)

    @property
    def hop_samples(self) -> int:
        """Output samples per mel frame: prod(upsample_rates)."""
        return math.prod(self.upsample_rates)

    @property
    def min_frames(self) -> int:
        """Fewest frames accepted: all convolutions zero-pad, so one frame works."""
        return 1

    @property
    def receptive_field_frames(self) -> int:
        """Mel frames on each side of a frame that can influence its audio (a safe upper bound). V1: 16."""
        def block_reach(kernel: int, dilations: tuple[int, ...]) -> float:
            half = (kernel - 1) / 2
            return sum(d * half + (half if self.resblock == "1" else 0) for d in dilations)

        reach = 3.0  # conv_pre, kernel 7
        total_upsampling = 1
        widest = max(block_reach(k, d) for k, d in zip(self.resblock_kernel_sizes, self.resblock_dilation_sizes))
        for u, k in zip(self.upsample_rates, self.upsample_kernel_sizes):
            reach += (k / u + 1) / total_upsampling
            total_upsampling *= u
            reach += widest / total_upsampling
        reach += 3 / total_upsampling  # conv_post, kernel 7
        return math.ceil(reach)


def _padding(kernel_size: int, dilation: int) -> int:
    return (kernel_size * dilation - dilation) // 2


class ResBlock1(nn.Module):
    """Three (dilated conv, conv) pairs, each with LeakyReLU before and a residual connection."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]):
        super().__init__()
        self.convs1 = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, dilation=d, padding=_padding(kernel_size, d))
            for d in dilations
        )
        self.convs2 = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, padding=_padding(kernel_size, 1)) for _ in dilations
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, N] → [B, C, N]."""
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = c2(F.leaky_relu(c1(F.leaky_relu(x, RESBLOCK_SLOPE)), RESBLOCK_SLOPE))
            x = x + xt
        return x


class ResBlock2(nn.Module):
    """Two dilated convs, each with LeakyReLU before and a residual connection."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...]):
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, dilation=d, padding=_padding(kernel_size, d))
            for d in dilations
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, N] → [B, C, N]."""
        for c in self.convs:
            x = x + c(F.leaky_relu(x, RESBLOCK_SLOPE))
        return x


class HiFiGAN(ConfiguredVocoder):
    """Log-mel [B, T, num_mels] (natural log, jik876 recipe) → audio [B, T·hop] in [−1, 1]."""

    config_class = HiFiGANConfig

    def __init__(self, config: HiFiGANConfig):
        super().__init__()
        self.config = config
        c = config
        ch0 = c.upsample_initial_channel
        self.conv_pre = nn.Conv1d(c.num_mels, ch0, 7, padding=3)
        self.ups = nn.ModuleList(
            nn.ConvTranspose1d(ch0 // 2 ** i, ch0 // 2 ** (i + 1), k, u, padding=(k - u) // 2)
            for i, (u, k) in enumerate(zip(c.upsample_rates, c.upsample_kernel_sizes))
        )
        block = ResBlock1 if c.resblock == "1" else ResBlock2
        self.resblocks = nn.ModuleList(
            block(ch0 // 2 ** (i + 1), k, d)
            for i in range(len(c.upsample_rates))
            for k, d in zip(c.resblock_kernel_sizes, c.resblock_dilation_sizes)
        )
        self.conv_post = nn.Conv1d(ch0 // 2 ** len(c.upsample_rates), 1, 7, padding=3)
        self.num_kernels = len(c.resblock_kernel_sizes)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel [B, T, num_mels] → audio [B, T·hop_samples]."""
        if mel.dim() != 3 or mel.shape[-1] != self.config.num_mels:
            raise ValueError(f"mel must be [B, T, {self.config.num_mels}], got {tuple(mel.shape)}")
        if mel.shape[1] == 0:
            raise EmptyMelError("cannot vocode a mel with 0 frames")
        x = self.conv_pre(mel.transpose(1, 2))
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, RESBLOCK_SLOPE))
            blocks = self.resblocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            xs = blocks[0](x)
            for block in blocks[1:]:
                xs = xs + block(x)
            x = xs / self.num_kernels
        x = torch.tanh(self.conv_post(F.leaky_relu(x, FINAL_SLOPE)))
        return x[:, 0]
