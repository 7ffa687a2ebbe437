"""Cuts a float sample stream into encoded frames of exactly frame_ms each, keeping the remainder."""

from __future__ import annotations

import logging

import numpy as np

from protos.voxpool.v1 import wire
from service.audio import AudioFormatError
from service.audio.g711 import Encoding, encode

log = logging.getLogger(__name__)


def validate_format(sample_rate_hz: int, frame_ms: int) -> None:
    """Raise AudioFormatError unless the API offers the rate and the frame length at that rate (protos wire rules)."""
    frame_samples(sample_rate_hz, frame_ms)


def frame_samples(sample_rate_hz: int, frame_ms: int) -> int:
    """Samples in one frame: 160 at 8 kHz / 20 ms, 882 at 44.1 kHz / 20 ms."""
    try:
        return wire.frame_samples(sample_rate_hz, frame_ms)
    except wire.WireFormatError as exc:
        raise AudioFormatError(str(exc)) from None


def frame_bytes(sample_rate_hz: int, frame_ms: int, encoding: "Encoding | str") -> int:
    """Payload bytes of one frame: 160 for PCMU at 8 kHz / 20 ms, 320 for L16 at 8 kHz / 20 ms."""
    return frame_samples(sample_rate_hz, frame_ms) * Encoding.parse(encoding).bytes_per_sample


def silence_frame(sample_rate_hz: int, frame_ms: int, encoding: "Encoding | str") -> bytes:
    """One frame of digital silence: 0xFF bytes (μ-law), 0xD5 (A-law), zeros (L16)."""
    return Encoding.parse(encoding).silence_sample * frame_samples(sample_rate_hz, frame_ms)


class Framer:
    """Push float samples (already at sample_rate_hz), get back whole encoded frames.

    Samples that do not fill a frame stay inside until the next push; `flush` emits them as one last
    frame, padded with silence (or short, with pad=False).
    """

    def __init__(self, sample_rate_hz: int, frame_ms: int, encoding: "Encoding | str") -> None:
        validate_format(sample_rate_hz, frame_ms)
        try:
            wire.check_encoding_rate(Encoding.parse(encoding).value, sample_rate_hz)
        except wire.WireFormatError as exc:
            raise AudioFormatError(str(exc)) from None
        self.sample_rate_hz = int(sample_rate_hz)
        self.frame_ms = int(frame_ms)
        self.encoding = Encoding.parse(encoding)
        self.frame_samples = frame_samples(self.sample_rate_hz, self.frame_ms)
        self.frame_bytes = self.frame_samples * self.encoding.bytes_per_sample
        self.silence = silence_frame(self.sample_rate_hz, self.frame_ms, self.encoding)
        self._pending = bytearray()  # encoded samples not yet forming a whole frame

    @property
    def pending_samples(self) -> int:
        """Samples held back, waiting for the rest of their frame (< frame_samples)."""
        return len(self._pending) // self.encoding.bytes_per_sample

    def push(self, samples: np.ndarray) -> list[bytes]:
        """Append float samples [N]; return every whole frame now complete (each exactly frame_bytes)."""
        x = np.asarray(samples)
        if x.ndim != 1:
            raise AudioFormatError(f"expected mono samples [N], got shape {x.shape}")
        if x.size == 0:
            return []
        self._pending += encode(x, self.encoding)
        n_frames = len(self._pending) // self.frame_bytes
        if n_frames == 0:
            return []
        cut = n_frames * self.frame_bytes
        data = bytes(self._pending[:cut])
        del self._pending[:cut]
        return [data[i : i + self.frame_bytes] for i in range(0, cut, self.frame_bytes)]

    def flush(self, pad: bool = True) -> list[bytes]:
        """Emit the held-back samples as one last frame (silence-padded to frame_bytes when pad); [] if none."""
        if not self._pending:
            return []
        data = bytes(self._pending)
        self._pending.clear()
        if pad:
            data += self.encoding.silence_sample * ((self.frame_bytes - len(data)) // self.encoding.bytes_per_sample)
        return [data]

    def reset(self) -> int:
        """Drop the held-back samples (barge-in); return how many were dropped."""
        dropped = self.pending_samples
        self._pending.clear()
        return dropped
