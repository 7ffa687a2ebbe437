"""One reconnecting Converse call shared by the framework adapters: text in, typed events out, word timings; a call
longer than the server's session limit moves to a fresh stream between turns (clients/rollover.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Union

import grpc

from clients.client import (
    Audio,
    Cleared,
    ConversationClosed,
    Event,
    MarkReached,
    Started,
    TurnDone,
    TurnError,
    VoxpoolClient,
    VoxpoolError,
    Words,
)
from clients.failover import TURN_ENDING_ERRORS
from clients.heard import HeardTurn
from clients.rollover import RollingConversation, StreamMoved
from protos.voxpool.v1 import tts_pb2 as pb

log = logging.getLogger(__name__)

MARK_PREFIX = "vx-w"
# Marks spend the call's control budget (Limits.max_control_per_s; one over it is dropped with RATE_LIMITED), so word marks
# use at most this share of it and leave the rest to flush and clear.
MARK_BUDGET_SHARE = 0.5
# Characters after which a word mark is placed (a chunk of text between two marks is one timed "word").
BREAK_CHARS = frozenset(" \t\n,.;:!?，。；：！？、…—")


@dataclass(frozen=True, slots=True)
class TimedWord:
    """A piece of a turn's text and when its audio starts, in seconds from the turn's first audio frame."""

    text: str
    start_char: int
    end_char: int
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class TurnWords:
    """Words of a turn, in text order, ready for a framework (from WordTimestamps events, else from marks)."""

    turn_id: str
    words: tuple[TimedWord, ...]


@dataclass(frozen=True, slots=True)
class StreamBroken:
    """The Converse stream ended with an error; `turn_ids` were unfinished. The next send opens a new stream."""

    error: VoxpoolError
    turn_ids: tuple[str, ...]


SessionEvent = Union[Event, TurnWords, StreamBroken, StreamMoved]
Handler = Callable[[SessionEvent], Awaitable[None]]


@dataclass
class _Turn:
    """Per-turn bookkeeping for word timing."""

    heard: HeardTurn = field(default_factory=HeardTurn)  # the turn's text and its word pieces
    marks: dict[str, tuple[int, int]] = field(default_factory=dict)
    mark_start_char: int = 0
    origin_pts_ms: int | None = None   # pts of the turn's first audio frame
    chunk_start_pts_ms: int | None = None
    held_words: list = field(default_factory=list)  # proto word timings waiting for the first audio frame
    last_end_s: float = 0.0
    done: bool = False
    conv: object = None  # the stream (RollingConversation) the turn's text went to
    options: pb.TurnOptions | None = None  # sent with the turn's first delta
    flushed: bool = False  # the turn's text is complete


class _Bucket:
    """Token bucket for word marks (rate per second, burst = one second's worth)."""

    def __init__(self, rate_per_s: float):
        self.rate_per_s = max(rate_per_s, 0.0)
        self.tokens = self.rate_per_s
        self.last_s = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.rate_per_s, self.tokens + (now - self.last_s) * self.rate_per_s)
        self.last_s = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class VoxpoolSession:
    """A Converse stream opened on first use and reopened after it breaks (one per conversation).

    `handler` gets every server event (client records), `TurnWords` (word timings: the server's WordTimestamps
    when it sends them, else derived from marks placed at word breaks as text arrives), `StreamMoved` (the call
    went on on a fresh stream before the session limit; `move_margin_s`: how long before it the next stream is
    opened, None = clients.rollover.move_margin_s) and `StreamBroken`.
    """

    def __init__(self, client: VoxpoolClient, config: pb.SessionConfig, handler: Handler, *,
                 word_marks: bool = True, open_timeout_s: float = 10.0, move_margin_s: float | None = None):
        self.client = client
        self.config = pb.SessionConfig()
        self.config.CopyFrom(config)
        self.config.word_timestamps = True
        self.handler = handler
        self.word_marks = word_marks
        self.open_timeout_s = open_timeout_s
        self.move_margin_s = move_margin_s
        self.started: Started | None = None
        self._conv: RollingConversation | None = None
        self._reader: asyncio.Task | None = None
        self._turns: dict[str, _Turn] = {}
        self._server_words = False  # the server sends WordTimestamps: marks are not needed
        self._bucket: _Bucket | None = None
        self._lock = asyncio.Lock()
        self._resending: set[str] = set()  # turns the reader is sending again on a new stream (_resend_unanswered)
        self.streams_opened = 0  # calls opened (the first stream, and again after a break or an idle end)
        self.stream_moves = 0  # moves to a fresh stream before the session limit, over every call

    @property
    def is_open(self) -> bool:
        return self._conv is not None

    async def open(self) -> Started:
        """Open the stream if it is not open (raises VoxpoolError when the server cannot be reached)."""
        async with self._lock:
            if self._conv is not None and self.started is not None:
                return self.started
            conv = await asyncio.wait_for(
                RollingConversation.open(self.client, self.config, margin_s=self.move_margin_s), self.open_timeout_s)
            self._conv = conv
            self.started = conv.started
            self.streams_opened += 1
            limits = conv.started.raw.limits
            self._bucket = _Bucket(limits.max_control_per_s * MARK_BUDGET_SHARE) if limits.max_control_per_s else None
            self._reader = asyncio.create_task(self._read(conv), name="voxpool-session-reader")
            return conv.started

    async def send_text(self, turn_id: str, text: str, options: pb.TurnOptions | None = None) -> None:
        """Append text to a turn (opening the stream if needed); places a word mark at a word break. `options` (rate,
        volume, format: clients.client.turn_options) are sent with the delta that opens the turn, ignored after.

        A new turn's first text that meets a stream the server has just ended (its idle timeout, between two
        turns: the end crossed the text on the wire) reached no server, so it goes once more on a new stream."""
        if not text:
            return
        for attempt in range(2):
            await self.open()
            conv = self._live()
            turn = self._turns.get(turn_id)
            new = turn is None
            kw = {"options": options} if new and options is not None else {}
            try:
                await conv.send_text(text, turn_id, **kw)
            except Exception as exc:  # VoxpoolError, ConversationClosed: the stream ended under us
                await self._drop_stream(conv)
                if new and attempt == 0 and self._ended_under_us(exc):
                    log.info("voxpool stream ended as turn %s began (%s); sending it on a new stream", turn_id, exc)
                    continue
                raise self._as_error(exc) from exc
            break
        if new:
            if self._conv is not conv:  # the stream broke while the text was sent (the handler got StreamBroken)
                raise VoxpoolError(grpc.StatusCode.UNAVAILABLE,
                                   "voxpool stream closed while sending: the connection broke; send the turn again")
            turn = self._turns[turn_id] = _Turn(conv=conv, options=options)
        turn.heard.add_text(text)
        if self.word_marks and not self._server_words and text[-1] in BREAK_CHARS:
            await self._mark(turn_id, turn)

    @staticmethod
    def _ended_under_us(exc: Exception) -> bool:
        """A write failed because the stream had already finished: the stream reports it closed, or gRPC's core
        refused the write locally (INTERNAL, raised on the client for a stream that finished during the write)."""
        if isinstance(exc, ConversationClosed):
            return True
        return isinstance(exc, VoxpoolError) and exc.code == grpc.StatusCode.INTERNAL

    async def flush(self, turn_id: str) -> None:
        """The turn's text is complete (a final word mark covers its tail)."""
        if turn_id not in self._turns:
            return
        turn = self._turns[turn_id]
        turn.flushed = True
        if self._conv is None or turn_id in self._resending:  # its stream ended before the turn was answered: the
            return  # reader sends it again, and flushes it after its text
        if self.word_marks and not self._server_words:
            await self._mark(turn_id, turn, final=True)
        conv = self._live()
        try:
            await conv.flush(turn_id)
        except Exception as exc:  # VoxpoolError, ConversationClosed: the stream ended under us
            await self._drop_stream(conv)
            if not (self._ended_under_us(exc) and turn.conv is conv and turn.origin_pts_ms is None):
                raise self._as_error(exc) from exc
            # the server ended the stream (its idle timeout) before the turn was answered: its text reached nobody
            # who will speak it, so it goes again, whole, on a new stream, as the reader does for a quiet end
            log.info("voxpool stream ended as turn %s was flushed (%s); sending it on a new stream", turn_id, exc)
            await self._resend(turn_id, turn)

    async def clear(self, turn_id: str = "") -> None:
        """Barge-in: stop the turn (empty: every turn); the server answers Cleared with the text heard."""
        if self._conv is None:
            return
        if turn_id and turn_id not in self._turns:
            return
        await self._guard(self._conv.clear(turn_id))

    async def reconfigure(self, config: pb.SessionConfig) -> None:
        """Another session config (a voice change) from the next turn on; the playing turn keeps the old one."""
        self.config = pb.SessionConfig()
        self.config.CopyFrom(config)
        self.config.word_timestamps = True
        if self._conv is not None:
            await self._guard(self._conv.reconfigure(self.config))

    async def keepalive(self) -> None:
        """The caller is still there: keeps an open stream from its idle timeout (opens none)."""
        if self._conv is not None:
            await self._guard(self._conv.keepalive())

    def has_turn(self, turn_id: str) -> bool:
        return turn_id in self._turns and not self._turns[turn_id].done

    async def close(self) -> None:
        """End the stream now (cancels it: the server frees the call)."""
        conv, self._conv = self._conv, None
        if conv is not None:
            conv.cancel()
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
            self._reader = None
        self._turns.clear()

    # ------------------------------------------------------------------ internals

    async def _guard(self, send: Awaitable[float]) -> None:
        try:
            await send
        except Exception as exc:  # VoxpoolError, ConversationClosed: the stream ended under us
            await self._drop_stream()
            raise self._as_error(exc) from exc

    @staticmethod
    def _as_error(exc: Exception) -> VoxpoolError:
        if isinstance(exc, VoxpoolError):
            return exc
        return VoxpoolError(grpc.StatusCode.UNAVAILABLE, f"voxpool stream closed: {exc}")

    def _live(self) -> RollingConversation:
        """The open stream; the reader may have dropped it while a send was awaited (the stream broke)."""
        conv = self._conv
        if conv is None:
            raise VoxpoolError(grpc.StatusCode.UNAVAILABLE,
                               "voxpool stream closed while sending: the connection broke; send the turn again")
        return conv

    async def _drop_stream(self, conv: RollingConversation | None = None) -> None:
        """Forget the current stream (only if it is still `conv`, when given) and cancel it."""
        if conv is not None and self._conv is not conv:
            conv.cancel()
            return
        conv, self._conv = self._conv, None
        self.started = None
        if conv is not None:
            conv.cancel()

    async def _mark(self, turn_id: str, turn: _Turn, final: bool = False) -> None:
        end = len(turn.heard.text)
        if end <= turn.mark_start_char:
            return
        if not final and self._bucket is not None and not self._bucket.take():
            return  # over budget: this text joins the next mark's chunk
        name = f"{MARK_PREFIX}{end}"
        turn.marks[name] = (turn.mark_start_char, end)
        turn.mark_start_char = end
        await self._guard(self._live().mark(name, turn_id))

    async def _read(self, conv: RollingConversation) -> None:
        try:
            async for ev in conv:
                if isinstance(ev, StreamMoved):
                    self.stream_moves += 1
                    self.started = ev.started
                await self._route(ev)
        except VoxpoolError as err:
            if self._conv is conv:
                self._conv = None
                self.started = None
            # the turns this stream carried (a later stream's turns, opened after a send dropped this one, go on)
            broken = tuple(t for t, st in self._turns.items() if not st.done and st.conv in (conv, None))
            for turn_id in broken:
                del self._turns[turn_id]
            log.warning("voxpool stream broke (%s); %d turn(s) unfinished", err, len(broken))
            await self.handler(StreamBroken(err, broken))
            return
        except asyncio.CancelledError:
            raise
        if self._conv is conv:  # ended with OK on its own (idle timeout or end): reopen on next use
            self._conv = None
            self.started = None
            await self._resend_unanswered(conv)
        # else the session dropped it after a failed send: its turns were reported failed, none goes again

    async def _resend_unanswered(self, conv: RollingConversation) -> None:
        """Turns sent on a stream that then ended OK before any of their audio came: the server had ended the stream
        (its idle timeout) as their text crossed the end on the wire, so nobody read it. Each goes again, whole, on
        a new stream (flushed if it was), as the same turn; the caller hears it late rather than never."""
        for turn_id, turn in list(self._turns.items()):
            if turn.conv is not conv or turn.done or turn.origin_pts_ms is not None or not turn.heard.text:
                continue
            log.info("voxpool stream ended before turn %s was answered; sending it on a new stream", turn_id)
            await self._resend(turn_id, turn)

    async def _resend(self, turn_id: str, turn: _Turn) -> None:
        """Send an unanswered turn's whole text again on a new stream (flushed if it was); if no server takes it,
        the handler gets StreamBroken for it."""
        self._resending.add(turn_id)
        try:
            await self.open()
            live = self._live()
            kw = {"options": turn.options} if turn.options is not None else {}
            await live.send_text(turn.heard.text, turn_id, **kw)
            turn.conv = live
            if turn.flushed:
                await live.flush(turn_id)
        except Exception as exc:  # VoxpoolError, ConversationClosed: no server took it either
            self._turns.pop(turn_id, None)
            await self.handler(StreamBroken(self._as_error(exc), (turn_id,)))
        finally:
            self._resending.discard(turn_id)

    async def _route(self, ev: Event) -> None:
        if isinstance(ev, Audio):
            turn = self._turns.get(ev.turn_id)
            if turn is not None and not ev.silence and turn.origin_pts_ms is None:
                turn.origin_pts_ms = ev.pts_ms
                turn.chunk_start_pts_ms = ev.pts_ms
                if turn.held_words:
                    held, turn.held_words = turn.held_words, []
                    await self._emit_server_words(ev.turn_id, turn, held)
            await self.handler(ev)
            return
        if isinstance(ev, Words):
            self._server_words = True
            turn = self._turns.setdefault(ev.turn_id, _Turn())
            if turn.origin_pts_ms is None:
                turn.held_words.extend(ev.words)
            else:
                await self._emit_server_words(ev.turn_id, turn, list(ev.words))
            return
        if isinstance(ev, MarkReached) and ev.name.startswith(MARK_PREFIX):
            await self._on_word_mark(ev)
            return
        if isinstance(ev, (TurnDone, Cleared)):
            turn = self._turns.pop(ev.turn_id, None)
            if turn is not None:
                turn.done = True
                if isinstance(ev, TurnDone):
                    await self._emit_tail(ev.turn_id, turn)
        elif isinstance(ev, TurnError) and ev.code in TURN_ENDING_ERRORS:  # others (RATE_LIMITED) drop one event
            turn = self._turns.get(ev.turn_id)
            if turn is not None:
                turn.done = True
                self._turns.pop(ev.turn_id, None)
        await self.handler(ev)

    async def _emit_server_words(self, turn_id: str, turn: _Turn, words: list) -> None:
        """The server times words only: the text between two words (punctuation, spaces) goes with the next word
        (HeardTurn.pieces), so the words joined give back the turn's text, as the mark-timed words do."""
        origin = turn.origin_pts_ms or 0
        out = []
        for piece in turn.heard.pieces(words):
            turn.last_end_s = max(0, piece.end_pts_ms - origin) / 1000.0
            out.append(TimedWord(piece.text, piece.start_char, piece.end_char,
                                 max(0, piece.start_pts_ms - origin) / 1000.0, turn.last_end_s))
        if out:
            await self.handler(TurnWords(turn_id, tuple(out)))

    async def _emit_tail(self, turn_id: str, turn: _Turn) -> None:
        """A completed turn's text after its last timed word (closing punctuation), at that word's end."""
        if not self._server_words or turn.origin_pts_ms is None:
            return
        tail = turn.heard.tail(0)
        if tail is not None:
            await self.handler(TurnWords(turn_id, (TimedWord(tail.text, tail.start_char, tail.end_char,
                                                             turn.last_end_s, turn.last_end_s),)))

    async def _on_word_mark(self, ev: MarkReached) -> None:
        turn = self._turns.get(ev.turn_id)
        if turn is None or self._server_words:
            return
        span = turn.marks.pop(ev.name, None)
        if span is None:
            return
        start, end = span
        text = turn.heard.text[start:end]
        if turn.origin_pts_ms is None:  # no audio for this text (whitespace, punctuation only)
            turn.origin_pts_ms = ev.pts_ms
            turn.chunk_start_pts_ms = ev.pts_ms
        chunk_start = turn.chunk_start_pts_ms if turn.chunk_start_pts_ms is not None else ev.pts_ms
        turn.chunk_start_pts_ms = ev.pts_ms
        if not text.strip():
            return
        word = TimedWord(text, start, end, max(0, chunk_start - turn.origin_pts_ms) / 1000.0,
                         max(0, ev.pts_ms - turn.origin_pts_ms) / 1000.0)
        await self.handler(TurnWords(ev.turn_id, (word,)))
