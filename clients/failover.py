"""A Converse call that survives the loss of its server: reopened on another ready server, each unfinished turn's
unheard remainder resent, the caller's media clock kept contiguous (docs/reliability.md, "Failover")."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from clients.conversation import (
    Audio,
    Cleared,
    ConversationClosed,
    Conversation,
    Event,
    Failover,
    FailoverPolicy,
    MarkReached,
    ServerUnavailable,
    ServerWarning,
    Started,
    TurnDone,
    TurnError,
    VoxpoolError,
    WordTime,
    Words,
    error_from_rpc,
    event_from_proto,
    events_from_proto,
    text_spans,
)
from clients.heard import HeardTurn
from clients.stall import FrameWatch, skipped_slots_ms
from clients.text_budget import TextBudget, delta_pieces
from protos.voxpool.v1 import tts_pb2 as pb

if TYPE_CHECKING:  # the client opens these conversations; here it is only called back (converse_call, target)
    from typing import Protocol

    class VoxpoolClient(Protocol):
        target: str

        def converse_call(self, timeout_s: float | None = None) -> grpc.aio.StreamStreamCall: ...

log = logging.getLogger(__name__)

# Payload byte of a silent sample per encoding (L16: two zero bytes per sample).
SILENCE_BYTE = {"PCMU": 0xFF, "PCMA": 0xD5, "L16": 0x00}
# Words in a non-UNAVAILABLE status that still mean the connection was lost (HTTP/2 reset, socket closed).
# "internal error from core": gRPC core's answer when the transport under a call failed (seen for a dropped stream on
# a loaded host, and for a call started on a channel whose transport had just failed).
LOST_CONNECTION_WORDS = ("rst_stream", "stream removed", "socket closed", "connection reset", "broken pipe",
                         "goaway", "failed to connect", "connection refused", "internal error from core")


# In-band errors that end their turn (the others drop one delta, mark or span and the turn goes on).
TURN_ENDING_ERRORS = frozenset({"SYNTHESIS_FAILED", "NORMALIZATION_FAILED", "INVALID_SSML", "INVALID_LEXICON"})


def lost_connection(err: VoxpoolError) -> bool:
    """True when a status means the server or the path to it is gone (fail over), not that the call was refused."""
    if err.code == grpc.StatusCode.UNAVAILABLE:
        return True
    if err.code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        details = err.details.lower()
        return any(w in details for w in LOST_CONNECTION_WORDS)
    return False


def transport_lost(err: VoxpoolError) -> bool:
    """True when the status comes from gRPC core because the connection under the call failed (its details name
    the transport: reset, broken pipe, stream removed, ...), not from a server that answered."""
    details = err.details.lower()
    return err.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) and any(
        w in details for w in LOST_CONNECTION_WORDS)


def backoff_pause_s(backoff_s: float, jitter: float, draw: float) -> float:
    """One pause of the reopen backoff: `backoff_s` less a random share of up to `jitter` of it (`draw` in [0, 1)),
    so calls that broke together spread their retries."""
    return backoff_s * (1.0 - min(max(jitter, 0.0), 1.0) * draw)


def worth_retrying(err: VoxpoolError) -> bool:
    """A failed reopen that another attempt (maybe on another server) can fix."""
    return lost_connection(err) or err.code in (grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                grpc.StatusCode.DEADLINE_EXCEEDED)


@dataclass
class _Turn:
    """The client's journal of one turn: everything the application sent for it, and what of it was heard."""

    turn_id: str
    heard: HeardTurn = field(default_factory=HeardTurn)
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # turn-absolute (start, end, kind)
    marks: list[tuple[int, str]] = field(default_factory=list)  # placed and not reached: (text position, name)
    state: str = "open"  # open → complete (flush, a newer turn, end) → ended (turn_done, cleared, error)
    clear_sent: bool = False
    base_char: int = 0  # the current stream's text of this turn starts here (what a failover resent)
    on_stream: bool = True  # the turn exists on the current stream
    failovers: int = 0
    speech_ms: int = 0  # speech delivered to the application for this turn, over every stream
    options: pb.TurnOptions | None = None  # sent on the delta that opened it (format, rate, volume)

    @property
    def ssml(self) -> bool:
        return self.options is not None and self.options.text_format == pb.TurnOptions.SSML

    @property
    def unfinished(self) -> bool:
        return self.state != "ended" and bool(self.heard.text or self.marks)


@dataclass
class _Gap:
    """From a break to the first event of the stream that took over."""

    start_s: float
    first_due_s: float  # when the first silence frame is due (REALTIME)
    reason: str
    from_session_id: str
    playing_turn: str | None  # the turn whose audio the silence stands in for; None: nothing was playing
    skipped_ms: int = 0  # media time the caller had already gone without frames when the break was seen
    silence_frames: int = 0
    to_session_id: str = ""
    attempts: int = 0
    records: list[tuple[str, str, str]] = field(default_factory=list)  # (turn_id, heard_text, resent_text)


