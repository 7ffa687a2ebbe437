"""A Converse server in the event loop, for long calls in virtual time: it keeps the session limit and the idle timeout
as the real one does, plays flushed turns in order at real pace, answers Clear, and records which stream spoke what."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import grpc

from clients.conversation import (
    Audio,
    Cleared,
    ConversationClosed,
    Started,
    TurnDone,
    VoiceInfo,
    VoxpoolError,
)
from protos.voxpool.v1 import tts_pb2 as pb

FRAME_MS = 100
TTFA_S = 0.2  # from flush to the first frame of a turn that is not queued behind another
MS_PER_CHAR = 250  # audio per character of text


@dataclass
class _FakeTurn:
    turn_id: str
    text: str = ""
    flushed: bool = False
    cleared: bool = False
    frames_sent: int = 0

    @property
    def frames(self) -> int:
        return len(self.text) * MS_PER_CHAR // FRAME_MS


@dataclass
class Record:
    """What happened on the fake server, for the test's assertions."""

    streams: list["FakeStream"] = field(default_factory=list)
    cut_by_limit: list[str] = field(default_factory=list)  # sessions that hit max_session_s (DEADLINE_EXCEEDED)
    ended_idle: list[str] = field(default_factory=list)  # sessions closed by the idle timeout
    keepalives: int = 0


class FakeStream:
    """One Converse stream (the Conversation interface the client library gives)."""

    def __init__(self, server: "FakeServer", n: int):
        loop = asyncio.get_running_loop()
        self.server = server
        self.loop = loop
        self.session_id = f"s{n}"
        limits = pb.Limits(max_session_s=server.limit_s, idle_timeout_ms=server.idle_timeout_ms,
                           max_control_per_s=50.0, max_delta_chars=2000)
        raw = pb.SessionStarted(session_id=self.session_id, limits=limits)
        self.started = Started(self.session_id, "fake", "L16", 8000, FRAME_MS, 1600, "REALTIME", 60, "fake",
                               VoiceInfo("fake", "cmn", 8000, "", "", True), raw)
        self.opened_s = loop.time()
        self.last_event_s = self.opened_s
        self.turns: dict[str, _FakeTurn] = {}
        self.order: list[str] = []  # turn ids in the order their text arrived
        self.queue: asyncio.Queue = asyncio.Queue()
        self.out: asyncio.Queue = asyncio.Queue()
        self.ended = False
        self.closed = False
        self.seq = 0
        self.pts_ms = 0
        self.playing: _FakeTurn | None = None
        self.tasks = [asyncio.create_task(self._play()), asyncio.create_task(self._watch())]

    # ---------------------------------------------------------------- client → server

    def _event(self) -> None:
        if self.closed or self.ended:
            raise ConversationClosed("the conversation is closed")
        self.last_event_s = self.loop.time()

    async def send_text(self, delta: str, turn_id: str = "", **_kw) -> float:
        self._event()
        turn = self.turns.get(turn_id)
        if turn is None:
            for prev in self.turns.values():  # a new turn completes the open one
                if not prev.flushed and not prev.cleared:
                    prev.flushed = True
                    self.queue.put_nowait(prev)
            turn = self.turns[turn_id] = _FakeTurn(turn_id)
            self.order.append(turn_id)
            self.server.spoken_on.setdefault(turn_id, []).append(self.session_id)
        turn.text += delta
        return self.loop.time()

    async def flush(self, turn_id: str = "") -> float:
        self._event()
        turn = self.turns.get(turn_id)
        if turn is not None and not turn.flushed and not turn.cleared:
            turn.flushed = True
            self.queue.put_nowait(turn)
        return self.loop.time()

    async def mark(self, name: str, turn_id: str = "") -> float:
        self._event()
        return self.loop.time()

    async def clear(self, turn_id: str = "") -> float:
        self._event()
        targets = [self.turns[turn_id]] if turn_id in self.turns else list(self.turns.values()) if not turn_id else []
        for turn in targets:
            if turn.cleared or (turn.flushed and turn.frames_sent >= turn.frames and turn is not self.playing):
                continue
            turn.cleared = True
            self.out.put_nowait(Cleared(turn.turn_id, self.pts_ms, "", "", 0))
        return self.loop.time()

    async def keepalive(self) -> float:
        self._event()
        self.server.record.keepalives += 1
        return self.loop.time()

    async def end(self) -> float:
        self._event()
        self.ended = True
        for turn in self.turns.values():
            if not turn.flushed and not turn.cleared:
                turn.flushed = True
                self.queue.put_nowait(turn)
        self.queue.put_nowait(None)
        return self.loop.time()

    def cancel(self) -> None:
        self._close(VoxpoolError(grpc.StatusCode.CANCELLED, "cancelled"))

    # ---------------------------------------------------------------- server → client

    def __aiter__(self) -> "FakeStream":
        return self

    async def __anext__(self):
        ev = await self.out.get()
        if ev is None:
            raise StopAsyncIteration
        if isinstance(ev, VoxpoolError):
            raise ev
        return ev

    def _close(self, how: VoxpoolError | None) -> None:
        if self.closed:
            return
        self.closed = True
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self.out.put_nowait(how)

    async def _play(self) -> None:
        while True:
            turn = await self.queue.get()
            if turn is None:  # end: every turn before it has played
                await asyncio.sleep(self.server.close_delay_s)
                self._close(None)
                return
            if turn.cleared:
                continue
            self.playing = turn
            await asyncio.sleep(TTFA_S)
            while turn.frames_sent < turn.frames and not turn.cleared:
                self.out.put_nowait(Audio(b"\0" * 1600, self.seq, self.pts_ms, FRAME_MS, turn.turn_id, False))
                self.seq += 1
                self.pts_ms += FRAME_MS
                turn.frames_sent += 1
                await asyncio.sleep(FRAME_MS / 1000.0)
            self.playing = None
            if not turn.cleared:
                self.out.put_nowait(TurnDone(turn.turn_id, int(TTFA_S * 1000), turn.frames * FRAME_MS, 0, 0, 1))
            self.last_event_s = self.loop.time()  # the idle timeout counts from the end of playback

    async def _watch(self) -> None:
        """The session limit (DEADLINE_EXCEEDED, mid-turn if need be) and the idle timeout (OK) of the server."""
        idle_s = self.server.idle_timeout_ms / 1000.0
        while True:
            await asyncio.sleep(0.5)
            now = self.loop.time()
            if now - self.opened_s >= self.server.limit_s:
                self.server.record.cut_by_limit.append(self.session_id)
                self._close(VoxpoolError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                         f"call exceeded the maximum session length of {self.server.limit_s} s"))
                return
            quiet = self.playing is None and self.queue.empty()
            if idle_s and quiet and not self.ended and now - self.last_event_s >= idle_s:
                self.server.record.ended_idle.append(self.session_id)
                self._close(None)
                return


class FakeServer:
    """Stands in for VoxpoolClient: `converse(config=...)` opens a FakeStream."""

    def __init__(self, limit_s: int, idle_timeout_ms: int = 30_000, close_delay_s: float = 0.0):
        self.limit_s = limit_s
        self.idle_timeout_ms = idle_timeout_ms
        self.close_delay_s = close_delay_s  # after `end`, the last turn played: the server's teardown + a round trip
        self.record = Record()
        self.spoken_on: dict[str, list[str]] = {}  # turn id → the sessions that received its text

    async def converse(self, config: pb.SessionConfig | None = None, **_kw) -> FakeStream:
        await asyncio.sleep(0.05)  # the open's round trip
        stream = FakeStream(self, len(self.record.streams) + 1)
        self.record.streams.append(stream)
        return stream
