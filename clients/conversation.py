"""A Converse stream as the application sees it: the client's errors, the typed event records, and Conversation
(clients/client.py opens it; clients/failover.py extends it)."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import grpc

from protos.voxpool.v1 import tts_pb2 as pb

# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


class ClientConfigError(ValueError):
    """A bad argument caught on the client before anything was sent (unknown encoding, pacing, ...)."""


class VoxpoolError(Exception):
    """A call ended with a non-OK gRPC status. `retry_after_ms` carries the server's pushback, if any."""

    def __init__(self, code: grpc.StatusCode, details: str, retry_after_ms: int | None = None):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.retry_after_ms = retry_after_ms


class ServerUnavailable(VoxpoolError):
    """UNAVAILABLE: no server reachable (or every one is draining / not ready)."""


class InvalidRequest(VoxpoolError):
    """INVALID_ARGUMENT: the server rejected the config or the request; `details` says what to fix."""


class ServerBusy(VoxpoolError):
    """RESOURCE_EXHAUSTED: the server is full; retry after `retry_after_ms`."""


class ConversationClosed(RuntimeError):
    """An event was sent on a conversation after `end()` or after the stream finished."""


_ERROR_TYPES = {
    grpc.StatusCode.UNAVAILABLE: ServerUnavailable,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ServerBusy,
}


def error_from_rpc(err: grpc.aio.AioRpcError | grpc.RpcError) -> VoxpoolError:
    """The typed VoxpoolError for a gRPC error (reads `grpc-retry-pushback-ms` from the trailers)."""
    code = err.code() if callable(getattr(err, "code", None)) else grpc.StatusCode.UNKNOWN
    details = (err.details() if callable(getattr(err, "details", None)) else str(err)) or ""
    retry_after_ms = None
    trailers = err.trailing_metadata() if callable(getattr(err, "trailing_metadata", None)) else None
    for key, value in trailers or ():
        if key == "grpc-retry-pushback-ms":
            try:
                retry_after_ms = int(value)
            except (TypeError, ValueError):
                pass
    return _ERROR_TYPES.get(code, VoxpoolError)(code, details, retry_after_ms)


# ---------------------------------------------------------------------------------------------
# Server events as small typed records (each with `received_s`, time.perf_counter() at receipt)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VoiceInfo:
    """A voice offered by the server (ListVoices, SessionStarted.voice)."""

    name: str
    language: str
    sample_rate_hz: int
    license: str
    description: str
    is_default: bool


@dataclass(frozen=True, slots=True)
class Started:
    """First event of a stream: what the server will actually do. `raw` is the SessionStarted message
    (effective_config with every default filled in, limits)."""

    session_id: str
    voice: str
    encoding: str  # "PCMU" | "PCMA" | "L16"
    sample_rate_hz: int
    frame_ms: int
    frame_bytes: int
    pacing: str  # "REALTIME" | "ASAP"
    lead_ms: int
    server_version: str
    voice_info: VoiceInfo
    raw: pb.SessionStarted = field(repr=False, compare=False)
    received_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Audio:
    """One frame, exactly `duration_ms` long; `silence` marks pre-roll and underrun fill (still audio to play).
    Frames the server packed into one `audio_batch` event (SessionConfig.frames_per_event) arrive as one Audio each,
    in order, with the same `received_s`."""

    payload: bytes
    seq: int
    pts_ms: int
    duration_ms: int
    turn_id: str
    silence: bool
    received_s: float = 0.0


@dataclass(frozen=True, slots=True)
class TurnDone:
    """All of a flushed turn's audio was released; the numbers are the server's view. `ttfs_ms`: time to first
    speech (TTFA plus the media time to the first speech sample; 0 from a server that does not report it)."""

    turn_id: str
    ttfa_ms: int
    audio_ms: int
    underruns: int
    late_chunks: int
    chunks: int
    received_s: float = 0.0
    ttfs_ms: int = 0


@dataclass(frozen=True, slots=True)
class MarkReached:
    """The audio up to a Mark was released."""

    name: str
    turn_id: str
    pts_ms: int
    received_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Cleared:
    """Answer to Clear (one per cleared turn)."""

    turn_id: str
    last_pts_ms: int
    text_spoken: str
    text_remaining: str
    dropped_audio_ms: int
    received_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ServerWarning:
    """Something was ignored or adjusted; the turn goes on."""

    code: str
    message: str
    turn_id: str
    received_s: float = 0.0


@dataclass(frozen=True, slots=True)
class TurnError:
    """A turn failed in-band (its remaining text was dropped); the call goes on. `code` is the Error.Code name."""

    code: str
    message: str
    turn_id: str
    retryable: bool
    received_s: float = 0.0


