"""One turn of a call and its state machine: text, segments, marks, engine requests, and what of it was released."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field
from typing import Callable

from models.frontend.normalize import Span
from models.frontend.segmenter import Segment, Segmenter
from service import figures


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
    segments: asyncio.Queue = field(default_factory=asyncio.Queue)  # Segment, then None when complete or ended
    marks: list[tuple[int, str]] = field(default_factory=list)  # (text position, name), in order received
    streams: set = field(default_factory=set)  # engine OutputStreams in flight
    trigger_s: float | None = None  # when the first segment became synthesizable
    first_audio_s: float | None = None  # release of the first non-silence frame
    released_pos: int = 0  # turn text chars whose audio has been released
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

    def add_segments(self, segments: list[Segment], now: float) -> None:
        """Queue segments for synthesis; the first one starts the TTFA clock."""
        for seg in segments:
            if self.trigger_s is None:
                self.trigger_s = now
            self.segments.put_nowait(seg)

    def append(self, delta: str, spans: list[Span], now: float) -> None:
        """Add text (spans already turn-absolute); the segments it completes are queued."""
        self.text += delta
        self.spans.extend(spans)
        self.add_segments(self.segmenter.push(delta, [(s.start, s.end) for s in spans]), now)

    def poll_idle(self, now: float) -> None:
        """Cut the text that waited longer than the idle flush time (OPEN turns only)."""
        if self.state is TurnState.OPEN:
            self.add_segments(self.segmenter.poll_idle(now), now)

    def complete(self, now: float) -> None:
        """No more text: cut the rest; the producer sees the end (None) after these segments. No-op unless OPEN."""
        if self.state is not TurnState.OPEN:
            return
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

    def frame_released(self, end_ms: int, text_pos: int, speech: bool, now: float, fade_out: bool = False) -> None:
        """A queued frame went to the gateway, ending at media time `end_ms`."""
        self.pending_frames -= 1
        self.last_pts_end_ms = end_ms
        if speech:
            self.audio_frames += 1
            if fade_out:
                return
            if self.first_audio_s is None:
                self.first_audio_s = now
            self.released_pos = max(self.released_pos, text_pos)

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

    def spans_for(self, segment: Segment) -> list[Span]:
        """The turn's spans inside `segment`, relative to the segment's text."""
        return [
            Span(s.start - segment.start, s.end - segment.start, s.kind)
            for s in self.spans
            if s.start >= segment.start and s.end <= segment.end
        ]

    def due_marks(self, upto_pos: int | None) -> list[str]:
        """Names of marks at or before `upto_pos` (None = every mark), removed from the pending list."""
        if upto_pos is None:
            due, self.marks = self.marks, []
        else:
            due = [m for m in self.marks if m[0] <= upto_pos]
            self.marks = [m for m in self.marks if m[0] > upto_pos]
        return [name for _, name in due]

    def queued_chars(self) -> int:
        """Characters waiting to be spoken: text not yet cut into a segment, and segments not yet synthesized."""
        waiting = len(self.segmenter.pending_text) if self.state is TurnState.OPEN else 0
        return waiting + sum(len(s.text) for s in list(self.segments._queue) if s is not None)  # noqa: SLF001


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
