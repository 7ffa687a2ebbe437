"""Word timestamps from the decoder's attention alignment: text spans with their audio time, emitted in order, never late."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Phone symbols that end a word: prosodic-word (#1), phrase (#2) and intonational-phrase (#3) marks, pauses.
WORD_BREAK_SYMBOLS = frozenset({"#1", "#2", "#3", "sil", "eos"})
#: Symbols the voice realizes as a pause: a word followed by one ends when the alignment leaves its last id.
PAUSE_SYMBOLS = frozenset({"#3", "sil", "eos"})


def covered_chars(id_source: Sequence[int | None]) -> np.ndarray:
    """covered[k] = characters of the segment's text spoken once its first k ids are: int64 [len(ids) + 1].

    The same rule as FrontendResult.spoken_chars (the furthest source character of the ids so far, plus one),
    tabulated once so that every chunk costs O(1).
    """
    out = np.zeros(len(id_source) + 1, np.int64)
    best = 0
    for k, src in enumerate(id_source):
        if src is not None and src + 1 > best:
            best = src + 1
        out[k + 1] = best
    return out


class AlignmentCursor:
    """How much of a segment's text the audio so far has spoken: the heard-text rule on clear.

    Feed each AudioChunk's ``input_positions`` (attention peak per decoder step: an index into the ids) in
    order; ``advance`` returns the characters of the segment's text covered so far. The cursor never goes
    back (a peak that returns to an earlier id does not un-speak text).
    """

    def __init__(self, id_source: Sequence[int | None]) -> None:
        self._covered = covered_chars(id_source)
        self.peak = -1  # furthest id the attention has reached

    def advance(self, input_positions: np.ndarray | Sequence[int]) -> int:
        """Characters covered once this chunk's steps have played."""
        if len(input_positions):
            self.peak = max(self.peak, int(np.max(input_positions)))
        return int(self._covered[min(self.peak + 1, len(self._covered) - 1)])


@dataclass(frozen=True)
class Unit:
    """A word (or character) of the segment: ids ``first_id..last_id`` read text[start_char:end_char].

    The word's audio ends when the alignment reaches ``end_id``: the next word's first id when only
    prosody marks without a pause (#0, #1, #2) lie between (the voice is still finishing this word while
    its attention rests on the mark), else ``last_id + 1`` (a pause follows).
    """

    first_id: int
    last_id: int
    start_char: int
    end_char: int
    end_id: int


@dataclass(frozen=True)
class WordTime:
    """One word's span in the segment's text (code points) and its audio, in samples from the segment's start."""

    start_char: int
    end_char: int
    start_sample: int
    end_sample: int


def word_units(text: str, phones: Sequence[str], id_source: Sequence[int | None], by: str = "word") -> list[Unit]:
    """The segment's words from the frontend's output (FrontendResult.phones / id_source over ``text``).

    ``by="word"``: prosodic words (the front end's grouping; digit and Latin runs group as they are read);
    ``by="char"``: one unit per source character. A unit's span reaches over the characters after it that
    no id refers to (the rest of a digit run read from its first digit, "2026" → 二零二六), but never over
    punctuation or spaces. Units are in text order and do not overlap.
    """
    if by not in ("word", "char"):
        raise ValueError(f"by must be 'word' or 'char', not {by!r}")
    groups: list[list[int]] = []
    current: list[int] = []
    last_src: int | None = None
    for k, (phone, src) in enumerate(zip(phones, id_source)):
        if src is None:
            if phone in WORD_BREAK_SYMBOLS and current:
                groups.append(current)
                current = []
            continue
        if by == "char" and current and src != last_src:
            groups.append(current)
            current = []
        current.append(k)
        last_src = src
    if current:
        groups.append(current)
    units: list[Unit] = []
    for ids in groups:
        srcs = [id_source[k] for k in ids]
        start, end = min(srcs), max(srcs) + 1  # type: ignore[type-var,operator]
        if units and start < units[-1].end_char:  # a source that goes back (lexicon, erhua): merge
            prev = units.pop()
            units.append(Unit(prev.first_id, ids[-1], prev.start_char, max(prev.end_char, end), ids[-1] + 1))
            continue
        units.append(Unit(ids[0], ids[-1], start, end, ids[-1] + 1))
    referenced = {s for s in id_source if s is not None}
    out: list[Unit] = []
    for i, u in enumerate(units):
        nxt = units[i + 1] if i + 1 < len(units) else None
        limit = nxt.start_char if nxt is not None else len(text)
        end = u.end_char
        while end < limit and end not in referenced and text[end].isalnum():
            end += 1
        end_id = u.last_id + 1
        if nxt is not None and not any(p in PAUSE_SYMBOLS for p in phones[u.last_id + 1:nxt.first_id]):
            end_id = nxt.first_id
        out.append(Unit(u.first_id, u.last_id, u.start_char, end, end_id))
    return out