@dataclass(frozen=True, slots=True)
class WordTime:
    """One word of a turn: its code-point span in the turn's text and its media time (AudioFrame.pts_ms clock)."""

    text: str
    start_char: int
    end_char: int
    start_pts_ms: int
    end_pts_ms: int


@dataclass(frozen=True, slots=True)
class Words:
    """Word timings of a turn (SessionConfig.word_timestamps), sent before the audio they describe."""

    turn_id: str
    words: tuple[WordTime, ...]
    received_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Failover:
    """Client-side record (never sent by a server): the stream broke mid-turn and this library carried the call to
    another ready server (FailoverPolicy). One per unfinished turn, delivered just before that turn's first event
    from the new server. `gap_ms`: REALTIME, the silence the caller had, in media time from the end of the last
    frame received from the old server to the first frame of the new one (the slots already missed when the break
    was seen, a jump of pts, then the flagged silence frames the library filled in, paced); ASAP, the wall time
    from the break to the new server's first event. `heard_text` + `resent_text` is the turn's text: the first was heard
    (whole words, by the word timings, else reached marks), the second was sent to the new server (a word heard
    only in part included). Media times, seq and turn ids go on as if nothing had happened."""

    turn_id: str
    gap_ms: int
    heard_text: str
    resent_text: str
    reason: str            # what broke, "UNAVAILABLE: Socket closed"
    from_session_id: str   # the stream that broke (SessionStarted.session_id; starts with the server's pid in hex)
    to_session_id: str     # the stream that took over
    attempts: int          # connection attempts it took (1 = the first worked)
    received_s: float = 0.0


Event = Union[Started, Audio, TurnDone, MarkReached, Cleared, ServerWarning, TurnError, Words, Failover]


@dataclass(frozen=True, slots=True)
class FailoverPolicy:
    """Failover of Converse calls (VoxpoolClient(failover=...)): when a stream breaks with UNAVAILABLE or a lost
    connection (or ends without finishing its turns), reopen it on another ready server and resend each unfinished
    turn's unheard remainder. Attempts are spaced by a backoff doubling from `first_backoff_s` up to
    `max_backoff_s`, each pause drawn at random from its upper `backoff_jitter` share ([b × (1 − jitter), b], so
    calls moved together do not retry together; the server's pushback, when longer, wins), at most `max_attempts`
    within `timeout_s`; then the call ends with ServerUnavailable. `open_timeout_s` bounds one attempt (config sent →
    `started`); an attempt unanswered after `hedge_after_s` gets another one beside it (None: never), the first
    to answer wins.

    A server that stops sending without closing the connection (frozen, partitioned) counts as lost too, with
    REALTIME pacing only: after `stall_timeout_s` without any message while a turn plays (the server sends a frame
    every frame_ms then, silence included), or `first_audio_timeout_s` while a turn whose text it has waits for its
    first frame. None turns a bound off (then only keepalive notices)."""

    enabled: bool = True
    max_attempts: int = 6
    first_backoff_s: float = 0.05
    max_backoff_s: float = 1.0
    timeout_s: float = 10.0
    open_timeout_s: float = 5.0
    backoff_jitter: float = 0.5
    hedge_after_s: float | None = 0.2
    stall_timeout_s: float | None = 0.8
    first_audio_timeout_s: float | None = 30.0


FAILOVER_OFF = FailoverPolicy(enabled=False)


def failover_policy(value: "bool | FailoverPolicy | None") -> FailoverPolicy:
    """A FailoverPolicy from the constructor's `failover` argument (True/None: the default policy, False: off)."""
    if isinstance(value, FailoverPolicy):
        return value
    return FAILOVER_OFF if value is False else FailoverPolicy()


def _voice_info(v: pb.Voice) -> VoiceInfo:
    return VoiceInfo(v.name, v.language, v.sample_rate_hz, v.license, v.description, v.is_default)


def _audio(a: pb.AudioFrame, received_s: float) -> Audio:
    return Audio(a.payload, a.seq, a.pts_ms, a.duration_ms, a.turn_id, a.silence, received_s)


def events_from_proto(msg: pb.ServerEvent, received_s: float = 0.0) -> list[Event]:
    """The typed records one ServerEvent carries: one Audio per frame of an `audio_batch`, else one record;
    raises ValueError on an empty event or batch."""
    if msg.WhichOneof("event") == "audio_batch":
        if not msg.audio_batch.frames:
            raise ValueError("ServerEvent carries an empty audio_batch")
        return [_audio(a, received_s) for a in msg.audio_batch.frames]
    return [event_from_proto(msg, received_s)]


