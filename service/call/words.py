"""Word timestamps of one segment: the WordTimer fed chunk by chunk, and the audio held until its words are timed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.timestamps import WordTime, WordTimer, word_units


class SegmentWords:
    """Times a segment's words as its chunks arrive and holds back the audio of a word not timed yet.

    ``push`` returns the samples that may go out now (float32 [n], at the voice's rate, continuing the segment's
    audio) and the words timed so far: spans in the turn's text (code points), samples from the segment's
    start. Every word is returned no later than the samples that hold its start, so its event can precede
    the frame carrying its first audio.
    """

    def __init__(self, text: str, phones: Sequence[str], id_source: Sequence[int | None], seg_start_char: int,
                 step_samples: int):
        self.timer = WordTimer(word_units(text, phones, id_source), float(step_samples), 1)
        self.step_samples = int(step_samples)
        self.seg_start_char = seg_start_char
        self._held = np.zeros(0, np.float32)  # samples received but not released
        self._released = 0  # segment samples released so far
        self._received = 0
        self._emitted = 0  # words returned so far

    def _shift(self, words: list[WordTime]) -> list[WordTime]:
        c = self.seg_start_char
        self._emitted += len(words)
        return [WordTime(w.start_char + c, w.end_char + c, w.start_sample, w.end_sample) for w in words]

    def push(self, start_sample: int, samples: np.ndarray, input_positions: np.ndarray,
             step_start_samples: np.ndarray | None = None, ahead_positions: np.ndarray | None = None,
             ahead_step_start_samples: np.ndarray | None = None) -> tuple[np.ndarray, list[WordTime]]:
        """One AudioChunk → (samples releasable now, words timed by it).

        `step_start_samples`: where each of the chunk's steps starts (AudioChunk.step_start_samples, exact at any
        speaking rate); None: steps of `step_samples` each (rate 1). `ahead_positions` /
        `ahead_step_start_samples`: the steps the engine decided past the chunk (AudioChunk's): a word the decoder
        has passed is timed now, so its audio is not held for the chunk that ends it."""
        end_sample = start_sample + len(samples)
        ahead = () if ahead_positions is None else ahead_positions
        if step_start_samples is not None:
            words = self.timer.push(start_sample, len(samples), input_positions, step_starts=step_start_samples,
                                    ahead=ahead, ahead_starts=ahead_step_start_samples if len(ahead) else None)
        else:  # the chunk's input_positions are the steps whose first sample lies in it: the first on a step edge
            first_step_sample = -(-start_sample // self.step_samples) * self.step_samples
            words = self.timer.push(first_step_sample, max(0, end_sample - first_step_sample), input_positions,
                                    ahead=ahead)
        self._received = end_sample
        self._held = np.concatenate([self._held, np.asarray(samples, np.float32)])
        hold = self.timer.hold_from_sample()
        n = len(self._held) if hold is None else min(len(self._held), max(0, hold - self._released))
        out, self._held = self._held[:n], self._held[n:]
        self._released += n
        return out, self._shift(words)

    def finish(self) -> tuple[np.ndarray, list[WordTime]]:
        """The segment's audio ended: the held samples and the words still open (ending there)."""
        out, self._held = self._held, np.zeros(0, np.float32)
        self._released += len(out)
        return out, self._shift(self.timer.finish(self._received))

    def released_chars(self, covered: int) -> int:
        """Turn text the released audio speaks, given `covered` (the heard-text rule over all audio received):
        while samples are held, the text stops where the held word begins."""
        if not len(self._held) or self._emitted >= len(self.timer.units):
            return covered
        return min(covered, self.seg_start_char + self.timer.units[self._emitted].start_char)