class WordTimer:
    """Times a segment's words from its audio chunks' attention alignment, as the chunks arrive.

    A word starts at the first decoder step whose attention (running maximum of the peaks, as on clear)
    reaches its first id, and ends at the first step that reaches its ``end_id`` (past its last id and the
    prosody marks after it, up to a pause); it is emitted at that
    moment, and words come in text order, each once. From chunks alone a word's end is never after the audio
    received so far; with the decided steps past a chunk (``push(..., ahead=)``, AudioChunk.ahead_positions) a
    word is timed as soon as the decoder has passed it, before the chunk holding its end: the same words, sooner.
    ``finish`` ends the words still open at the end of the audio. Steps are ``frames_per_step`` mel frames of
    ``samples_per_frame`` samples (the voice's reduction factor and hop), unless the chunks give each step's
    start sample (``push(..., step_starts=)``: the engine's, exact at any speaking rate).
    """

    def __init__(self, units: Sequence[Unit], samples_per_frame: float, frames_per_step: int) -> None:
        if samples_per_frame <= 0 or frames_per_step < 1:
            raise ValueError("samples_per_frame must be > 0 and frames_per_step ≥ 1")
        self.units = list(units)
        self.samples_per_frame = float(samples_per_frame)
        self.frames_per_step = int(frames_per_step)
        self._peaks: list[int] = []  # attention peak per decoder step, as far as known (audio and ahead)
        self._starts: list[int] = []  # start sample per decoder step, when the chunks gave them
        self._chunk_steps = 0  # steps whose audio came (the next chunk's steps start here)
        self._next_step = 0  # first step not yet processed
        self._max_peak = -1
        self._unit = 0  # first unit not yet emitted
        self._start_step: int | None = None  # step where that unit started
        self._audio_samples = 0
        self._last_end = 0  # end sample of the last word emitted

    def _sample_of_step(self, step: int) -> int:
        if step < len(self._starts):
            return self._starts[step]
        return int(round(step * self.frames_per_step * self.samples_per_frame))

    def push(self, start_sample: int, n_samples: int, input_positions: np.ndarray | Sequence[int],
             step_starts: np.ndarray | Sequence[int] | None = None,
             ahead: np.ndarray | Sequence[int] = (), ahead_starts: np.ndarray | Sequence[int] | None = None,
             ) -> list[WordTime]:
        """One AudioChunk (``start_sample``, ``len(samples)``, ``input_positions``); returns the words it ends.

        ``step_starts`` (one per position, AudioChunk.step_start_samples): the steps' start samples; the chunk's
        steps then follow the steps of the chunks pushed so far. ``ahead`` (AudioChunk.ahead_positions): the
        peaks of the decided steps right after the chunk's, with ``ahead_starts`` when ``step_starts`` is given;
        their audio comes in later chunks, which repeat them."""
        if step_starts is not None:
            if len(step_starts) != len(input_positions) or len(self._starts) != len(self._peaks):
                raise ValueError("step_starts needs one start per input position, on every chunk")
            if len(ahead) and (ahead_starts is None or len(ahead_starts) != len(ahead)):
                raise ValueError("ahead_starts needs one start per ahead position")
            first_step = self._chunk_steps
        else:
            if ahead_starts is not None and len(ahead_starts):
                raise ValueError("ahead_starts without step_starts")
            first_step = int(round(start_sample / self.samples_per_frame)) // self.frames_per_step
        if first_step > len(self._peaks):
            raise ValueError(f"chunk at sample {start_sample} skips decoder steps {len(self._peaks)}-{first_step - 1}")
        self._set_steps(first_step, input_positions, step_starts)
        self._chunk_steps = max(self._chunk_steps, first_step + len(input_positions))
        self._set_steps(first_step + len(input_positions), ahead, ahead_starts if len(ahead) else None)
        self._audio_samples = max(self._audio_samples, start_sample + n_samples)
        out: list[WordTime] = []
        while self._next_step < len(self._peaks):
            self._step(self._next_step, out)
            self._next_step += 1
        return out

    def _set_steps(self, first_step: int, peaks: np.ndarray | Sequence[int],
                   starts: np.ndarray | Sequence[int] | None) -> None:
        """Steps first_step.. get these peaks (and starts): known ones are overwritten, new ones appended."""
        for i, peak in enumerate(peaks):
            step = first_step + i
            if step < len(self._peaks):
                self._peaks[step] = int(peak)
                if starts is not None and step < len(self._starts):
                    self._starts[step] = int(starts[i])
            else:
                self._peaks.append(int(peak))
                if starts is not None:
                    self._starts.append(int(starts[i]))

    def _step(self, step: int, out: list[WordTime]) -> None:
        self._max_peak = max(self._max_peak, self._peaks[step])
        while self._unit < len(self.units):
            unit = self.units[self._unit]
            if self._start_step is None:
                if self._max_peak < unit.first_id:
                    return
                self._start_step = step
            if self._max_peak < unit.end_id:
                return
            out.append(WordTime(unit.start_char, unit.end_char, self._sample_of_step(self._start_step),
                                self._sample_of_step(step)))
            self._last_end = out[-1].end_sample
            self._unit += 1
            self._start_step = None

    def finish(self, total_samples: int | None = None) -> list[WordTime]:
        """The audio ended (``total_samples`` long, default: what was pushed): the open words end there (never
        before a word already timed ahead of the audio ended: a stream cut short keeps the words in order)."""
        end = self._audio_samples if total_samples is None else int(total_samples)
        end = max(end, self._last_end)
        out: list[WordTime] = []
        while self._unit < len(self.units):
            unit = self.units[self._unit]
            start = end if self._start_step is None else min(end, self._sample_of_step(self._start_step))
            out.append(WordTime(unit.start_char, unit.end_char, start, end))
            self._unit += 1
            self._start_step = None
        return out

    def hold_from_sample(self) -> int | None:
        """Audio from this sample on may carry a word not emitted yet (it started, its end is unknown).

        A caller that must send every word's timing before the word's first audio releases the samples
        before this one and holds the rest until the next ``push``/``finish``; None: nothing to hold.
        """
        if self._unit >= len(self.units) or self._start_step is None:
            return None
        return self._sample_of_step(self._start_step)