def event_from_proto(msg: pb.ServerEvent, received_s: float = 0.0) -> Event:
    """Convert one ServerEvent into its typed record; raises ValueError on an empty event (an `audio_batch` holds
    several records: use events_from_proto)."""
    kind = msg.WhichOneof("event")
    if kind == "audio":
        return _audio(msg.audio, received_s)
    if kind == "audio_batch":
        raise ValueError("an audio_batch event holds several frames; read it with events_from_proto")
    if kind == "started":
        s = msg.started
        cfg = s.effective_config
        return Started(
            session_id=s.session_id, voice=cfg.voice,
            encoding=pb.AudioFormat.Encoding.Name(cfg.audio.encoding), sample_rate_hz=cfg.audio.sample_rate_hz,
            frame_ms=cfg.audio.frame_ms, frame_bytes=s.frame_bytes, pacing=pb.Pacing.Mode.Name(cfg.pacing.mode),
            lead_ms=cfg.pacing.lead_ms, server_version=s.server_version, voice_info=_voice_info(s.voice),
            raw=s, received_s=received_s,
        )
    if kind == "turn_done":
        d = msg.turn_done
        return TurnDone(d.turn_id, d.ttfa_ms, d.audio_ms, d.underruns, d.late_chunks, d.chunks, received_s,
                        ttfs_ms=d.ttfs_ms)
    if kind == "mark_reached":
        m = msg.mark_reached
        return MarkReached(m.name, m.turn_id, m.pts_ms, received_s)
    if kind == "cleared":
        c = msg.cleared
        return Cleared(c.turn_id, c.last_pts_ms, c.text_spoken, c.text_remaining, c.dropped_audio_ms, received_s)
    if kind == "warning":
        w = msg.warning
        return ServerWarning(w.code, w.message, w.turn_id, received_s)
    if kind == "error":
        e = msg.error
        return TurnError(pb.Error.Code.Name(e.code), e.message, e.turn_id, e.retryable, received_s)
    if kind == "words":
        w = msg.words
        return Words(w.turn_id, tuple(WordTime(x.text, x.start_char, x.end_char, x.start_pts_ms, x.end_pts_ms)
                                      for x in w.words), received_s)
    raise ValueError("ServerEvent carries no event")


TEXT_FORMATS = {"PLAIN": pb.TurnOptions.PLAIN, "SSML": pb.TurnOptions.SSML}


def named_choice(value: object, table: Mapping[str, int], what: str) -> int:
    """The proto enum value `table` maps `value` to (any case); ClientConfigError naming the choices otherwise."""
    key = str(value).upper()
    if key not in table:
        raise ClientConfigError(f"unknown {what} {value!r}; use one of {', '.join(table)}")
    return table[key]


def turn_options(text_format: str = "PLAIN", *, speaking_rate: float | None = None,
                 volume_db: float | None = None) -> pb.TurnOptions:
    """TurnOptions for the delta that opens a turn (or a Synthesize request): text_format "PLAIN" | "SSML" (any
    case; SSML: the turn's deltas joined are one SSML document, docs/ssml.md), the turn's rate and volume."""
    out = pb.TurnOptions(text_format=named_choice(text_format, TEXT_FORMATS, "text_format"))
    if speaking_rate is not None:
        out.speaking_rate = float(speaking_rate)
    if volume_db is not None:
        out.volume_db = float(volume_db)
    return out


def text_spans(spans: Sequence[tuple[int, int, str]] | None) -> list[pb.TextSpan]:
    """[(start, end, "TELEPHONE"), ...] → TextSpan messages (kind names as in TextSpan.Kind)."""
    out = []
    for start, end, kind in spans or ():
        try:
            k = pb.TextSpan.Kind.Value(str(kind).upper())
        except ValueError:
            raise ClientConfigError(f"unknown span kind {kind!r}") from None
        out.append(pb.TextSpan(start=int(start), end=int(end), kind=k))
    return out


# ---------------------------------------------------------------------------------------------
# One Converse stream
# ---------------------------------------------------------------------------------------------


