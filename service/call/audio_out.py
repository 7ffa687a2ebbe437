"""Audio out: one turn's engine audio resampled to the call's rate, faded in, encoded and cut into exact frames.

A turn opens on speech: the model's silence before the first speech of a turn's first segment is dropped but for a
natural onset of ONSET_KEEP_MS (word times move with it), and the frame holding the turn's first speech is marked
(time to first speech)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

import numpy as np

from models.speech_edges import speech_onset
from service.audio.fade import FadeIn
from service.audio.framer import Framer, silence_frame
from service.audio.resample import StreamResampler
from service.negotiation import SessionSettings, gain_of_db
from service.ssml import SsmlSegment
from service.timestamps import WordTime

if TYPE_CHECKING:
    from service.call.turn import Turn

PAUSE_STEP_MS = 100  # a <break> goes to release in steps this long (back-pressure and clear act between steps)
ONSET_KEEP_MS = 50  # of the model's silence before a turn's first speech, this much is kept (a natural onset)


@dataclass(frozen=True)
class FrameWord:
    """A word whose audio starts in a frame: turn text span, start offset into the frame and duration, in ms."""

    start_char: int
    end_char: int
    offset_ms: float
    duration_ms: float


@dataclass(eq=False)
class OutFrame:
    """One frame queued for release; `text_pos` = turn text characters covered once it has played."""

    payload: bytes
    turn: "Turn"
    text_pos: int
    silence: bool = False  # pre-roll
    last: bool = False  # last frame of the turn's audio: its release sends turn_done
    fade_out: bool = False  # the faded frame that ends a cleared turn: its release sends cleared
    words: list[FrameWord] = field(default_factory=list)  # words starting here: their timings go out before it
    pauses: int = 0  # SSML breaks of the turn whose audio ends at or before this frame (marks after them wait)
    speech_onset_ms: float | None = None  # the turn's first speech starts this far into this frame


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
        self.gain = gain_of_db(s.volume_db if turn.volume_db is None else turn.volume_db)
        self._voice_rate_hz = s.voice.sample_rate_hz
        self._ms_per_voice_sample = 1000.0 / s.voice.sample_rate_hz
        self._frame_ms = s.frame_ms
        self._voice_samples = 0  # voice-rate samples pushed for the turn
        self._segment_base = 0  # the turn's voice sample where the current segment starts
        self._audio_frames = 0  # audio frames made (pre-roll not counted)
        # timed words not yet on a frame: start, end as voice samples of the turn's audio before the leading trim
        self._words: list[tuple[int, int, WordTime]] = []
        self._pauses = 0  # SSML breaks pushed so far
        self._leading = True  # the turn's first segment may still be in the model's leading silence
        self._held = np.zeros(0, np.float32)  # its samples held while no speech came (at most ONSET_KEEP_MS)
        self._onset_keep = round(ONSET_KEEP_MS * s.voice.sample_rate_hz / 1000)
        self._band_hz = s.sample_rate_hz / 2  # speech is what the call's rate carries
        self.trimmed_samples = 0  # voice-rate samples of leading silence dropped
        self._speech_sample: int | None = None  # where the turn's first speech starts among the samples pushed
        self._onset_marked = False

    @property
    def held_samples(self) -> int:
        """Voice-rate samples pushed that are not in a frame yet: the onset held at the turn's start, the resampler's
        delay and the framer's partial frame. They reach the pacer only with later audio (or the flush)."""
        framed = round(self._audio_frames * self._frame_ms * self._voice_rate_hz / 1000)
        return len(self._held) + max(0, self._voice_samples - framed)

    def begin_segment(self, segment: object = None) -> None:
        """A new segment starts: the word times pushed next count from here; an SSML segment sets its own volume
        (<prosody volume>, the turn's outside it; silent: its time passes as silence). Only the turn's first
        segment is trimmed: the onset kept of one that held no speech goes out ahead of the next one's audio."""
        if self._voice_samples or self.trimmed_samples or len(self._held):
            self._leading = False
        self._segment_base = self._voice_samples + self.trimmed_samples + len(self._held)
        if isinstance(segment, SsmlSegment):
            self.gain = 0.0 if segment.volume_db is None else gain_of_db(segment.volume_db)

    def pause(self, ms: int, text_pos: int, step_ms: int = PAUSE_STEP_MS) -> Iterator[list[OutFrame]]:
        """An SSML <break>: exactly `ms` of silence at the voice's rate, through the same resampler and framer as
        speech (so the turn's audio grows by `ms` within one frame), in steps of `step_ms`: the frames of each
        step, covering the turn's text up to `text_pos`; the frame that ends it counts the break as released."""
        total = round(ms * self._voice_rate_hz / 1000)
        step = max(1, round(step_ms * self._voice_rate_hz / 1000))
        held = self._end_leading(text_pos)  # a break is meant: nothing after it is trimmed
        for start in range(0, total, step):
            frames = held + self._push_voice(np.zeros(min(step, total - start), np.float32), text_pos)
            held = []
            if start + step >= total:  # the break's end: its last frame (and every later one) counts it as released
                self._pauses += 1
                if frames:
                    frames[-1].pauses = self._pauses
            yield frames

    def _frames(self, payloads: list[bytes], text_pos: int, last: bool = False) -> list[OutFrame]:
        out: list[OutFrame] = []
        if payloads and self._preroll_frames:  # silence ahead of the first audio (the gateway's jitter buffer)
            out = [OutFrame(self._silence, self.turn, 0, silence=True) for _ in range(self._preroll_frames)]
            self._preroll_frames = 0
        for i, p in enumerate(payloads):
            frame = OutFrame(p, self.turn, text_pos, pauses=self._pauses)
            frame_start_ms = self._audio_frames * self._frame_ms
            self._audio_frames += 1
            end_ms = self._audio_frames * self._frame_ms
            while self._words and (self._ms(self._words[0][0]) < end_ms or (last and i == len(payloads) - 1)):
                start, stop, w = self._words.pop(0)
                start_ms, stop_ms = self._ms(start), self._ms(stop)
                offset_ms = min(max(0.0, start_ms - frame_start_ms), self._frame_ms)
                frame.words.append(FrameWord(w.start_char, w.end_char, offset_ms, max(0.0, stop_ms - start_ms)))
            if self._speech_sample is not None and not self._onset_marked:
                speech_ms = self._speech_sample * self._ms_per_voice_sample
                if speech_ms < end_ms or (last and i == len(payloads) - 1):
                    frame.speech_onset_ms = min(max(0.0, speech_ms - frame_start_ms), float(self._frame_ms))
                    self._onset_marked = True
            out.append(frame)
        if out:
            self.last = out[-1]
        return out

    def leftover_words(self) -> list[FrameWord]:
        """Words timed at or after the end of the turn's audio (no frame holds them), offsets from the last frame's
        start; call after `flush`."""
        last_start_ms = max(0, self._audio_frames - 1) * self._frame_ms
        out = []
        for a, b, w in self._words:
            a_ms, b_ms = self._ms(a), self._ms(b)
            out.append(FrameWord(w.start_char, w.end_char, max(0.0, a_ms - last_start_ms), max(0.0, b_ms - a_ms)))
        self._words.clear()
        return out

    def _ms(self, turn_sample: int) -> float:
        """A sample of the turn's untrimmed audio → ms into the audio sent (0 for a sample the trim dropped)."""
        return max(0, turn_sample - self.trimmed_samples) * self._ms_per_voice_sample

    def push(self, samples: np.ndarray, text_pos: int, words: list[WordTime] = ()) -> list[OutFrame]:  # type: ignore[assignment]
        """Engine samples float32 [N] at the voice's rate → the frames they complete (covering up to `text_pos`);
        `words` (sample times from the segment's start) go on the frames holding their first audio."""
        base = self._segment_base
        for w in words:
            self._words.append((base + w.start_sample, base + w.end_sample, w))
        if self._leading:
            samples = self._trim_leading(np.asarray(samples, np.float32))
            if not len(samples):
                return []
        elif len(self._held):
            samples = np.concatenate([self._held, samples])
            self._held = np.zeros(0, np.float32)
        return self._push_speech(samples, text_pos)

    def _trim_leading(self, samples: np.ndarray) -> np.ndarray:
        """The turn's first segment before its first speech: hold at most ONSET_KEEP_MS of it and drop the rest;
        once speech comes, the samples from ONSET_KEEP_MS before it on (and the trim ends)."""
        held = np.concatenate([self._held, samples]) if len(self._held) else samples
        onset = speech_onset(held, self._voice_rate_hz, self._band_hz)
        if onset is None:
            drop = max(0, len(held) - self._onset_keep)
            self.trimmed_samples += drop
            self._held = held[drop:]
            return np.zeros(0, np.float32)
        start = max(0, onset - self._onset_keep)
        self.trimmed_samples += start
        self._leading = False
        self._held = np.zeros(0, np.float32)
        return held[start:]

    def _end_leading(self, text_pos: int) -> list[OutFrame]:
        """No trim from here on; the samples held go out (the kept onset of a first segment without speech)."""
        self._leading = False
        held, self._held = self._held, np.zeros(0, np.float32)
        return self._push_speech(held, text_pos) if len(held) else []

    def _push_speech(self, samples: np.ndarray, text_pos: int) -> list[OutFrame]:
        """Model samples (the turn's first speech noted, on the voice's own level) → gain → frames."""
        if self._speech_sample is None and self.gain > 0.0:
            onset = speech_onset(samples, self._voice_rate_hz, self._band_hz)
            if onset is not None:
                self._speech_sample = self._voice_samples + onset
        if self.gain != 1.0:  # the turn's volume, on the voice-rate samples; a gain above 0 dB is limited to full scale
            samples = samples * np.float32(self.gain)
            if self.gain > 1.0:
                samples = np.clip(samples, -1.0, 1.0)
        return self._push_voice(samples, text_pos)

    def _push_voice(self, samples: np.ndarray, text_pos: int) -> list[OutFrame]:
        self._voice_samples += len(samples)
        out = self.resampler.push(samples)
        return self._frames(self.framer.push(self.fade_in.apply(out)) if len(out) else [], text_pos)

    def flush(self, text_pos: int) -> list[OutFrame]:
        """The end of the turn's audio: the resampler's tail and the last partial frame (padded with silence)."""
        held = self._end_leading(text_pos)
        tail = self.resampler.flush()
        payloads = self.framer.push(self.fade_in.apply(tail)) if len(tail) else []
        return held + self._frames(payloads + self.framer.flush(pad=True), text_pos, last=True)
