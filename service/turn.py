"""One turn of a call: its text, segments, marks, and what of it has been released to the gateway."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

from models.frontend.normalize import Span
from models.frontend.segmenter import Segment, Segmenter


class TurnState(str, enum.Enum):
    """Life of a turn."""

    OPEN = "open"  # text may still arrive
    COMPLETE = "complete"  # text complete (flush, new turn, end); audio still coming or playing
    DONE = "done"  # every frame released, turn_done sent
    CLEARED = "cleared"  # barge-in
    FAILED = "failed"  # an in-band error ended it


@dataclass(eq=False)
class OutFrame:
    """One frame queued for release; `text_pos` = turn text characters covered once it has played."""

    payload: bytes
    turn: "Turn"
    text_pos: int
    silence: bool = False  # pre-roll
    last: bool = False  # last frame of the turn's audio: its release sends turn_done
    fade_out: bool = False  # the faded frame that ends a cleared turn: its release sends cleared


@dataclass(eq=False)
class Turn:
    """Mutable state of one turn; owned by the call's event loop."""

    turn_id: str
    segmenter: Segmenter
    text: str = ""
    spans: list[Span] = field(default_factory=list)  # turn-absolute offsets
    state: TurnState = TurnState.OPEN
    segments: asyncio.Queue = field(default_factory=asyncio.Queue)  # Segment, then None when complete
    marks: list[tuple[int, str]] = field(default_factory=list)  # (text position, name), in order received
    streams: set = field(default_factory=set)  # engine OutputStreams in flight
    trigger_s: float | None = None  # when the first segment became synthesizable
    first_audio_s: float | None = None  # release of the first non-silence frame
    released_pos: int = 0  # turn text chars whose audio has been released
    audio_frames: int = 0  # non-silence frames released
    silence_frames: int = 0  # underrun fill frames released while this turn played
    underruns: int = 0
    chunks: int = 0
    late_chunks: int = 0
    last_pts_end_ms: int = 0  # end of the last frame released for this turn
    produced_all: bool = False  # the producer pushed every frame (the last one is flagged)
    pending_frames: int = 0  # frames pushed to the pacer and not yet released or dropped
    cleared_reply_pending: bool = False  # cleared waits for the release of the fade-out frame
    dropped_frames: int = 0

    @property
    def active(self) -> bool:
        """Still producing or playing (not done, cleared or failed)."""
        return self.state in (TurnState.OPEN, TurnState.COMPLETE)

    def append(self, delta: str, spans: list[Span]) -> list[Segment]:
        """Add text (spans already turn-absolute); returns segments the segmenter completed."""
        self.text += delta
        self.spans.extend(spans)
        return self.segmenter.push(delta, [(s.start, s.end) for s in spans])

    def spans_for(self, segment: Segment) -> list[Span]:
        """The turn's spans inside `segment`, relative to the segment's text."""
        return [
            Span(s.start - segment.start, s.end - segment.start, s.kind)
            for s in self.spans
            if s.start >= segment.start and s.end <= segment.end
        ]

    def complete(self) -> list[Segment]:
        """No more text: cut the rest; the producer sees the end after these segments."""
        if self.state is not TurnState.OPEN:
            return []
        segments = self.segmenter.flush()
        self.state = TurnState.COMPLETE
        return segments

    def due_marks(self, upto_pos: int | None) -> list[str]:
        """Names of marks at or before `upto_pos` (None = every mark), removed from the pending list."""
        if upto_pos is None:
            due, self.marks = self.marks, []
        else:
            due = [m for m in self.marks if m[0] <= upto_pos]
            self.marks = [m for m in self.marks if m[0] > upto_pos]
        return [name for _, name in due]
