"""A call longer than the server's session limit (Limits.max_session_s): the call moves to a fresh Converse stream,
opened ahead and kept alive, at a turn boundary, so no turn is split, lost or repeated and the caller hears no gap."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from clients.conversation import (
    Audio,
    Cleared,
    ConversationClosed,
    Event,
    Started,
    TurnDone,
    TurnError,
    VoxpoolError,
    Words,
)
from clients.failover import TURN_ENDING_ERRORS
from protos.voxpool.v1 import tts_pb2 as pb

log = logging.getLogger(__name__)

# In-band errors after which the server holds no such turn (the others leave the turn going).
GONE_TURN_ERRORS = TURN_ENDING_ERRORS | {"UNKNOWN_TURN"}
REOPEN_PAUSE_S = 5.0  # a failed open of the next stream is tried again after this (or a quarter of the margin)


def move_margin_s(limit_s: float) -> float:
    """How long before the session limit the next stream is opened: a quarter of the limit, from 5 s to 120 s.
    The call moves at the first turn boundary after that; a new turn moves it anyway in the last half of the
    margin, so a turn queued behind a long one still starts on the next stream before the limit."""
    return min(120.0, max(5.0, limit_s / 4.0))


@dataclass(frozen=True, slots=True)
class StreamMoved:
    """Client-side record (never sent by a server): the call goes on on a fresh stream, delivered after the last
    event of every turn of the previous one. The new stream's `seq` and `pts_ms` start again; turn ids go on."""

    from_session_id: str
    to_session_id: str
    started: Started
    received_s: float = 0.0


@dataclass(eq=False)
class _Leg:
    """One stream of the call and the turns it carries."""

    conv: Any  # a Conversation (or FailoverConversation)
    opened_s: float  # loop time when `started` arrived
    live: set[str] = field(default_factory=set)  # turns sent here that have not ended (as delivered)
    open_turns: set[str] = field(default_factory=set)  # turns sent here and not flushed
    implicit_live: bool = False  # text with an empty turn id (a server-named turn) has not ended yet
    events: deque = field(default_factory=deque)  # read, not yet delivered (a VoxpoolError ends them)
    reader: asyncio.Task | None = None
    closed: bool = False  # the stream ended (its reader is done)
    ending: bool = False  # `end` was sent

    @property
    def started(self) -> Started:
        return self.conv.started

    @property
    def busy(self) -> bool:
        return bool(self.live) or self.implicit_live