class FailoverConversation(Conversation):
    """A Conversation (same methods, same events) whose stream is reopened on another ready server when it breaks
    mid-turn. Open it with `VoxpoolClient.converse()` (failover on by default).

    It always sends explicit turn ids: an empty one is resolved here as the server would (the open turn, else a new
    turn "tN"), so the ids the application sees are the ones it would have seen, on every server. It asks for word
    timestamps (to know what was heard) and hands `Words` on only when the application asked for them.
    """

    def __init__(self, client: "VoxpoolClient", wire_config: pb.SessionConfig, app_words: bool,
                 policy: FailoverPolicy, call: grpc.aio.StreamStreamCall, deadline_s: float | None):
        super().__init__(call, started=None)  # type: ignore[arg-type]
        self._client = client
        self._config = wire_config
        self._app_words = app_words
        self._policy = policy
        self._deadline_s = deadline_s  # time.monotonic() bound of the whole conversation, or None
        self._turns: dict[str, _Turn] = {}
        self._counter = 0  # turns opened (the server's "tN" numbering)
        self._max_delta_chars = 0
        self._write_lock = asyncio.Lock()
        self._stream_live = True
        self._read_task: asyncio.Future | None = None
        self._reopen_task: asyncio.Task | None = None
        self._failed: VoxpoolError | None = None
        self._out: deque[Event] = deque()
        self._gap: _Gap | None = None
        self._pts_offset_ms = 0  # client media time of the current stream's pts 0
        self._seq_offset = 0
        self._next_pts_ms = 0  # end of the last frame delivered
        self._next_seq = 0
        self._last_audio_s: float | None = None  # receipt time of the last frame delivered
        self._wakeup: asyncio.Future | None = None  # set when a sender queues a record for the reader
        self._eof = False  # the stream ended with OK and nothing was left to do
        self._breaks_without_audio = 0  # failovers since the last speech frame from a server
        self._watch = FrameWatch(policy.stall_timeout_s, policy.first_audio_timeout_s)  # a frozen server
        self._reading_since_s = time.perf_counter()  # when the application last asked for an event
        self._budget = TextBudget()  # the server's buffered text on this stream, bounded from above
        # events the application (or a failover) sent that wait for buffer space on the server, in order:
        # (event, turn id, code points of text)
        self._backlog: deque[tuple[pb.ClientEvent, str, int]] = deque()
        self._on_server: set[str] = set()  # turns the current stream's server knows (text or a mark written)
        self._pump_task: asyncio.Task | None = None
        self._rng = random.Random()
        self.session_id = ""
        self.failovers = 0

    # ------------------------------------------------------------------ opening

    @classmethod
    async def open(cls, client: "VoxpoolClient", config: pb.SessionConfig, policy: FailoverPolicy,
                   timeout_s: float | None) -> "FailoverConversation":
        wire = pb.SessionConfig()
        wire.CopyFrom(config)
        wire.word_timestamps = True
        deadline_s = time.monotonic() + timeout_s if timeout_s is not None else None
        call = client.converse_call(timeout_s)
        conv = cls(client, wire, bool(config.word_timestamps), policy, call, deadline_s)
        try:
            started = await conv._handshake(call)
        except BaseException:
            call.cancel()
            raise
        conv._on_started(started)
        conv.started = started
        return conv

    async def _handshake(self, call: grpc.aio.StreamStreamCall) -> Started:
        """Send the config on a new stream and read `started` (VoxpoolError otherwise)."""
        try:
            await call.write(pb.ClientEvent(config=self._config))
            msg = await call.read()
        except grpc.aio.AioRpcError as err:
            raise error_from_rpc(err) from None
        if msg is grpc.aio.EOF:
            code = await call.code()
            raise VoxpoolError(code, await call.details() or "the stream ended before `started`")
        ev = event_from_proto(msg, time.perf_counter())
        if not isinstance(ev, Started):
            raise VoxpoolError(grpc.StatusCode.INTERNAL, f"expected `started` first, got {type(ev).__name__}")
        return ev

    def _on_started(self, started: Started) -> None:
        self.session_id = started.session_id
        limits = started.raw.limits
        self._max_delta_chars = limits.max_delta_chars
        self._budget.reset(limits.max_buffered_chars)
        self._watch.reset(time.perf_counter())
        self._backlog.clear()
        self._on_server.clear()

    # ------------------------------------------------------------------ sending (journal, then the live stream)

    async def _send(self, event: pb.ClientEvent | None) -> float:
        """Write to the live stream; a failed write only marks it broken: the reader fails over and resends from
        the journal, which already holds this event. Call with the write lock held."""
        if event is not None and self._stream_live:
            try:
                await self._call.write(event)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                self._stream_live = False
            except asyncio.CancelledError:  # the call was cancelled under a pending write (a failover)
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                self._stream_live = False
        return time.perf_counter()

    async def _write(self, event: pb.ClientEvent, turn_id: str = "", chars: int = 0) -> float:
        """Write one journaled event to the live stream and account for it (text owed audio, buffer space);
        `end` also closes the writing side. Call with the write lock held."""
        kind = event.WhichOneof("event")
        if kind in ("text", "mark"):
            self._on_server.add(turn_id)
        if chars:
            self._budget.written(turn_id, chars)
            self._watch.text_sent(turn_id, time.perf_counter())
        t_sent = await self._send(event)
        if kind == "end" and self._stream_live:
            try:
                await self._call.done_writing()
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass
        return t_sent

    async def _post(self, event: pb.ClientEvent, turn_id: str = "", chars: int = 0) -> float:
        """Write a journaled event now, or queue it behind the events already waiting for buffer space on the
        server (text that does not fit waits too): the server gets everything in the order it was sent."""
        if not self._backlog and (not chars or self._budget.fits(chars)):
            return await self._write(event, turn_id, chars)
        self._backlog.append((event, turn_id, chars))
        return time.perf_counter()

    def _backlog_chars(self) -> int:
        return sum(chars for _, _, chars in self._backlog)

    async def _pump_locked(self) -> None:
        """Write the waiting events that fit the server's buffer now. Call with the write lock held."""
        while self._backlog and self._stream_live:
            event, turn_id, chars = self._backlog[0]
            if chars and not self._budget.fits(chars):
                return
            self._backlog.popleft()
            await self._write(event, turn_id, chars)

    async def _pump(self) -> None:
        async with self._write_lock:
            await self._pump_locked()

    def _kick_pump(self) -> None:
        """Buffer space came free on the server: write what waits for it (in a task: reading never waits on a
        write)."""
        if self._backlog and self._reopen_task is None and (self._pump_task is None or self._pump_task.done()):
            self._pump_task = asyncio.get_running_loop().create_task(self._pump(), name="voxpool-backlog")

    def _check_open(self) -> None:
        if self._failed is not None:
            raise self._failed  # failover gave up: the error says why
        if self._ended or self._finished:
            raise ConversationClosed("the conversation is closed (end() was sent or the stream finished)")

    def _open_turn(self) -> _Turn | None:
        return next((t for t in reversed(self._turns.values()) if t.state == "open"), None)

    def _new_turn(self, turn_id: str) -> _Turn:
        for t in list(self._turns.values()):  # a new turn completes the open ones (turns play in order)
            if t.state == "open":
                t.state = "complete"
                if not t.on_stream:  # all of it was heard before a failover
                    self._finish_locally(t)
        self._counter += 1
        turn = _Turn(turn_id or f"t{self._counter}")
        self._turns.pop(turn.turn_id, None)
        self._turns[turn.turn_id] = turn
        return turn

    def _find(self, turn_id: str) -> _Turn | None:
        return self._turns.get(turn_id) if turn_id else self._open_turn()

    async def send_text(self, delta: str, turn_id: str = "", spans: Sequence[tuple[int, int, str]] | None = None,
                        *, options: pb.TurnOptions | None = None) -> float:
        self._check_open()
        async with self._write_lock:
            if not delta or (self._max_delta_chars and len(delta) > self._max_delta_chars):
                msg = pb.TextDelta(text=delta, turn_id=turn_id, spans=text_spans(spans))
                if options is not None:
                    msg.turn_options.CopyFrom(options)
                return await self._send(pb.ClientEvent(text=msg))  # refused or ignored by the server: no journal
            turn = self._find(turn_id)
            if turn is not None and turn.state != "open":  # complete: the server answers UNKNOWN_TURN
                return await self._send(pb.ClientEvent(text=pb.TextDelta(text=delta, turn_id=turn_id)))
            if not self._budget.fits(len(delta), self._backlog_chars()):
                return self._refuse_for_buffer(turn.turn_id if turn is not None else turn_id)
            if turn is None:
                turn = self._new_turn(turn_id)
                turn.options = options  # the server reads options on the delta that opens a turn
            proto_spans = text_spans(spans)
            offset = len(turn.heard.text)
            turn.spans.extend((offset + s.start, offset + s.end, s.kind) for s in proto_spans)
            turn.heard.add_text(delta)
            if not turn.on_stream:  # a turn carried over with nothing left to resend: it opens again here
                turn.on_stream = True
                turn.base_char = offset
            msg = pb.TextDelta(text=delta, turn_id=turn.turn_id, spans=proto_spans)
            if options is not None:
                msg.turn_options.CopyFrom(options)
            return await self._post(pb.ClientEvent(text=msg), turn.turn_id, len(delta))

    def _refuse_for_buffer(self, turn_id: str) -> float:
        """The delta might not fit the server's buffered-text limit: refused here as the server would refuse it
        (retryable TEXT_TOO_LONG), never sent and never journaled, so no failover speaks it."""
        now = time.perf_counter()
        self._out.append(TurnError(
            "TEXT_TOO_LONG", f"more than {self._budget.max_chars} characters waiting to be spoken; wait for audio "
            "before sending more text", turn_id, True, now))
        self._wake_reader()
        return now

    async def flush(self, turn_id: str = "") -> float:
        self._check_open()
        async with self._write_lock:
            turn = self._find(turn_id)
            if turn is None:
                return await self._send(pb.ClientEvent(flush=pb.Flush(turn_id=turn_id)))
            if turn.state == "open":
                turn.state = "complete"
            if not turn.on_stream:  # everything of it was heard before a failover: it is done
                self._finish_locally(turn)
                return time.perf_counter()
            return await self._post(pb.ClientEvent(flush=pb.Flush(turn_id=turn.turn_id)), turn.turn_id)

    async def mark(self, name: str, turn_id: str = "") -> float:
        self._check_open()
        async with self._write_lock:
            turn = self._find(turn_id)
            if turn is None and not turn_id:
                turn = self._new_turn("")
            if turn is None or turn.state == "ended":
                return await self._send(pb.ClientEvent(mark=pb.Mark(name=name, turn_id=turn_id)))
            if not turn.on_stream:  # all its text so far was heard (before a failover): the mark is reached
                self._out.append(MarkReached(name, turn.turn_id, self._next_pts_ms, time.perf_counter()))
                self._wake_reader()
                return time.perf_counter()
            turn.marks.append((len(turn.heard.text), name))
            return await self._post(pb.ClientEvent(mark=pb.Mark(name=name, turn_id=turn.turn_id)), turn.turn_id)

    async def clear(self, turn_id: str = "") -> float:
        self._check_open()
        async with self._write_lock:
            self._watch.clear_sent(turn_id)
            targets = ([self._turns[turn_id]] if turn_id in self._turns else [] if turn_id
                       else list(self._turns.values()))
            cleared_here = 0
            for t in targets:
                if t.state == "ended":
                    continue
                self._backlog = deque(b for b in self._backlog if b[1] != t.turn_id)  # barge-in waits for nothing
                if t.turn_id in self._on_server:
                    t.clear_sent = True
                else:  # nothing of it reached this server: cleared here, the server would not know the turn
                    self._clear_locally(t)
                    cleared_here += 1
            if cleared_here and not any(t.clear_sent for t in targets):
                return time.perf_counter()  # nothing for the server to clear
            return await self._send(pb.ClientEvent(clear=pb.Clear(turn_id=turn_id)))

    async def keepalive(self) -> float:
        self._check_open()
        async with self._write_lock:
            return await self._send(pb.ClientEvent(keepalive=pb.Keepalive()))

    async def end(self) -> float:
        self._check_open()
        async with self._write_lock:
            for t in list(self._turns.values()):
                if t.state == "open":
                    t.state = "complete"
                if not t.on_stream:  # all of it was heard before a failover
                    self._finish_locally(t)
            self._ended = True
            return await self._post(pb.ClientEvent(end=pb.End()))

    def cancel(self) -> None:
        self._finished = True  # reading on raises CANCELLED, as without failover
        for task in (self._reopen_task, self._read_task, self._pump_task):
            if task is not None:
                task.cancel()
        self._call.cancel()

    # ------------------------------------------------------------------ reading

    async def next_event(self) -> Event | None:
        self._reading_since_s = time.perf_counter()
        while True:
            if self._out:
                return self._out.popleft()
            if self._failed is not None:
                self._finished = True
                raise self._failed
            if self._finished:
                if self._eof:
                    return None
                raise VoxpoolError(grpc.StatusCode.CANCELLED, "the conversation was cancelled")
            try:
                msg = await self._next_message()
            except grpc.aio.AioRpcError as err:
                self._on_broken(error_from_rpc(err))
                continue
            except asyncio.InvalidStateError:
                self._on_broken(VoxpoolError(grpc.StatusCode.UNAVAILABLE, "the stream closed"))
                continue
            if msg is None:  # a silence frame was queued, the reopen ended, or a sender queued a record
                continue
            if msg is grpc.aio.EOF:
                code = await self._call.code()
                if code != grpc.StatusCode.OK:
                    self._on_broken(VoxpoolError(code, await self._call.details() or ""))
                elif self._pending_on_server():
                    self._on_broken(VoxpoolError(grpc.StatusCode.UNAVAILABLE,
                                                 "the stream ended before its turns finished"))
                else:
                    self._finished = self._eof = True  # queued records still go out first
                continue
            for ev in events_from_proto(msg, time.perf_counter()):
                self._accept(ev)

    def _pending_on_server(self) -> bool:
        """A turn the current server still owes audio or an answer for."""
        return any(t.unfinished and t.on_stream for t in self._turns.values())

    async def _next_message(self) -> Any:
        """The live stream's next message; None when, instead, a silence frame fell due, the reopen ended or a sender
        queued a record. The plain read is the fast path: no gap, no reopen, no turn waiting on a local record."""
        stall_at = self._stall_deadline_s()
        if self._reopen_task is None and self._gap is None and self._read_task is None and stall_at is None \
                and all(t.on_stream for t in self._turns.values()):
            return await self._call.read()
        waiting: asyncio.Future
        if self._reopen_task is not None:
            waiting = self._reopen_task
        else:
            if self._read_task is None:
                self._read_task = asyncio.ensure_future(self._call.read())
            waiting = self._read_task
        self._wakeup = asyncio.get_running_loop().create_future()
        timeout_s = self._silence_due_in_s()
        if stall_at is not None and waiting is self._read_task:
            until_stall_s = max(0.0, stall_at - time.perf_counter())
            timeout_s = until_stall_s if timeout_s is None else min(timeout_s, until_stall_s)
        try:
            done, _ = await asyncio.wait({waiting, self._wakeup}, timeout=timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._wakeup = None
        if waiting not in done:
            if not done:
                if self._silence_due_in_s() is not None:
                    self._out.append(self._silence_frame())
                elif stall_at is not None and waiting is self._read_task and time.perf_counter() >= stall_at:
                    self._on_stall()
            return None
        if waiting is self._reopen_task:
            self._reopen_task = None
            exc = waiting.exception()
            if exc is not None:
                self._failed = exc if isinstance(exc, VoxpoolError) else VoxpoolError(
                    grpc.StatusCode.UNAVAILABLE, f"failover failed: {exc!r}")
                self._call.cancel()
            return None
        self._read_task = None
        return waiting.result()

    def _stall_deadline_s(self) -> float | None:
        """REALTIME, on a live stream that owes audio: when it counts as lost if nothing arrives first."""
        if self.started.pacing != "REALTIME" or self._gap is not None or self._reopen_task is not None \
                or not self._stream_live or self._finished:
            return None
        return self._watch.deadline_s(self._reading_since_s)

    def _on_stall(self) -> None:
        """Nothing arrived within the bound while audio was owed: the server froze or the path to it is gone."""
        silent_ms = round((time.perf_counter() - self._watch.activity_s) * 1000)
        playing = bool(self._watch.playing)
        task, self._read_task = self._read_task, None
        if task is not None:
            task.cancel()
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        what = ("mid-turn (REALTIME sends a frame every frame_ms)" if playing
                else "while a turn waited for its first audio")
        self._on_broken(ServerUnavailable(
            grpc.StatusCode.UNAVAILABLE,
            f"no message from the server for {silent_ms} ms {what}: the server froze or the path to it was lost"))

    def _wake_reader(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def _on_broken(self, err: VoxpoolError) -> None:
        """The stream broke: fail over when the connection was lost, else end the call with the error."""
        if self._finished or not lost_connection(err):
            self._failed = err
            return
        if self._ended and not self._pending_on_server():
            self._finished = self._eof = True  # everything was said and heard: only the final OK was lost
            return
        self._breaks_without_audio += 1
        if self._breaks_without_audio > self._policy.max_attempts:  # servers that take the call, then drop it
            self._failed = ServerUnavailable(
                grpc.StatusCode.UNAVAILABLE,
                f"failover gave up: the stream broke {self._breaks_without_audio} times in a row without any audio "
                f"(last: {err.code.name}: {err.details})")
            return
        now = time.perf_counter()
        frame_s = self.started.frame_ms / 1000.0
        playing = next((t.turn_id for t in self._turns.values()  # the first turn with something left to hear
                        if t.unfinished and t.heard.heard_chars() < len(t.heard.text)), None)
        first_due = max(now, self._last_audio_s + frame_s) if self._last_audio_s is not None else now
        skipped_ms = 0
        if playing is not None and self.started.pacing == "REALTIME":
            # the caller already went without frames since the last one (a frozen server is noticed late): the
            # media clock jumps by the missed slots, as a pacer does, instead of a burst of fill frames
            skipped_ms = skipped_slots_ms(self._last_audio_s, now, self.started.frame_ms)
            if skipped_ms:
                self._next_pts_ms += skipped_ms
                first_due = now
        self._gap = _Gap(now, first_due, f"{err.code.name}: {err.details}", self.session_id, playing, skipped_ms)
        self._stream_live = False
        self._backlog.clear()
        self._call.cancel()
        log.warning("voxpool stream %s broke (%s): failing over", self.session_id, self._gap.reason)
        self._reopen_task = asyncio.create_task(self._reopen(err), name="voxpool-failover")

    def _silence_due_in_s(self) -> float | None:
        """REALTIME, between a break and the first event of the new stream, while a turn was playing: seconds
        until the next silence frame is due (frames go one frame period apart: no burst). None: no fill."""
        gap = self._gap
        if gap is None or gap.playing_turn is None or self.started.pacing != "REALTIME":
            return None
        due = gap.first_due_s + gap.silence_frames * self.started.frame_ms / 1000.0
        return max(0.0, due - time.perf_counter())

    def _silence_frame(self) -> Audio:
        gap = self._gap
        assert gap is not None and gap.playing_turn is not None
        gap.silence_frames += 1
        payload = bytes([SILENCE_BYTE.get(self.started.encoding, 0)]) * self.started.frame_bytes
        frame = Audio(payload, self._next_seq, self._next_pts_ms, self.started.frame_ms, gap.playing_turn, True,
                      time.perf_counter())
        self._next_seq += 1
        self._next_pts_ms += self.started.frame_ms
        self._last_audio_s = frame.received_s
        return frame

    # ------------------------------------------------------------------ failover

    async def _reopen(self, broke: VoxpoolError) -> None:
        """Open a new stream on a ready server (bounded attempts with backoff), then resend under the write lock."""
        call, started, attempts = await self._open_another(broke)
        async with self._write_lock:
            self._call = call
            self._stream_live = True
            self._on_started(started)
            self.failovers += 1
            gap = self._gap
            assert gap is not None
            gap.to_session_id, gap.attempts = started.session_id, attempts
            resent_any = await self._resend()
            if self._ended:
                await self._post(pb.ClientEvent(end=pb.End()))
        if not resent_any:
            self._end_gap()
        log.warning("voxpool call moved from %s to %s after %d attempt(s)", gap.from_session_id,
                    gap.to_session_id, attempts)

    async def _open_another(self, broke: VoxpoolError) -> tuple[grpc.aio.StreamStreamCall, Started, int]:
        """A new stream that answered `started`: (call, started, attempts). A failed attempt is followed by the next
        after a jittered backoff; an attempt still unanswered after `hedge_after_s` gets another one beside it (a
        frozen server may still look ready to the channel's round robin, which then picks the next server), and the
        first to answer wins. At most `max_attempts` within `timeout_s`, else ServerUnavailable."""
        policy = self._policy
        start = time.monotonic()
        backoff_s = policy.first_backoff_s
        attempts = 0
        pending: dict[asyncio.Task, grpc.aio.StreamStreamCall] = {}
        next_at = start  # when the next attempt may start
        last: VoxpoolError | None = None
        try:
            while True:
                now = time.monotonic()
                if attempts < policy.max_attempts and now >= next_at:
                    remaining = None if self._deadline_s is None else self._deadline_s - now
                    if remaining is not None and remaining <= 0:
                        raise VoxpoolError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                           "the call's timeout ran out during failover")
                    call = self._client.converse_call(remaining)
                    task = asyncio.ensure_future(asyncio.wait_for(self._handshake(call), policy.open_timeout_s))
                    pending[task] = call
                    attempts += 1
                    hedge = policy.hedge_after_s
                    next_at = now + hedge if hedge is not None else float("inf")
                if not pending:  # every attempt failed: give up, or wait out the backoff
                    now = time.monotonic()
                    elapsed = now - start
                    assert last is not None
                    if attempts >= policy.max_attempts or next_at - start > policy.timeout_s:
                        raise ServerUnavailable(
                            grpc.StatusCode.UNAVAILABLE,
                            f"failover gave up after {attempts} attempt(s) in {elapsed:.1f} s: no ready voxpool "
                            f"server at {self._client.target} took the call (last: {last.code.name}: "
                            f"{last.details}); the stream had broken with {broke.code.name}: {broke.details}")
                    await asyncio.sleep(max(0.0, next_at - now))
                    continue
                wait_s = max(0.0, next_at - now) if attempts < policy.max_attempts and next_at != float("inf") \
                    else None
                done, _ = await asyncio.wait(pending, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    call = pending.pop(task)
                    exc = task.exception()
                    if exc is None:
                        return call, task.result(), attempts
                    call.cancel()
                    if not isinstance(exc, (VoxpoolError, asyncio.TimeoutError)):
                        raise exc
                    err = exc if isinstance(exc, VoxpoolError) else VoxpoolError(
                        grpc.StatusCode.DEADLINE_EXCEEDED, f"no `started` within {policy.open_timeout_s:g} s")
                    if not worth_retrying(err):
                        raise err
                    last = err
                    pause = max(backoff_pause_s(backoff_s, policy.backoff_jitter, self._rng.random()),
                                (err.retry_after_ms or 0) / 1000.0)
                    backoff_s = min(backoff_s * 2, policy.max_backoff_s)
                    next_at = time.monotonic() + pause
                    log.info("failover attempt failed (%s); next in %.2f s", err, pause)
        finally:  # the winner returned, or no attempt is wanted any more (gave up, or the application cancelled)
            for task, call in pending.items():
                task.cancel()
                call.cancel()
                task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _resend(self) -> bool:
        """Each unfinished turn's unheard remainder (text, marks not reached, flush) on the new stream, in order;
        turns with nothing left are finished here. True when something was resent."""
        gap = self._gap
        assert gap is not None
        resent_any = False
        for turn in list(self._turns.values()):
            if not turn.unfinished:
                continue
            if turn.ssml:
                resent_any |= await self._resend_ssml(turn)
                continue
            heard = turn.heard.heard_chars()
            text = turn.heard.text
            turn.failovers += 1
            turn.heard.floor_char = heard
            turn.base_char = heard
            for pos, name in [m for m in turn.marks if m[0] <= heard]:  # their text was heard
                turn.marks.remove((pos, name))
                self._out.append(MarkReached(name, turn.turn_id, self._next_pts_ms, time.perf_counter()))
            if turn.clear_sent:  # the clear was sent, its answer lost: nothing of it plays any more
                self._out.append(Cleared(turn.turn_id, self._next_pts_ms, text[:heard], text[heard:], 0,
                                         time.perf_counter()))
                self._turn_ended(turn)
                continue
            if heard >= len(text):  # all of it was heard: nothing to resend, no gap in it
                turn.on_stream = False
                if turn.state == "complete":
                    self._finish_locally(turn)
                continue
            gap.records.append((turn.turn_id, text[:heard], text[heard:]))
            turn.on_stream = True
            cursor = heard
            for pos, name in sorted(turn.marks):
                if pos > cursor:
                    await self._send_text_piece(turn, cursor, pos)
                    cursor = pos
                await self._post(pb.ClientEvent(mark=pb.Mark(name=name, turn_id=turn.turn_id)), turn.turn_id)
            if cursor < len(text):
                await self._send_text_piece(turn, cursor, len(text))
            if turn.state == "complete":
                await self._post(pb.ClientEvent(flush=pb.Flush(turn_id=turn.turn_id)), turn.turn_id)
            resent_any = True
        return resent_any

    async def _send_text_piece(self, turn: _Turn, start: int, end: int) -> None:
        """Text [start, end) of the turn in deltas the server takes (at most its delta limit, and never more than
        its buffered-text limit at once: what does not fit waits for the turns before it to drain), each with the
        spans that lie wholly inside it; the turn's options (rate, volume) go on the piece that opens it here."""
        limit = self._max_delta_chars
        if self._budget.max_chars:
            limit = min(limit, self._budget.max_chars) if limit else self._budget.max_chars
        for a, b in delta_pieces(start, end, turn.heard.text, limit, [(s, e) for s, e, _ in turn.spans]):
            spans = [pb.TextSpan(start=s - a, end=e - a, kind=k) for s, e, k in turn.spans if s >= a and e <= b]
            msg = pb.TextDelta(text=turn.heard.text[a:b], turn_id=turn.turn_id, spans=spans)
            if turn.options is not None and a == turn.base_char:
                msg.turn_options.CopyFrom(turn.options)
            await self._post(pb.ClientEvent(text=msg), turn.turn_id, b - a)

    async def _resend_ssml(self, turn: _Turn) -> bool:
        """An SSML turn's heard text counts code points of its text content, not of the markup the client holds,
        so it is not resumed mid-document: resent whole while none of its speech was heard, else failed in-band
        (retryable) with what was lost, and the call goes on."""
        gap = self._gap
        assert gap is not None
        turn.failovers += 1
        if turn.speech_ms > 0:
            self._out.append(TurnError(
                "SYNTHESIS_FAILED", f"the server speaking SSML turn {turn.turn_id!r} was lost after "
                f"{turn.speech_ms} ms of its speech; an SSML turn is not resumed mid-document: send the unheard "
                "part again as a new turn", turn.turn_id, True, time.perf_counter()))
            self._turn_ended(turn)
            return False
        gap.records.append((turn.turn_id, "", turn.heard.text))
        turn.on_stream = True
        turn.base_char = 0
        await self._send_text_piece(turn, 0, len(turn.heard.text))
        if turn.state == "complete":
            await self._post(pb.ClientEvent(flush=pb.Flush(turn_id=turn.turn_id)), turn.turn_id)
        return True

    def _finish_locally(self, turn: _Turn) -> None:
        """A turn whose audio was all heard before a failover: its TurnDone, built here (server counters 0)."""
        self._out.append(TurnDone(turn.turn_id, 0, turn.speech_ms, 0, 0, 0, time.perf_counter()))
        self._turn_ended(turn)
        self._wake_reader()

    def _clear_locally(self, turn: _Turn) -> None:
        """A clear for a turn nothing of which reached the current server: its Cleared, built here."""
        heard = turn.heard.heard_chars()
        text = turn.heard.text
        self._out.append(Cleared(turn.turn_id, self._next_pts_ms, text[:heard], text[heard:], 0, time.perf_counter()))
        self._turn_ended(turn)
        self._wake_reader()

    def _turn_ended(self, turn: _Turn) -> None:
        """Done, cleared or failed: the server forgets it (its id may open a new turn), and so does the journal."""
        turn.state = "ended"
        if self._turns.get(turn.turn_id) is turn:
            del self._turns[turn.turn_id]
            self._watch.turn_ended(turn.turn_id)
            self._on_server.discard(turn.turn_id)
            if self._budget.turn_ended(turn.turn_id):
                self._kick_pump()

    def _end_gap(self) -> None:
        """The new stream's first event: its media clock continues the caller's; report the gap per turn."""
        gap, self._gap = self._gap, None
        if gap is None:
            return
        self._pts_offset_ms = self._next_pts_ms
        self._seq_offset = self._next_seq
        if self.started.pacing == "REALTIME":
            gap_ms = gap.skipped_ms + gap.silence_frames * self.started.frame_ms
        else:
            gap_ms = round((time.perf_counter() - gap.start_s) * 1000)
        now = time.perf_counter()
        for turn_id, heard_text, resent_text in gap.records:
            self._out.append(Failover(turn_id, gap_ms, heard_text, resent_text, gap.reason, gap.from_session_id,
                                      gap.to_session_id, gap.attempts, now))

    def _accept(self, ev: Event) -> None:
        """One event of the live stream, on the caller's clock and turn text, into the outgoing queue."""
        if isinstance(ev, Started):
            return
        if isinstance(ev, Audio):
            self._watch.frame(ev.turn_id, ev.received_s)
        else:
            self._watch.message(ev.received_s)
        if self._gap is not None and self._reopen_task is None and not isinstance(ev, ServerWarning):
            self._end_gap()
        off = self._pts_offset_ms
        turn = self._turns.get(getattr(ev, "turn_id", ""))
        base = turn.base_char if turn is not None else 0
        out: Any = ev
        if isinstance(ev, Audio):
            if off or self._seq_offset:  # after a failover: on the caller's clock
                out = Audio(ev.payload, ev.seq + self._seq_offset, ev.pts_ms + off, ev.duration_ms, ev.turn_id,
                            ev.silence, ev.received_s)
            self._next_pts_ms = out.pts_ms + out.duration_ms
            self._next_seq = out.seq + 1
            self._last_audio_s = ev.received_s
            if not out.silence:
                self._breaks_without_audio = 0
            if turn is not None:
                turn.heard.audio(out.pts_ms, out.duration_ms, out.silence)
                turn.speech_ms += 0 if out.silence else out.duration_ms
        elif isinstance(ev, Words):
            if ev.words and self._budget.timed(ev.turn_id, max(w.end_char for w in ev.words)):
                self._kick_pump()
            words = tuple(WordTime(w.text, w.start_char + base, w.end_char + base, w.start_pts_ms + off,
                                   w.end_pts_ms + off) for w in ev.words)
            if turn is not None:
                turn.heard.add_words(words)
            if not self._app_words:
                return
            out = Words(ev.turn_id, words, ev.received_s)
        elif isinstance(ev, MarkReached):
            out = MarkReached(ev.name, ev.turn_id, ev.pts_ms + off, ev.received_s)
            if turn is not None:
                pending = next((m for m in turn.marks if m[1] == ev.name), None)
                if pending is not None:
                    turn.marks.remove(pending)
                    turn.heard.mark_reached(pending[0])
        elif isinstance(ev, Cleared):
            prefix = turn.heard.text[:base] if turn is not None else ""
            # the rest of the turn's whole text: a failover's resent pieces still held back never reached the server
            remaining = turn.heard.text[base + len(ev.text_spoken):] if turn is not None else ev.text_remaining
            out = Cleared(ev.turn_id, ev.last_pts_ms + off, prefix + ev.text_spoken, remaining,
                          ev.dropped_audio_ms, ev.received_s)
            if turn is not None:
                self._turn_ended(turn)
        elif isinstance(ev, TurnDone):
            if turn is not None:
                if turn.failovers:
                    out = TurnDone(ev.turn_id, ev.ttfa_ms, turn.speech_ms, ev.underruns, ev.late_chunks, ev.chunks,
                                   ev.received_s, ttfs_ms=ev.ttfs_ms)
                self._turn_ended(turn)
        elif isinstance(ev, TurnError):
            if turn is not None and ev.code in TURN_ENDING_ERRORS:
                self._turn_ended(turn)
        self._out.append(out)
