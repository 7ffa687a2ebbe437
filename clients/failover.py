"""A Converse call that survives the loss of its server: reopened on another ready server, each unfinished turn's
unheard remainder resent, the caller's media clock kept contiguous (docs/reliability.md, "Failover")."""

from __future__ import annotations

import asyncio
import logging
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
    text_spans,
)
from clients.heard import HeardTurn
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
TURN_ENDING_ERRORS = frozenset({"SYNTHESIS_FAILED", "NORMALIZATION_FAILED", "INVALID_SSML"})


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
        self._max_delta_chars = started.raw.limits.max_delta_chars

    # ------------------------------------------------------------------ sending (journal, then the live stream)

    async def _send(self, event: pb.ClientEvent | None) -> float:
        """Write to the live stream; a failed write only marks it broken: the reader fails over and resends from
        the journal, which already holds this event. Call with the write lock held."""
        if event is not None and self._stream_live:
            try:
                await self._call.write(event)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                self._stream_live = False
        return time.perf_counter()

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
            return await self._send(pb.ClientEvent(text=msg))

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
            return await self._send(pb.ClientEvent(flush=pb.Flush(turn_id=turn.turn_id)))

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
            return await self._send(pb.ClientEvent(mark=pb.Mark(name=name, turn_id=turn.turn_id)))

    async def clear(self, turn_id: str = "") -> float:
        self._check_open()
        async with self._write_lock:
            for t in ([self._turns[turn_id]] if turn_id in self._turns else [] if turn_id else self._turns.values()):
                if t.state != "ended":
                    t.clear_sent = True
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
            t_sent = await self._send(pb.ClientEvent(end=pb.End()))
            self._ended = True
            if self._stream_live:
                try:
                    await self._call.done_writing()
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    pass
            return t_sent

    def cancel(self) -> None:
        self._finished = True  # reading on raises CANCELLED, as without failover
        for task in (self._reopen_task, self._read_task):
            if task is not None:
                task.cancel()
        self._call.cancel()

    # ------------------------------------------------------------------ reading

    async def next_event(self) -> Event | None:
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
            self._accept(event_from_proto(msg, time.perf_counter()))

    def _pending_on_server(self) -> bool:
        """A turn the current server still owes audio or an answer for."""
        return any(t.unfinished and t.on_stream for t in self._turns.values())

    async def _next_message(self) -> Any:
        """The live stream's next message; None when, instead, a silence frame fell due, the reopen ended or a sender
        queued a record. The plain read is the fast path: no gap, no reopen, no turn waiting on a local record."""
        if self._reopen_task is None and self._gap is None and self._read_task is None \
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
        try:
            done, _ = await asyncio.wait({waiting, self._wakeup}, timeout=self._silence_due_in_s(),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._wakeup = None
        if waiting not in done:
            if not done:
                self._out.append(self._silence_frame())
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
        self._gap = _Gap(now, first_due, f"{err.code.name}: {err.details}", self.session_id, playing)
        self._stream_live = False
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
        policy = self._policy
        start = time.monotonic()
        backoff_s = policy.first_backoff_s
        attempts = 0
        while True:
            attempts += 1
            remaining = None if self._deadline_s is None else self._deadline_s - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise VoxpoolError(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's timeout ran out during failover")
            call = self._client.converse_call(remaining)
            try:
                started = await asyncio.wait_for(self._handshake(call), policy.open_timeout_s)
                break
            except asyncio.CancelledError:  # the application cancelled the conversation
                call.cancel()
                raise
            except (VoxpoolError, asyncio.TimeoutError) as exc:
                call.cancel()
                err = exc if isinstance(exc, VoxpoolError) else VoxpoolError(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"no `started` within {policy.open_timeout_s:g} s")
                elapsed = time.monotonic() - start
                pause = max(backoff_s, (err.retry_after_ms or 0) / 1000.0)
                if not worth_retrying(err):
                    raise err
                if attempts >= policy.max_attempts or elapsed + pause > policy.timeout_s:
                    raise ServerUnavailable(
                        grpc.StatusCode.UNAVAILABLE,
                        f"failover gave up after {attempts} attempt(s) in {elapsed:.1f} s: no ready voxpool server "
                        f"at {self._client.target} took the call (last: {err.code.name}: {err.details}); the stream "
                        f"had broken with {broke.code.name}: {broke.details}") from None
                log.info("failover attempt %d failed (%s); next in %.2f s", attempts, err, pause)
                await asyncio.sleep(pause)
                backoff_s = min(backoff_s * 2, policy.max_backoff_s)
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
                await self._send(pb.ClientEvent(end=pb.End()))
                try:
                    await call.done_writing()
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    pass
        if not resent_any:
            self._end_gap()
        log.warning("voxpool call moved from %s to %s after %d attempt(s)", gap.from_session_id,
                    gap.to_session_id, attempts)

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
                await self._send(pb.ClientEvent(mark=pb.Mark(name=name, turn_id=turn.turn_id)))
            if cursor < len(text):
                await self._send_text_piece(turn, cursor, len(text))
            if turn.state == "complete":
                await self._send(pb.ClientEvent(flush=pb.Flush(turn_id=turn.turn_id)))
            resent_any = True
        return resent_any

    async def _send_text_piece(self, turn: _Turn, start: int, end: int) -> None:
        """Text [start, end) of the turn as one delta, with the spans that lie wholly inside it; the turn's options
        (rate, volume) go on the piece that opens it on this stream."""
        spans = [pb.TextSpan(start=s - start, end=e - start, kind=k) for s, e, k in turn.spans
                 if s >= start and e <= end]
        msg = pb.TextDelta(text=turn.heard.text[start:end], turn_id=turn.turn_id, spans=spans)
        if turn.options is not None and start == turn.base_char:
            msg.turn_options.CopyFrom(turn.options)
        await self._send(pb.ClientEvent(text=msg))

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
            await self._send(pb.ClientEvent(flush=pb.Flush(turn_id=turn.turn_id)))
        return True

    def _finish_locally(self, turn: _Turn) -> None:
        """A turn whose audio was all heard before a failover: its TurnDone, built here (server counters 0)."""
        self._out.append(TurnDone(turn.turn_id, 0, turn.speech_ms, 0, 0, 0, time.perf_counter()))
        self._turn_ended(turn)
        self._wake_reader()

    def _turn_ended(self, turn: _Turn) -> None:
        """Done, cleared or failed: the server forgets it (its id may open a new turn), and so does the journal."""
        turn.state = "ended"
        if self._turns.get(turn.turn_id) is turn:
            del self._turns[turn.turn_id]

    def _end_gap(self) -> None:
        """The new stream's first event: its media clock continues the caller's; report the gap per turn."""
        gap, self._gap = self._gap, None
        if gap is None:
            return
        self._pts_offset_ms = self._next_pts_ms
        self._seq_offset = self._next_seq
        if self.started.pacing == "REALTIME":
            gap_ms = gap.silence_frames * self.started.frame_ms
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
            out = Cleared(ev.turn_id, ev.last_pts_ms + off, prefix + ev.text_spoken, ev.text_remaining,
                          ev.dropped_audio_ms, ev.received_s)
            if turn is not None:
                self._turn_ended(turn)
        elif isinstance(ev, TurnDone):
            if turn is not None:
                if turn.failovers:
                    out = TurnDone(ev.turn_id, ev.ttfa_ms, turn.speech_ms, ev.underruns, ev.late_chunks, ev.chunks,
                                   ev.received_s)
                self._turn_ended(turn)
        elif isinstance(ev, TurnError):
            if turn is not None and ev.code in TURN_ENDING_ERRORS:
                self._turn_ended(turn)
        self._out.append(out)
