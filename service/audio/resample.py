"""Stateful band-limited sample-rate conversion of a mono float stream, chunk by chunk (soxr)."""

from __future__ import annotations

import logging

import numpy as np
import soxr

from service.audio import AudioFormatError

log = logging.getLogger(__name__)

QUALITIES = ("QQ", "LQ", "MQ", "HQ", "VHQ")


class StreamResampler:
    """Resamples one continuous mono stream: `push` chunks as they come, `flush` once at the end.

    The filter state lives across chunks (soxr.ResampleStream), so chunk boundaries leave no clicks,
    and the anti-aliasing low-pass removes everything above the output Nyquist frequency.
    Input and output are float32 [N]; output lags input by the filter delay until `flush`.
    Equal rates pass samples through unchanged.
    """

    def __init__(self, in_rate_hz: int, out_rate_hz: int, quality: str = "HQ") -> None:
        for name, hz in (("in_rate_hz", in_rate_hz), ("out_rate_hz", out_rate_hz)):
            if isinstance(hz, bool) or not isinstance(hz, (int, np.integer)) or hz <= 0:
                raise AudioFormatError(f"{name} must be a positive integer, got {hz!r}")
        if quality not in QUALITIES:
            raise AudioFormatError(f"quality must be one of {QUALITIES}, got {quality!r}")
        self.in_rate_hz = int(in_rate_hz)
        self.out_rate_hz = int(out_rate_hz)
        self.quality = quality
        self._stream: soxr.ResampleStream | None = None
        self._flushed = False
        self._new_stream()

    @property
    def identity(self) -> bool:
        """True when input and output rates are equal (no filtering at all)."""
        return self.in_rate_hz == self.out_rate_hz

    def _new_stream(self) -> None:
        self._flushed = False
        self._stream = None
        if not self.identity:
            self._stream = soxr.ResampleStream(
                self.in_rate_hz, self.out_rate_hz, 1, dtype="float32", quality=self.quality
            )

    def push(self, samples: np.ndarray) -> np.ndarray:
        """Feed float samples [N] at in_rate_hz; return the float32 samples [M] now ready at out_rate_hz."""
        x = np.asarray(samples)
        if x.ndim != 1:
            raise AudioFormatError(f"expected mono samples [N], got shape {x.shape}")
        if x.size and not np.issubdtype(x.dtype, np.floating):
            raise AudioFormatError(f"expected float samples, got {x.dtype}")
        if self._flushed:
            raise AudioFormatError("push after flush: call reset() to start a new stream")
        x = np.ascontiguousarray(x, dtype=np.float32)
        if self._stream is None:
            return x.copy()
        return self._stream.resample_chunk(x, last=False)

    def flush(self) -> np.ndarray:
        """End of the stream: return the samples still held in the filter (float32 [M]); then reset() to reuse."""
        if self._flushed:
            return np.zeros(0, dtype=np.float32)
        self._flushed = True
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        return self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)

    def reset(self) -> None:
        """Drop all state (e.g. on barge-in) and start a new stream."""
        self._new_stream()

    @property
    def delay_out_samples(self) -> float:
        """Output samples still inside the filter (the lag of push output behind its input)."""
        return 0.0 if self._stream is None else float(self._stream.delay())
