"""Audio out: one turn's engine audio resampled to the call's rate, faded in, encoded and cut into exact frames."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from service.audio.fade import FadeIn
from service.audio.framer import Framer, silence_frame
from service.audio.resample import StreamResampler
from service.session import SessionSettings

if TYPE_CHECKING:
    from service.call.turn import Turn


@dataclass(eq=False)
class OutFrame:
    """One frame queued for release; `text_pos` = turn text characters covered once it has played."""

    payload: bytes
    turn: "Turn"
    text_pos: int
    silence: bool = False  # pre-roll
    last: bool = False  # last frame of the turn's audio: its release sends turn_done
    fade_out: bool = False  # the faded frame that ends a cleared turn: its release sends cleared


class TurnAudio:
    """The audio chain of one turn (its state spans segments, so joins are seamless): samples in, frames out."""

    def __init__(self, settings: SessionSettings, turn: "Turn"):
        s = settings
        self.turn = turn
        self.resampler = StreamResampler(s.voice.sample_rate_hz, s.sample_rate_hz)
        self.framer = Framer(s.sample_rate_hz, s.frame_ms, s.encoding)
        self.fade_in = FadeIn(s.sample_rate_hz, s.fade_ms)
        self._silence = silence_frame(s.sample_rate_hz, s.frame_ms, s.encoding)
        self._preroll_frames = s.preroll_ms // s.frame_ms
        self.last: OutFrame | None = None  # the last frame made so far

    def _frames(self, payloads: list[bytes], text_pos: int) -> list[OutFrame]:
        out: list[OutFrame] = []
        if payloads and self._preroll_frames:  # silence ahead of the first audio (the gateway's jitter buffer)
            out = [OutFrame(self._silence, self.turn, 0, silence=True) for _ in range(self._preroll_frames)]
            self._preroll_frames = 0
        out += [OutFrame(p, self.turn, text_pos) for p in payloads]
        if out:
            self.last = out[-1]
        return out

    def push(self, samples: np.ndarray, text_pos: int) -> list[OutFrame]:
        """Engine samples float32 [N] at the voice's rate → the frames they complete (covering up to `text_pos`)."""
        out = self.resampler.push(samples)
        return self._frames(self.framer.push(self.fade_in.apply(out)) if len(out) else [], text_pos)

    def flush(self, text_pos: int) -> list[OutFrame]:
        """The end of the turn's audio: the resampler's tail and the last partial frame (padded with silence)."""
        tail = self.resampler.flush()
        payloads = self.framer.push(self.fade_in.apply(tail)) if len(tail) else []
        return self._frames(payloads + self.framer.flush(pad=True), text_pos)
