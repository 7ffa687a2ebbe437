"""Linear fade-in at a turn's start and fade-out on clear/end, stateful across chunk boundaries."""

from __future__ import annotations

import logging

import numpy as np

from service.audio import AudioFormatError
from service.audio.g711 import Encoding, decode, encode

log = logging.getLogger(__name__)

MAX_FADE_MS = 50


def fade_samples(sample_rate_hz: int, fade_ms: float) -> int:
    """Length of a fade in samples (rounded); validates 0 <= fade_ms <= 50 and a positive rate."""
    if isinstance(sample_rate_hz, bool) or not isinstance(sample_rate_hz, (int, np.integer)) or sample_rate_hz <= 0:
        raise AudioFormatError(f"sample_rate_hz must be a positive integer, got {sample_rate_hz!r}")
    if isinstance(fade_ms, bool) or not isinstance(fade_ms, (int, float, np.integer, np.floating)):
        raise AudioFormatError(f"fade_ms must be a number, got {fade_ms!r}")
    if not 0 <= fade_ms <= MAX_FADE_MS:
        raise AudioFormatError(f"fade_ms must be in 0-{MAX_FADE_MS}, got {fade_ms!r}")
    return int(round(sample_rate_hz * float(fade_ms) / 1000.0))


class _Ramp:
    """A linear gain ramp over the first `length_samples` samples of a stream, applied chunk by chunk."""

    _rising = True

    def __init__(self, sample_rate_hz: int, fade_ms: float) -> None:
        self.sample_rate_hz = int(sample_rate_hz)
        self.fade_ms = float(fade_ms)
        self.length_samples = fade_samples(sample_rate_hz, fade_ms)
        self.position_samples = 0  # samples of the stream seen so far

    @property
    def done(self) -> bool:
        """True once the whole ramp has been applied."""
        return self.position_samples >= self.length_samples

    def gain(self, index: np.ndarray) -> np.ndarray:
        """Gain for stream sample indices [N] (float64): the ramp inside it, the final level after it."""
        idx = np.asarray(index, dtype=np.float64)
        n = max(self.length_samples, 1)
        if self._rising:
            ramp = idx / n  # 0 at the first sample
            return np.where(idx < self.length_samples, ramp, 1.0)
        ramp = 1.0 - (idx + 1.0) / n  # 0 at the last ramp sample
        return np.where(idx < self.length_samples, ramp, 0.0)

    def apply(self, samples: np.ndarray) -> np.ndarray:
        """Return float32 samples [N] scaled by the gain for their place in the stream (input untouched)."""
        x = np.asarray(samples)
        if x.ndim != 1:
            raise AudioFormatError(f"expected mono samples [N], got shape {x.shape}")
        out = x.astype(np.float32, copy=True)
        start = self.position_samples
        self.position_samples += out.size
        if self._rising and start >= self.length_samples:
            return out  # past the fade-in: unity gain, nothing to do
        out *= self.gain(np.arange(start, start + out.size)).astype(np.float32)
        return out

    def reset(self) -> None:
        """Start the ramp again at the next sample (a new turn)."""
        self.position_samples = 0


class FadeIn(_Ramp):
    """Gain rises linearly from 0 (first sample) to 1 over fade_ms, then stays 1."""

    _rising = True


class FadeOut(_Ramp):
    """Gain falls linearly from 1 to 0 (last ramp sample) over fade_ms, then stays 0 (silence)."""

    _rising = False


def fade_out_payload(payload: bytes, encoding: "Encoding | str", sample_rate_hz: int, fade_ms: float) -> bytes:
    """An encoded frame faded out over its first fade_ms and silent after (the last frame sent on clear).

    Decodes, applies FadeOut, re-encodes; the result has the same length as `payload`.
    """
    enc = Encoding.parse(encoding)
    samples = decode(payload, enc)
    faded = FadeOut(sample_rate_hz, fade_ms).apply(samples)
    out = encode(faded, enc)
    if len(out) != len(payload):  # pragma: no cover - encode/decode are length-preserving
        raise AudioFormatError("fade changed the payload length")
    return out
