"""Text within the limits a server announced on its stream (SessionStarted.limits): pieces no longer than one
delta may be, and an upper bound on the text the server holds waiting to be spoken, so that what the client
sends (a failover's resent turns included) is never refused for buffer space."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# A piece preferably ends just after one of these (the server cuts segments there anyway).
BREAK_AFTER = frozenset("。！？；，、.!?;,:： \n\t")


def delta_pieces(start: int, end: int, text: str, max_chars: int,
                 spans: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """Cut text[start:end] into consecutive (start, end) pieces of at most `max_chars` code points (0: one piece).
    A cut never falls inside a span (a TextSpan of the turn) unless that span alone is longer than a piece, and
    falls after punctuation or a space when one lies in the second half of the piece."""
    if max_chars <= 0 or end - start <= max_chars:
        return [(start, end)] if end > start else []
    pieces = []
    pos = start
    while end - pos > max_chars:
        limit = pos + max_chars
        cut = limit
        for a, b in spans:  # pull the cut back before a span it would split
            if a < cut < b and a > pos:
                cut = a
        if cut == limit:
            for i in range(limit, pos + max_chars // 2, -1):
                if text[i - 1] in BREAK_AFTER:
                    cut = i
                    break
        pieces.append((pos, cut))
        pos = cut
    pieces.append((pos, end))
    return pieces


@dataclass
class TextBudget:
    """An upper bound on the server's buffered text on one stream: the code points written for each turn, less
    those known to have left the server's queue (text up to the last timed word of the turn: the server times a
    word once its segment was synthesized; all of a turn once it ended). The server counts text it holds unsegmented
    or in segments not yet synthesized, so its count never exceeds this one. `max_chars` 0: no limit announced."""

    max_chars: int = 0
    sent: dict[str, int] = field(default_factory=dict)  # turn id → code points written on this stream
    drained: dict[str, int] = field(default_factory=dict)  # turn id → code points known out of the queue

    def reset(self, max_chars: int) -> None:
        """A new stream (its own limit): nothing written yet."""
        self.max_chars = max_chars
        self.sent.clear()
        self.drained.clear()

    @property
    def queued(self) -> int:
        return sum(n - self.drained.get(t, 0) for t, n in self.sent.items())

    def fits(self, chars: int, waiting: int = 0) -> bool:
        """True when `chars` more code points (after `waiting` not yet written) stay within the server's limit."""
        return self.max_chars <= 0 or self.queued + waiting + chars <= self.max_chars

    def written(self, turn_id: str, chars: int) -> None:
        self.sent[turn_id] = self.sent.get(turn_id, 0) + chars

    def timed(self, turn_id: str, end_char: int) -> bool:
        """A word of the turn ending at `end_char` (offset in this stream's text of the turn) was timed: the text
        before it left the queue. True when the bound went down."""
        if turn_id not in self.sent:
            return False
        was = self.drained.get(turn_id, 0)
        now = min(max(was, end_char), self.sent[turn_id])
        self.drained[turn_id] = now
        return now > was

    def turn_ended(self, turn_id: str) -> bool:
        """The turn is done, cleared or failed: none of its text waits any more. True when the bound went down."""
        had = self.sent.pop(turn_id, 0) - self.drained.pop(turn_id, 0)
        return had > 0