class RollingConversation:
    """The Conversation interface (send_text, flush, mark, clear, keepalive, end, cancel, async iteration) over a
    chain of Converse streams. Before the session limit published in `started` the next stream is opened (any
    ready server) and kept alive with keepalives; the call moves to it when no turn is playing, or, when turns
    follow each other without a pause, with the next new turn near the limit (that turn's events then wait until
    the previous stream's turns end). A `StreamMoved` record marks each move. A limit of 0 means no moves.

    Turns keep their stream: text, flush, marks and a clear for a turn go where the turn is; `clear("")` reaches
    every stream that still plays a turn. Moves need explicit turn ids for a turn queued behind another; calls
    with server-named turns move only between turns.
    """

    def __init__(self, client: Any, config: pb.SessionConfig, conv: Any, *, margin_s: float | None = None):
        self._client = client
        self._config = config
        self._loop = asyncio.get_running_loop()
        self._margin_s = margin_s
        self._legs: list[_Leg] = []  # delivery order: streams still finishing turns, then the current one
        self._retiring: list[_Leg] = []  # moved-from streams told to end, all delivered: only their close is left
        self._next: _Leg | None = None
        self._turn_leg: dict[str, _Leg] = {}
        # turns of a stream waiting behind a moved-from one that a Clear was sent for: their audio read ahead (not
        # delivered yet, so never heard) is dropped
        self._clearing: set[str] = set()
        self._wake = asyncio.Event()
        self._replan = asyncio.Event()  # the stream opened ahead was used or dropped: the planner starts over
        self._background: set[asyncio.Task] = set()
        self._ended = False
        self._finished = False
        self._must_move = False  # the config changed: the next new turn starts on a stream with the new one
        self.moves = 0
        self._start_leg(_Leg(conv, self._loop.time()))
        self._planner = asyncio.create_task(self._plan(), name="voxpool-rollover")

    @classmethod
    async def open(cls, client: Any, config: pb.SessionConfig, *, margin_s: float | None = None
                   ) -> "RollingConversation":
        """Open the first stream (`client.converse(config=...)`) and plan its moves."""
        return cls(client, config, await client.converse(config=config), margin_s=margin_s)

    @property
    def started(self) -> Started:
        """The current stream's `started` (its limits, session id)."""
        return self._current.started

    @property
    def _current(self) -> _Leg:
        return self._legs[-1]

    def _limit_s(self, leg: _Leg) -> float:
        return float(leg.started.raw.limits.max_session_s)

    def _margin(self, limit_s: float) -> float:
        return self._margin_s if self._margin_s is not None else move_margin_s(limit_s)

    # ------------------------------------------------------------------ sending

    def _check_open(self) -> None:
        if self._ended or self._finished:
            raise ConversationClosed("the conversation is closed (end() was sent or the stream finished)")

    async def send_text(self, delta: str, turn_id: str = "", spans: Sequence[tuple[int, int, str]] | None = None,
                        *, options: pb.TurnOptions | None = None) -> float:
        self._check_open()
        leg = self._turn_leg.get(turn_id) if turn_id else None
        if leg is None:
            if turn_id:
                await self._move_for_new_turn()
            leg = self._current
            if turn_id:
                self._turn_leg[turn_id] = leg
                leg.live.add(turn_id)
                leg.open_turns.add(turn_id)
            else:
                leg.implicit_live = True
        kw: dict[str, Any] = {}
        if spans:
            kw["spans"] = spans
        if options is not None:
            kw["options"] = options
        return await leg.conv.send_text(delta, turn_id, **kw)

    async def flush(self, turn_id: str = "") -> float:
        self._check_open()
        leg = self._turn_leg.get(turn_id, self._current)
        leg.open_turns.discard(turn_id)
        return await leg.conv.flush(turn_id)

    async def mark(self, name: str, turn_id: str = "") -> float:
        self._check_open()
        return await self._turn_leg.get(turn_id, self._current).conv.mark(name, turn_id)

    async def clear(self, turn_id: str = "") -> float:
        """Barge-in: a turn's stream, or (empty id) every stream still playing a turn, gets the Clear."""
        self._check_open()
        if turn_id:
            if self._turn_leg.get(turn_id, self._legs[0]) is not self._legs[0]:
                self._clearing.add(turn_id)
            return await self._turn_leg.get(turn_id, self._current).conv.clear(turn_id)
        targets = [leg for leg in self._legs if leg.busy and not leg.ending] or [self._current]
        sent_s = 0.0
        for leg in targets:
            if leg is not self._legs[0]:
                self._clearing.update(leg.live)
            sent_s = await leg.conv.clear("")
        return sent_s

    async def keepalive(self) -> float:
        """The caller is still there: resets the current stream's idle timeout (the next one keeps itself)."""
        self._check_open()
        return await self._current.conv.keepalive()

    async def reconfigure(self, config: pb.SessionConfig) -> None:
        """Another session config (a voice change) from the next turn on: a stream with it is opened now, and the call
        moves to it between turns, as before the session limit (the turn playing keeps its voice)."""
        self._check_open()
        self._config = config
        self._drop_next()
        conv = await self._client.converse(config=config)
        if self._ended or self._finished:
            conv.cancel()
            return
        self._drop_next()  # one opened by the planner meanwhile has the old config
        self._next = _Leg(conv, self._loop.time())
        self._must_move = True
        self._move_if_idle()

    async def end(self) -> float:
        """No more input: every stream finishes its turns, then the iteration ends."""
        self._check_open()
        self._ended = True
        self._planner.cancel()
        self._drop_next()
        sent_s = 0.0
        for leg in self._legs:
            if not leg.ending and not leg.closed:
                leg.ending = True
                sent_s = await leg.conv.end()
        return sent_s

    def cancel(self) -> None:
        """Abandon every stream now."""
        self._finished = True
        self._planner.cancel()
        self._drop_next()
        for leg in self._legs + self._retiring:
            leg.conv.cancel()
            if leg.reader is not None:
                leg.reader.cancel()
        for task in self._background:
            task.cancel()
        self._wake.set()

    # ------------------------------------------------------------------ reading

    async def next_event(self) -> Event | StreamMoved | None:
        """The next event in call order, or None once the last stream ended with OK; a VoxpoolError of any stream
        of the call is raised (and ends the call)."""
        while True:
            if self._finished:
                return None
            leg = self._legs[0]
            if leg.events:
                ev = leg.events.popleft()
                if isinstance(ev, VoxpoolError):
                    if leg is not self._current and not leg.busy:  # a moved-from stream with nothing left to play
                        log.debug("voxpool: a moved-from stream ended with %s", ev)
                        continue
                    self.cancel()
                    raise ev
                if isinstance(ev, (Audio, Words)) and ev.turn_id in self._clearing:
                    continue  # read ahead while it waited behind a moved-from stream, then cleared: never heard
                self._account(leg, ev)
                return ev
            if leg.closed or (leg.ending and not leg.busy and leg is not self._current):
                if len(self._legs) > 1:
                    # a moved-from stream whose turns were all delivered: the next stream's events need not wait
                    # for its close (a round trip, and the server's teardown of the call)
                    done = self._legs.pop(0)
                    if not done.closed:
                        self._retiring.append(done)
                    continue
                if self._next is not None and not self._ended:  # the current stream ended (idle): move on
                    self._switch()
                    continue
                self._finished = True
                self._planner.cancel()
                return None
            self._wake.clear()
            await self._wake.wait()

    def __aiter__(self) -> "RollingConversation":
        return self

    async def __anext__(self) -> Event | StreamMoved:
        ev = await self.next_event()
        if ev is None:
            raise StopAsyncIteration
        return ev

    def _account(self, leg: _Leg, ev: Any) -> None:
        """A delivered event that ends a turn frees its stream: the current one may move, an old one may end."""
        ended = isinstance(ev, (TurnDone, Cleared)) or (isinstance(ev, TurnError) and ev.code in GONE_TURN_ERRORS)
        if not ended:
            return
        self._clearing.discard(ev.turn_id)
        if ev.turn_id in leg.live:
            leg.live.discard(ev.turn_id)
            leg.open_turns.discard(ev.turn_id)
            if self._turn_leg.get(ev.turn_id) is leg:
                del self._turn_leg[ev.turn_id]
        elif ev.turn_id not in self._turn_leg:
            leg.implicit_live = False  # a server-named turn ended
        if leg is self._current:
            self._move_if_idle()
        else:
            self._retire_if_done(leg)

    async def _read(self, leg: _Leg) -> None:
        try:
            async for ev in leg.conv:
                leg.events.append(ev)
                self._wake.set()
        except VoxpoolError as err:
            leg.events.append(err)
        finally:
            leg.closed = True
            if leg in self._retiring:
                self._retiring.remove(leg)
            self._wake.set()

    # ------------------------------------------------------------------ moving

    def _start_leg(self, leg: _Leg) -> None:
        self._legs.append(leg)
        leg.reader = asyncio.create_task(self._read(leg), name="voxpool-rollover-reader")

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _drop_next(self) -> None:
        nxt, self._next = self._next, None
        self._replan.set()
        if nxt is not None:
            nxt.conv.cancel()

    async def _plan(self) -> None:
        """Open the next stream a margin before the current one's limit, keep it alive, move when idle."""
        while not self._ended and not self._finished:
            cur = self._current
            limit_s = self._limit_s(cur)
            if limit_s <= 0:
                return  # the server sets no limit: the call never has to move
            if self._next is None:
                open_at_s = cur.opened_s + limit_s - self._margin(limit_s)
                if self._loop.time() < open_at_s and await self._nap(open_at_s - self._loop.time()):
                    continue  # the streams changed: plan again
                if self._ended or self._finished:
                    return
                config = self._config
                try:
                    conv = await self._client.converse(config=config)
                except VoxpoolError as err:
                    log.warning("voxpool: the next stream did not open (%s); trying again", err)
                    await self._nap(min(REOPEN_PAUSE_S, self._margin(limit_s) / 4.0))
                    continue
                if self._ended or self._finished:
                    conv.cancel()
                    return
                if self._next is not None or config is not self._config:  # a reconfigure came first
                    conv.cancel()
                    continue
                self._next = _Leg(conv, self._loop.time())
                self._move_if_idle()
                continue
            idle_ms = self._next.started.raw.limits.idle_timeout_ms
            await self._nap(idle_ms / 3000.0 if idle_ms else self._margin(limit_s) / 4.0)
            nxt = self._next
            if nxt is None or not idle_ms:
                continue
            try:
                await nxt.conv.keepalive()
            except (VoxpoolError, ConversationClosed) as err:
                log.info("voxpool: the stream opened ahead was lost (%s); opening another", err)
                if self._next is nxt:
                    self._drop_next()

    async def _nap(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True when a move or a lost stream ahead ended the nap early, so the stream after
        the new current one is planned from its own start (a keepalive interval can be longer than the margin)."""
        self._replan.clear()
        if seconds <= 0:
            return False
        try:
            await asyncio.wait_for(self._replan.wait(), seconds)
        except asyncio.TimeoutError:
            return False
        return True

    def _move_if_idle(self) -> None:
        if self._next is not None and not self._ended and not self._current.busy:
            self._switch()

    async def _move_for_new_turn(self) -> None:
        """A new turn starts: move now if the next stream is ready and the current one plays nothing (or its
        limit is near); the old stream's unflushed turns are completed, as a newer turn completes them."""
        cur = self._current
        if self._next is None:
            return
        limit_s = self._limit_s(cur)
        force_at_s = cur.opened_s + limit_s - self._margin(limit_s) / 2.0
        if cur.busy and self._loop.time() < force_at_s and not self._must_move:
            return
        self._switch()
        for turn_id in sorted(cur.open_turns):
            cur.open_turns.discard(turn_id)
            try:
                await cur.conv.flush(turn_id)
            except (VoxpoolError, ConversationClosed) as err:
                log.info("voxpool: flush of turn %s before a move failed: %s", turn_id, err)

    def _switch(self) -> None:
        """The next stream becomes the current one; the old one ends once its turns have."""
        nxt, self._next = self._next, None
        assert nxt is not None
        self._must_move = False
        self._replan.set()
        old = self._current
        nxt.events.append(StreamMoved(old.started.session_id, nxt.started.session_id, nxt.started,
                                      time.perf_counter()))
        self._start_leg(nxt)
        self.moves += 1
        log.info("voxpool: call moved from stream %s to %s", old.started.session_id, nxt.started.session_id)
        self._retire_if_done(old)
        self._wake.set()

    def _retire_if_done(self, leg: _Leg) -> None:
        if leg is self._current or leg.busy or leg.ending or leg.closed:
            return
        leg.ending = True

        async def end() -> None:
            try:
                await leg.conv.end()
            except (VoxpoolError, ConversationClosed) as err:
                log.debug("voxpool: end of a moved-from stream: %s", err)
                leg.conv.cancel()

        self._spawn(end())
