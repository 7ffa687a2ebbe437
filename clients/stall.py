"""When a REALTIME Converse stream counts as lost although its connection is still open: a server that froze (a
stopped process, a lost node, a partition) sends nothing and closes nothing, so only missing frames tell.

With REALTIME pacing a server sends one frame every frame_ms from a turn's first frame until its last (flagged
silence on underrun, and while an open turn waits for more text), so inside a turn a short silence on the wire
means the server is gone. Before a turn's first frame (time to first audio) and between turns a healthy server
legitimately sends nothing; there only a much longer bound applies. Times are seconds on one clock, given by the
caller (so the rule is tested on virtual time)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class FrameWatch:
    """Follows one stream's turns (waiting for their first frame, or playing) and says until when the next server
    message must arrive. `frame_timeout_s`: bound while a turn plays; `first_frame_timeout_s`: bound while a turn
    whose text the server has waits for its first frame. None turns a bound off."""

    frame_timeout_s: float | None
    first_frame_timeout_s: float | None
    waiting: set[str] = field(default_factory=set)  # text sent on this stream, no frame of the turn yet
    playing: set[str] = field(default_factory=set)  # a frame of the turn arrived, its end not yet
    activity_s: float = 0.0  # the last server message, or the last text sent (the server has work from then)

    def reset(self, now_s: float) -> None:
        """A new stream: nothing is owed yet."""
        self.waiting.clear()
        self.playing.clear()
        self.activity_s = now_s

    def text_sent(self, turn_id: str, now_s: float) -> None:
        """Text of the turn was written to the stream: its audio is owed."""
        if turn_id not in self.playing:
            self.waiting.add(turn_id)
        self.activity_s = max(self.activity_s, now_s)

    def message(self, now_s: float) -> None:
        """Any server message arrived."""
        self.activity_s = max(self.activity_s, now_s)

    def frame(self, turn_id: str, now_s: float) -> None:
        """An audio frame arrived (silence included); "" is fill between turns, owned by no turn."""
        self.message(now_s)
        if turn_id and turn_id in self.waiting:
            self.waiting.discard(turn_id)
            self.playing.add(turn_id)

    def turn_ended(self, turn_id: str) -> None:
        """turn_done, cleared or a turn-ending error: its frames stop legitimately."""
        self.waiting.discard(turn_id)
        self.playing.discard(turn_id)

    def clear_sent(self, turn_id: str) -> None:
        """A clear stops the frames of its turns (empty: every turn) before its answer comes."""
        if turn_id:
            self.turn_ended(turn_id)
        else:
            self.waiting.clear()
            self.playing.clear()

    def bound_s(self) -> float | None:
        """The bound in force now: the frame bound while a turn plays, else the first-frame bound while a turn
        waits for its first frame, else None (nothing is owed)."""
        if self.playing:
            return self.frame_timeout_s
        if self.waiting:
            return self.first_frame_timeout_s
        return None

    def deadline_s(self, reading_since_s: float) -> float | None:
        """When the stream counts as lost if no message arrives first; None: never. `reading_since_s`: when the
        application started waiting for this message (time it spent away from the stream is not the server's)."""
        bound = self.bound_s()
        if bound is None:
            return None
        return max(self.activity_s, reading_since_s) + bound

    def lost(self, now_s: float, reading_since_s: float) -> bool:
        deadline = self.deadline_s(reading_since_s)
        return deadline is not None and now_s >= deadline


def skipped_slots_ms(last_frame_s: float | None, now_s: float, frame_ms: int) -> int:
    """Media time the caller already went without frames when a break is seen at `now_s` (the last frame arrived at
    `last_frame_s`; the next was due one frame later): whole frame slots, none when within half a frame of the
    due time. The caller's media clock jumps by this much (no burst of fill frames to catch up)."""
    if last_frame_s is None:
        return 0
    frame_s = frame_ms / 1000.0
    late_s = now_s - (last_frame_s + frame_s)
    if late_s <= frame_s / 2.0 + 1e-6:  # clock readings tolerate float rounding of a microsecond
        return 0
    return math.ceil(late_s / frame_s - 1e-6) * frame_ms