class Conversation:
    """One Converse stream (one call leg). Obtain it from `VoxpoolClient.converse()`.

    Send with `send_text`, `flush`, `mark`, `clear`, `keepalive`, `end` (each returns time.perf_counter() right
    after the message was handed to gRPC); read the server's events with `async for event in conversation` (typed
    records: Audio, TurnDone, MarkReached, Cleared, ServerWarning, TurnError, Words). The iteration ends when the
    server closes the stream with OK (after `end()`, once every turn drained) and raises VoxpoolError on any
    other status. Reading and sending may happen in different tasks. `started` is the SessionStarted record.
    """

    def __init__(self, call: grpc.aio.StreamStreamCall, started: Started):
        self._call = call
        self.started = started
        self._ended = False
        self._finished = False
        self._unread: collections.deque[Event] = collections.deque()  # the rest of an audio_batch

    async def _write(self, event: pb.ClientEvent) -> float:
        if self._ended or self._finished:
            raise ConversationClosed("the conversation is closed (end() was sent or the stream finished)")
        try:
            await self._call.write(event)
        except grpc.aio.AioRpcError as err:
            self._finished = True
            raise error_from_rpc(err) from None
        except asyncio.InvalidStateError:
            self._finished = True
            raise ConversationClosed("the stream already finished") from None
        return time.perf_counter()

    async def send_text(self, delta: str, turn_id: str = "", spans: Sequence[tuple[int, int, str]] | None = None,
                        *, options: pb.TurnOptions | None = None) -> float:
        """Append text to a turn (empty turn_id: the open turn, or a new one). `options` (see `turn_options`) are
        read on the delta that opens the turn: send them there, e.g. turn_options("SSML") for an SSML turn whose
        document then streams in any pieces."""
        delta_msg = pb.TextDelta(text=delta, turn_id=turn_id, spans=text_spans(spans))
        if options is not None:
            delta_msg.turn_options.CopyFrom(options)
        return await self._write(pb.ClientEvent(text=delta_msg))

    async def send_ssml(self, document: str, turn_id: str = "", *, speaking_rate: float | None = None,
                        volume_db: float | None = None, flush: bool = True) -> float:
        """Send a whole SSML document as one turn (in deltas of at most Limits.max_delta_chars) and, by default,
        flush it. Bad SSML comes back as a TurnError with code INVALID_SSML naming the line and column."""
        options = turn_options("SSML", speaking_rate=speaking_rate, volume_db=volume_db)
        size = max(1, self.started.raw.limits.max_delta_chars or len(document) or 1)
        t = 0.0
        for i in range(0, max(1, len(document)), size):
            t = await self.send_text(document[i:i + size], turn_id, options=options)
        return await self.flush(turn_id) if flush else t

    async def flush(self, turn_id: str = "") -> float:
        """The turn's text is complete: synthesize the rest now."""
        return await self._write(pb.ClientEvent(flush=pb.Flush(turn_id=turn_id)))

    async def mark(self, name: str, turn_id: str = "") -> float:
        """A named position at the turn's current end of text; answered by MarkReached."""
        return await self._write(pb.ClientEvent(mark=pb.Mark(name=name, turn_id=turn_id)))

    async def clear(self, turn_id: str = "") -> float:
        """Barge-in: stop a turn (empty: every turn) now; answered by Cleared."""
        return await self._write(pb.ClientEvent(clear=pb.Clear(turn_id=turn_id)))

    async def keepalive(self) -> float:
        """The caller is still there (nothing to say yet): resets the stream's idle timeout, starts no turn.
        Counted against Limits.max_control_per_s; one per few seconds keeps a stream open."""
        return await self._write(pb.ClientEvent(keepalive=pb.Keepalive()))

    async def end(self) -> float:
        """No more input: the server drains every turn, then closes the stream with OK."""
        t = await self._write(pb.ClientEvent(end=pb.End()))
        self._ended = True
        try:
            await self._call.done_writing()
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass  # the status surfaces on the reading side
        return t

    def cancel(self) -> None:
        """Abandon the stream now (the server sees CANCELLED and frees the call)."""
        self._finished = True
        self._call.cancel()

    async def next_event(self) -> Event | None:
        """The next event, or None once the stream ended with OK."""
        if self._unread:
            return self._unread.popleft()
        try:
            msg = await self._call.read()
        except grpc.aio.AioRpcError as err:
            self._finished = True
            raise error_from_rpc(err) from None
        if msg is grpc.aio.EOF:
            self._finished = True
            code = await self._call.code()
            if code != grpc.StatusCode.OK:
                raise VoxpoolError(code, await self._call.details() or "")
            return None
        self._unread.extend(events_from_proto(msg, time.perf_counter()))
        return self._unread.popleft()

    def __aiter__(self) -> "Conversation":
        return self

    async def __anext__(self) -> Event:
        ev = await self.next_event()
        if ev is None:
            raise StopAsyncIteration
        return ev

    async def __aenter__(self) -> "Conversation":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if not self._finished:
            self.cancel()
