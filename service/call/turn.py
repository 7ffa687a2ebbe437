"""One turn of a call and its state machine: text, segments, marks, engine requests, and what of it was released."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Callable

from models.frontend.normalize import Span
from models.frontend.segmenter import Segment, Segmenter
from service import figures
from service.ssml import MarkAt, Pause, SsmlError, SsmlSegment, SsmlTurnText


class TurnState(str, enum.Enum):
    """Life of a turn: OPEN → COMPLETE → DONE, or → CLEARED (barge-in) / FAILED (in-band error) from either."""

    OPEN = "open"  # text may still arrive
    COMPLETE = "complete"  # text complete (flush, new turn, end); audio still coming or playing
    DONE = "done"  # every frame released, turn_done sent
    CLEARED = "cleared"  # barge-in
    FAILED = "failed"  # an in-band error ended it


_NEXT = {
    TurnState.OPEN: {TurnState.COMPLETE, TurnState.CLEARED, TurnState.FAILED},
    TurnState.COMPLETE: {TurnState.DONE, TurnState.CLEARED, TurnState.FAILED},
}


@dataclass(eq=False)
class Turn:
    """Mutable state of one turn, owned by the call's event loop; every state change goes through a method here."""

    turn_id: str
    segmenter: Segmenter
    text: str = ""
    spans: list[Span] = field(default_factory=list)  # turn-absolute offsets
    state: TurnState = TurnState.OPEN
    # Segment (an SSML turn: SsmlSegment, Pause, SsmlWarning, or the SsmlError that refused it), then None when
    # complete or ended
    segments: asyncio.Queue = field(default_factory=asyncio.Queue)
    # (text position, name, breaks before it), in order received: reached once the audio of text[:position] and of
    # that many of the turn's SSML breaks has been released
    marks: list[tuple[int, str, int]] = field(default_factory=list)
    streams: set = field(default_factory=set)  # engine OutputStreams in flight
    trigger_s: float | None = None  # when the first segment became synthesizable
    first_audio_s: float | None = None  # release of the first non-silence frame
    first_audio_pts_ms: int | None = None  # media time where that frame starts
    first_speech_pts_ms: float | None = None  # media time of the turn's first sample of speech (past the onset)
    released_pos: int = 0  # turn text chars whose audio has been released
    pauses_queued: int = 0  # SSML breaks queued for the producer
    released_pauses: int = 0  # SSML breaks whose audio has been released
    audio_frames: int = 0  # non-silence frames released (the fade-out frame of a cleared turn included)
    silence_frames: int = 0  # underrun fill frames released while this turn played
    underruns: int = 0
    chunks: int = 0
    late_chunks: int = 0
    last_pts_end_ms: int = 0  # end of the last frame released for this turn
    pending_frames: int = 0  # frames pushed to the pacer and not yet released or dropped
    cleared_reply_pending: bool = False  # cleared waits for the release of the fade-out frame
    dropped_frames: int = 0
    options: object = None  # the TurnOptions of the delta that opened it (pb.TurnOptions), or None
    volume_db: float | None = None  # TurnOptions.volume_db; None = the session's
    ssml: SsmlTurnText | None = None  # an SSML turn: deltas are markup, `text` is the document's text content
    ssml_error: SsmlError | None = None  # its SSML was refused: the rest of its text is dropped
    speaking_rate: float | None = None  # TurnOptions.speaking_rate; None = the session's

    # ------------------------------------------------------------------ state

    @property
    def active(self) -> bool:
        """Still producing or playing (not done, cleared or failed)."""
        return self.state in (TurnState.OPEN, TurnState.COMPLETE)

    def _move(self, to: TurnState) -> bool:
        if to not in _NEXT.get(self.state, ()):
            return False
        self.state = to
        return True

    def add_segments(self, segments: list, now: float) -> None:
        """Queue segments (an SSML turn's breaks and warnings too) for the producer; the first segment or break
        starts the TTFA clock. An SSML turn's marks go to the pending marks."""
        for seg in segments:
            if isinstance(seg, MarkAt):
                self.add_mark(seg.pos, seg.name)
                continue
            self.pauses_queued += isinstance(seg, Pause)
            if self.trigger_s is None and isinstance(seg, (Segment, Pause)):
                self.trigger_s = now
            self.segments.put_nowait(seg)

    def add_mark(self, pos: int, name: str) -> None:
        """A mark at text position `pos`, after the breaks queued so far (a mark after a break waits for its end)."""
        self.marks.append((pos, name, self.pauses_queued))

    def read_ssml(self, reader: SsmlTurnText) -> None:
        """The turn's text is one SSML document (TurnOptions.text_format SSML), read by `reader`."""
        self.ssml = reader

    def _ssml_step(self, step: Callable[[], list], now: float) -> None:
        """Run one step of the SSML reader and queue what it completed; bad SSML rejects the turn."""
        if self.ssml_error is not None:
            return  # already refused (the producer reports it): the rest of the document is dropped
        try:
            items = step()
        except SsmlError as exc:
            self.reject(exc)
            return
        self.text = self.ssml.text
        self.add_segments(items, now)

    def reject(self, error: SsmlError) -> None:
        """Bad SSML: drop the queued segments and stop synthesis; the producer fails the turn (INVALID_SSML) when
        it reads the error, queued in their place."""
        self.ssml_error = error
        while not self.segments.empty():
            self.segments.get_nowait()
        self.segments.put_nowait(error)
        self.stop_streams()

    def append(self, delta: str, spans: list[Span], now: float) -> None:
        """Add text (spans already turn-absolute); the segments it completes are queued."""
        if self.ssml is not None:
            self._ssml_step(lambda: self.ssml.push(delta, now), now)
            return
        self.text += delta
        self.spans.extend(spans)
        self.add_segments(self.segmenter.push(delta, [(s.start, s.end) for s in spans]), now)

    def poll_idle(self, now: float) -> None:
        """Cut the text that waited longer than the idle flush time (OPEN turns only)."""
        if self.state is not TurnState.OPEN:
            return
        if self.ssml is not None:
            self._ssml_step(lambda: self.ssml.poll_idle(now), now)
        else:
            self.add_segments(self.segmenter.poll_idle(now), now)

    def complete(self, now: float) -> None:
        """No more text: cut the rest; the producer sees the end (None) after these segments. No-op unless OPEN."""
        if self.state is not TurnState.OPEN:
            return
        if self.ssml is not None:  # the document must be complete now (</speak> read)
            self._ssml_step(self.ssml.complete, now)
        else:
            self.add_segments(self.segmenter.flush(), now)
        self._move(TurnState.COMPLETE)
        if self.trigger_s is None:
            self.trigger_s = now
        self.segments.put_nowait(None)

    def clear(self) -> bool:
        """Barge-in: stop its engine requests and wake its producer; False when it had already ended."""
        if not self._move(TurnState.CLEARED):
            return False
        self.stop_streams()
        self.segments.put_nowait(None)
        return True

    def fail(self) -> bool:
        """An in-band error ended it; False when it had already ended."""
        if not self._move(TurnState.FAILED):
            return False
        self.stop_streams()
        return True

    def finish(self) -> bool:
        """Every frame released: DONE (and all its text counts as released); False when it had already ended."""
        if not self._move(TurnState.DONE):
            return False
        self.released_pos = len(self.text)
        return True

    def set_options(self, options: object, volume_db: float | None, speaking_rate: float | None) -> None:
        """The TurnOptions of the delta that opened the turn, with its checked volume and speaking rate."""
        self.options, self.volume_db, self.speaking_rate = options, volume_db, speaking_rate

    def attach_stream(self, stream: object) -> None:
        """An engine stream of this turn is in flight (stop_streams cancels it)."""
        self.streams.add(stream)

    def detach_stream(self, stream: object) -> None:
        """An engine stream of this turn ended or was closed."""
        self.streams.discard(stream)

    def fade_out_queued(self) -> None:
        """A barge-in queued the fade-out frame that ends this turn: `cleared` waits for its release."""
        self.cleared_reply_pending = True

    def stop_streams(self) -> None:
        """Close its engine streams: each request is cancelled and its slot freed within one decoder step."""
        for stream in list(self.streams):
            stream.close()
        self.streams.clear()

    # ------------------------------------------------------------------ synthesis and release accounting

    def chunk_received(self, lateness_s: float) -> None:
        """An engine chunk arrived `lateness_s` after its audio was due (figures.chunk_lateness_s)."""
        self.chunks += 1
        self.late_chunks += figures.is_late(lateness_s)

    def frame_queued(self) -> None:
        self.pending_frames += 1

    def frame_dropped(self, counted: bool = True) -> None:
        """A queued frame was dropped (barge-in); `counted` adds it to the dropped audio."""
        self.pending_frames -= 1
        self.dropped_frames += counted

    def frame_released(self, end_ms: int, text_pos: int, speech: bool, now: float, fade_out: bool = False,
                       pauses: int = 0, speech_onset_ms: float | None = None, frame_ms: int = 0) -> None:
        """A queued frame went to the gateway, ending at media time `end_ms`, after `pauses` SSML breaks;
        `speech_onset_ms`: the turn's first speech starts that far into this `frame_ms` frame."""
        self.pending_frames -= 1
        self.last_pts_end_ms = end_ms
        if speech:
            self.audio_frames += 1
            if fade_out:
                return
            if self.first_audio_s is None:
                self.first_audio_s = now
                self.first_audio_pts_ms = end_ms - frame_ms
            if speech_onset_ms is not None and self.first_speech_pts_ms is None:
                self.first_speech_pts_ms = end_ms - frame_ms + speech_onset_ms
            self.released_pos = max(self.released_pos, text_pos)
            self.released_pauses = max(self.released_pauses, pauses)

    def fill_released(self, end_ms: int, underrun_start: bool) -> None:
        """An underrun fill (silence) frame went out while this turn played."""
        self.silence_frames += 1
        self.underruns += underrun_start
        self.last_pts_end_ms = end_ms

    # ------------------------------------------------------------------ reading

    @property
    def ttfa_ms(self) -> float | None:
        """figures.ttfa_ms of this turn."""
        return figures.ttfa_ms(self.trigger_s, self.first_audio_s)

    @property
    def ttfs_ms(self) -> float | None:
        """figures.ttfs_ms of this turn (time to first speech)."""
        return figures.ttfs_ms(self.ttfa_ms, self.first_audio_pts_ms, self.first_speech_pts_ms)

    def spans_for(self, segment: Segment) -> list[Span]:
        """The turn's spans inside `segment`, relative to the segment's text (an SSML segment carries its own)."""
        if self.ssml is not None:
            return list(segment.spans) if isinstance(segment, SsmlSegment) else []
        return [
            Span(s.start - segment.start, s.end - segment.start, s.kind)
            for s in self.spans
            if s.start >= segment.start and s.end <= segment.end
        ]

    def due_marks(self, upto_pos: int | None) -> list[str]:
        """Names of marks at or before `upto_pos` and the breaks released (None = every mark), removed from the
        pending list."""
        if upto_pos is None:
            due, self.marks = self.marks, []
        else:
            reached = [m[0] <= upto_pos and m[2] <= self.released_pauses for m in self.marks]
            due = [m for m, r in zip(self.marks, reached) if r]
            self.marks = [m for m, r in zip(self.marks, reached) if not r]
        return [m[1] for m in due]

    def queued_chars(self) -> int:
        """Characters waiting to be spoken: text not yet cut into a segment, and segments not yet synthesized."""
        pending = self.ssml.pending_text if self.ssml is not None else self.segmenter.pending_text
        waiting = len(pending) if self.state is TurnState.OPEN else 0
        return waiting + sum(len(s.text) for s in list(self.segments._queue) if isinstance(s, Segment))  # noqa: SLF001


