"""The interface the engine loop drives per voice: one batched call per module (encode, decode, vocode)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from engine.scheduler import VoiceTiming


@dataclass(frozen=True)
class DecodeRows:
    """Host-side result of one batched decode call over B rows and S steps (r frames per step).

    `valid_steps[i]` steps of row i belong to the utterance (the rest came after its stop); `loud[i, f]` is
    False for frames the trailing trim would drop if they ended the utterance (sum |mel_before| < 1).
    """

    peaks: np.ndarray  # int64 [B, S]: attention argmax (input position) per step
    loud: np.ndarray  # bool [B, S·r]
    valid_steps: np.ndarray  # int64 [B]
    finished: np.ndarray  # bool [B]: the decoder stopped (stop token or max steps)


@dataclass(frozen=True)
class VocodeJob:
    """Audio for vocoder frames [start_frame, end_frame) of the request in `slot`.

    Vocoder frames are the mel after the tempo change at `rate` (models/mel_time_scale.py; decoder frames at rate
    1). `utterance_frames` is the trimmed utterance length in decoder frames once decoding finished (frames at and
    beyond it are not part of the utterance), else None. `first`/`last`: the first / last chunk of the request.
    """

    slot: int
    start_frame: int
    end_frame: int
    utterance_frames: int | None
    first: bool
    last: bool
    speaking_rate: float = 1.0  # the request's speaking rate


class ModuleRunner(Protocol):
    """Runs one voice's models over slots of a preallocated batched state (engine thread only)."""

    voice: str
    timing: VoiceTiming
    n_symbols: int
    max_input_len: int

    def encode(self, slots: Sequence[int], ids: Sequence[Sequence[int]], seeds: Sequence[int]) -> None:
        """Encode each request and write its initial decoder state into its slot."""

    def decode(self, slots: Sequence[int], steps: int, dropout: bool) -> DecodeRows:
        """Advance the decoder `steps` steps for these slots (one batched call), keeping their mel."""

    def vocode(self, jobs: Sequence[VocodeJob]) -> list[np.ndarray]:
        """Postnet + vocoder for each job's frames (one batched call): float32 samples per job."""

    def release(self, slot: int) -> None:
        """Forget the slot's request (state and mel buffer)."""

    def enter_thread(self) -> None:
        """Called first on the engine thread: claim the thread's compute resources (engine/threads.py)."""

    def warmup(self) -> None:
        """Run each module once so the first request does not pay for lazy initialisation."""
