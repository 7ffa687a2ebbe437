"""Segments ahead: a turn's next segment through the frontend and into the engine while the current one plays."""

from __future__ import annotations

import asyncio
import collections

from models.frontend.segmenter import Segment
from service.call.synthesis import Prepared, Synthesis
from service.call.turn import Turn
from service.ssml import Pause, SsmlError

#: Segments submitted beyond the one playing. One is enough for a seamless boundary (the engine decodes it on the
#: call's playback clock, within its lead window) and bounds what a barge-in throws away to one segment.
SEGMENTS_AHEAD = 1


class SegmentsAhead:
    """The turn's queue of segments (and SSML items) as the producer reads it, with the next segment prepared early.

    `next_item` hands out the turn's items in order; `look_ahead(follows)` starts preparing (frontend + engine
    submit, Synthesis.prepare) the next segment already queued, as following the engine request `follows`, with the
    SSML breaks between them as its gap; `prepared(seg, follows)` returns a segment's preparation, early or now.
    Items are taken from the turn's queue only up to that next segment, so a refusal of the turn's SSML
    (Turn.reject, which empties the queue) drops everything after it.
    """

    def __init__(self, turn: Turn, synthesis: Synthesis) -> None:
        self.turn = turn
        self.synthesis = synthesis
        self._items: collections.deque = collections.deque()  # taken from turn.segments, not handed out yet
        self._tasks: dict[int, asyncio.Task] = {}  # id(segment) → its preparation

    async def next_item(self) -> object:
        """The turn's next Segment, Pause, SsmlWarning or SsmlError, or None when the turn has no more."""
        if self.turn.ssml_error is not None:  # refused: only the error itself is still to be read
            self._drop_ahead()
        if self._items:
            return self._items.popleft()
        return await self.turn.segments.get()

    def look_ahead(self, follows: str) -> None:
        """Start preparing the next queued segment, if any and none is being prepared (never blocks)."""
        if len(self._tasks) >= SEGMENTS_AHEAD or not self.turn.active or self.turn.ssml_error is not None:
            return
        gap_ms = 0.0
        for item in self._items:  # a segment taken earlier and not prepared yet (the one before it had nothing to say)
            if isinstance(item, Segment):
                self._start(item, follows, gap_ms)
                return
            gap_ms += item.ms if isinstance(item, Pause) else 0.0
        while not self.turn.segments.empty():
            item = self.turn.segments.get_nowait()
            self._items.append(item)
            if item is None or isinstance(item, SsmlError):
                return
            if isinstance(item, Segment):
                self._start(item, follows, gap_ms)
                return
            gap_ms += item.ms if isinstance(item, Pause) else 0.0

    def _start(self, seg: Segment, follows: str, gap_ms: float) -> None:
        self._tasks[id(seg)] = asyncio.get_running_loop().create_task(
            self.synthesis.prepare(self.turn, seg, follows, gap_ms), name=f"segment-ahead-{self.turn.turn_id}")

    async def prepared(self, seg: Segment, follows: str) -> Prepared | None:
        """The segment's preparation: the one started ahead, or one made now (following `follows`)."""
        task = self._tasks.pop(id(seg), None)
        if task is None:
            return await self.synthesis.prepare(self.turn, seg, follows)
        return await task

    def _drop_ahead(self) -> None:
        """Cancel every preparation started ahead and forget the segments taken early (errors stay)."""
        for task in self._tasks.values():
            task.cancel()
            task.add_done_callback(self._close_result)
        self._tasks.clear()
        self._items = collections.deque(i for i in self._items if isinstance(i, SsmlError) or i is None)

    def _close_result(self, task: asyncio.Task) -> None:
        if task.cancelled() or task.exception() is not None:
            return
        result = task.result()
        if result is not None:
            result.close(self.turn)

    def close(self) -> None:
        """The turn's production ended: nothing prepared ahead may go on (its engine requests are cancelled)."""
        self._drop_ahead()
        self._items.clear()