class Turns:
    """The call's turns not yet ended, in order, and the queue that hands them to the producer."""

    def __init__(self, new_segmenter: Callable[[], Segmenter], clock: Callable[[], float]):
        self.live: list[Turn] = []
        self.to_produce: asyncio.Queue[Turn | None] = asyncio.Queue()
        self._new_segmenter = new_segmenter
        self._clock = clock
        self._counter = 0

    def find(self, turn_id: str) -> Turn | None:
        return next((t for t in self.live if t.turn_id == turn_id), None)

    def open_turn(self) -> Turn | None:
        """The newest turn still taking text."""
        return next((t for t in reversed(self.live) if t.state is TurnState.OPEN), None)

    def new(self, turn_id: str) -> Turn:
        """Open a turn (completing the open one: turns play in order) and hand it to the producer."""
        self.complete_all()
        self._counter += 1
        turn = Turn(turn_id=turn_id or f"t{self._counter}", segmenter=self._new_segmenter())
        self.live.append(turn)
        self.to_produce.put_nowait(turn)
        return turn

    def complete_all(self) -> None:
        now = self._clock()
        for t in self.live:
            t.complete(now)

    def end_input(self) -> None:
        """No more turns: complete every one, and tell the producer after them."""
        self.complete_all()
        self.to_produce.put_nowait(None)

    def forget(self, turn: Turn) -> None:
        if turn in self.live:
            self.live.remove(turn)

    def any_active(self, besides: Turn | None = None) -> bool:
        return any(t.active and t is not besides for t in self.live)

    def queued_chars(self) -> int:
        return sum(t.queued_chars() for t in self.live)
