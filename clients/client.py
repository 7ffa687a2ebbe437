"""Client library for gateway code: async (grpc.aio) and sync access to the Tts API, with client-side balancing."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import grpc

from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc

log = logging.getLogger(__name__)

# Round robin over every address the target resolves to, skipping pods whose readiness is not SERVING
# (gRPC client-side health checking against the standard grpc.health.v1 service).
DEFAULT_SERVICE_CONFIG: dict[str, Any] = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": "voxpool.readiness"},
}
KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000

ENCODINGS = {"PCMU": pb.AudioFormat.PCMU, "PCMA": pb.AudioFormat.PCMA, "L16": pb.AudioFormat.L16}
PACINGS = {"REALTIME": pb.Pacing.REALTIME, "ASAP": pb.Pacing.ASAP}


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
    """One frame, exactly `duration_ms` long; `silence` marks pre-roll and underrun fill (still audio to play)."""

    payload: bytes
    seq: int
    pts_ms: int
    duration_ms: int
    turn_id: str
    silence: bool
    received_s: float = 0.0


@dataclass(frozen=True, slots=True)
class TurnDone:
    """All of a flushed turn's audio was released; the numbers are the server's view."""

    turn_id: str
    ttfa_ms: int
    audio_ms: int
    underruns: int
    late_chunks: int
    chunks: int
    received_s: float = 0.0


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


Event = Union[Started, Audio, TurnDone, MarkReached, Cleared, ServerWarning, TurnError, Words]


def _voice_info(v: pb.Voice) -> VoiceInfo:
    return VoiceInfo(v.name, v.language, v.sample_rate_hz, v.license, v.description, v.is_default)


def event_from_proto(msg: pb.ServerEvent, received_s: float = 0.0) -> Event:
    """Convert one ServerEvent into its typed record; raises ValueError on an empty event."""
    kind = msg.WhichOneof("event")
    if kind == "audio":
        a = msg.audio
        return Audio(a.payload, a.seq, a.pts_ms, a.duration_ms, a.turn_id, a.silence, received_s)
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
        return TurnDone(d.turn_id, d.ttfa_ms, d.audio_ms, d.underruns, d.late_chunks, d.chunks, received_s)
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


# ---------------------------------------------------------------------------------------------
# Building requests
# ---------------------------------------------------------------------------------------------


def audio_format(encoding: str = "PCMU", sample_rate_hz: int = 8000, frame_ms: int = 20,
                 fade_ms: int | None = None) -> pb.AudioFormat:
    """AudioFormat from plain values; encoding is "PCMU" | "PCMA" | "L16" (any case)."""
    key = str(encoding).upper()
    if key not in ENCODINGS:
        raise ClientConfigError(f"unknown encoding {encoding!r}; use one of {', '.join(ENCODINGS)}")
    fmt = pb.AudioFormat(encoding=ENCODINGS[key], sample_rate_hz=int(sample_rate_hz), frame_ms=int(frame_ms))
    if fade_ms is not None:
        fmt.fade_ms = int(fade_ms)
    return fmt


def pacing_proto(pacing: str, lead_ms: int | None = None) -> pb.Pacing:
    """Pacing from "REALTIME" | "ASAP" (any case) and an optional lead."""
    key = str(pacing).upper()
    if key not in PACINGS:
        raise ClientConfigError(f"unknown pacing {pacing!r}; use REALTIME or ASAP")
    out = pb.Pacing(mode=PACINGS[key])
    if lead_ms is not None:
        out.lead_ms = int(lead_ms)
    return out


def session_config(voice: str = "", encoding: str = "PCMU", sample_rate_hz: int = 8000, frame_ms: int = 20,
                   pacing: str = "REALTIME", *, lead_ms: int | None = None, preroll_ms: int = 0,
                   fade_ms: int | None = None, language: str = "", lexicon: Mapping[str, str] | None = None,
                   one_as_yao: bool | None = None, seed: int | None = None, word_timestamps: bool = False,
                   speaking_rate: float | None = None, volume_db: float | None = None) -> pb.SessionConfig:
    """The SessionConfig message for Converse (see tts.proto for every field's meaning and default)."""
    cfg = pb.SessionConfig(
        voice=voice, audio=audio_format(encoding, sample_rate_hz, frame_ms, fade_ms),
        pacing=pacing_proto(pacing, lead_ms), preroll_ms=int(preroll_ms), language=language,
        word_timestamps=bool(word_timestamps),
    )
    if lexicon:
        cfg.lexicon.update(dict(lexicon))
    if one_as_yao is not None:
        cfg.normalization.one_as_yao = bool(one_as_yao)
    if seed is not None:
        cfg.seed = int(seed)
    if speaking_rate is not None:
        cfg.speaking_rate = float(speaking_rate)
    if volume_db is not None:
        cfg.volume_db = float(volume_db)
    return cfg


TEXT_FORMATS = {"PLAIN": pb.TurnOptions.PLAIN, "SSML": pb.TurnOptions.SSML}


def turn_options(text_format: str = "PLAIN", *, speaking_rate: float | None = None,
                 volume_db: float | None = None) -> pb.TurnOptions:
    """TurnOptions for the delta that opens a turn (or a Synthesize request): text_format "PLAIN" | "SSML" (any
    case; SSML: the turn's deltas joined are one SSML document, docs/ssml.md), the turn's rate and volume."""
    key = str(text_format).upper()
    if key not in TEXT_FORMATS:
        raise ClientConfigError(f"unknown text_format {text_format!r}; use PLAIN or SSML")
    out = pb.TurnOptions(text_format=TEXT_FORMATS[key])
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


def channel_options(service_config: Mapping[str, Any] | str | None = None, *,
                    keepalive_time_ms: int = KEEPALIVE_TIME_MS, keepalive_timeout_ms: int = KEEPALIVE_TIMEOUT_MS,
                    extra: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """Channel arguments: the service config JSON (None: DEFAULT_SERVICE_CONFIG; "" disables it), retries
    enabled, HTTP/2 keepalive pings every `keepalive_time_ms` (the server allows one per 10 s)."""
    if service_config is None:
        service_config = DEFAULT_SERVICE_CONFIG
    opts: list[tuple[str, Any]] = [
        ("grpc.enable_retries", 1),
        ("grpc.keepalive_time_ms", int(keepalive_time_ms)),
        ("grpc.keepalive_timeout_ms", int(keepalive_timeout_ms)),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    if service_config:
        text = service_config if isinstance(service_config, str) else json.dumps(service_config)
        opts.append(("grpc.service_config", text))
    opts.extend(extra)
    return opts


# ---------------------------------------------------------------------------------------------
# Async client
# ---------------------------------------------------------------------------------------------


class Conversation:
    """One Converse stream (one call leg). Obtain it from `VoxpoolClient.converse()`.

    Send with `send_text`, `flush`, `mark`, `clear`, `end` (each returns time.perf_counter() right after the
    message was handed to gRPC); read the server's events with `async for event in conversation` (typed
    records: Audio, TurnDone, MarkReached, Cleared, ServerWarning, TurnError, Words). The iteration ends when the
    server closes the stream with OK (after `end()`, once every turn drained) and raises VoxpoolError on any
    other status. Reading and sending may happen in different tasks. `started` is the SessionStarted record.
    """

    def __init__(self, call: grpc.aio.StreamStreamCall, started: Started):
        self._call = call
        self.started = started
        self._ended = False
        self._finished = False

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
        return event_from_proto(msg, time.perf_counter())

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


class VoxpoolClient:
    """Async client over one grpc.aio channel (many concurrent calls share it; HTTP/2 multiplexing).

    In Kubernetes, point it at the pods, not at a ClusterIP: a headless Service gives one DNS A record per
    ready pod, and the default service config balances calls round robin over them, skipping pods whose
    `voxpool.readiness` health is not SERVING (draining, warming up)::

        client = VoxpoolClient("dns:///voxpool.NAMESPACE.svc.cluster.local:50051")

    tls: None/False = plaintext; True = TLS with the system roots; or grpc.ChannelCredentials.
    token: sent as `authorization: Bearer TOKEN` metadata on every call.
    service_config: dict or JSON text; None = DEFAULT_SERVICE_CONFIG; "" = none (pick_first).
    Use as `async with VoxpoolClient(target) as client:` or call `close()`.

    Events are the typed records of this module (Started, Audio, TurnDone, MarkReached, Cleared,
    ServerWarning, TurnError), each stamped with `received_s`; `Started.raw` keeps the full SessionStarted.
    One call leg, LLM tokens in, frames out::

        conv = await client.converse(encoding="PCMU", sample_rate_hz=8000, pacing="REALTIME")
        async def pump():
            async for token in llm_tokens():
                await conv.send_text(token)
            await conv.flush()
            await conv.end()
        asyncio.create_task(pump())
        async for ev in conv:
            if isinstance(ev, Audio):
                rtp.send(ev.payload)  # conv.started.frame_bytes bytes, one frame_ms each
    """

    def __init__(self, target: str, *, tls: bool | grpc.ChannelCredentials | None = None, token: str | None = None,
                 service_config: Mapping[str, Any] | str | None = None, keepalive_time_ms: int = KEEPALIVE_TIME_MS,
                 options: Sequence[tuple[str, Any]] = ()):
        self.target = target
        opts = channel_options(service_config, keepalive_time_ms=keepalive_time_ms, extra=options)
        if tls:
            creds = grpc.ssl_channel_credentials() if tls is True else tls
            self._channel = grpc.aio.secure_channel(target, creds, options=opts)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=opts)
        self._stub = tts_pb2_grpc.TtsStub(self._channel)
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._channel

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "VoxpoolClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def wait_ready(self, timeout_s: float = 5.0, *, fail_fast: bool = False) -> None:
        """Wait until at least one server is connected and ready; ServerUnavailable after `timeout_s`, or at the
        first connection failure with `fail_fast` (for command-line tools: "connection refused" needs no wait)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        state = self._channel.get_state(try_to_connect=True)
        while state != grpc.ChannelConnectivity.READY:
            if fail_fast and state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                raise ServerUnavailable(grpc.StatusCode.UNAVAILABLE,
                                        f"cannot connect to {self.target}, or no server there is ready")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ServerUnavailable(grpc.StatusCode.UNAVAILABLE,
                                        f"no ready voxpool server at {self.target} within {timeout_s:g} s")
            try:
                await asyncio.wait_for(self._channel.wait_for_state_change(state), remaining)
            except asyncio.TimeoutError:
                pass
            state = self._channel.get_state(try_to_connect=True)

    async def synthesize(self, text: str, voice: str = "", encoding: str = "PCMU", sample_rate_hz: int = 8000,
                         frame_ms: int = 20, pacing: str = "ASAP", *, lead_ms: int | None = None,
                         preroll_ms: int = 0, spans: Sequence[tuple[int, int, str]] | None = None,
                         lexicon: Mapping[str, str] | None = None, seed: int | None = None,
                         ssml: bool = False, speaking_rate: float | None = None, volume_db: float | None = None,
                         word_timestamps: bool = False, timeout_s: float | None = None) -> AsyncIterator[Event]:
        """Speak one text: yields Started, the Audio frames (with Words before them when `word_timestamps`),
        then TurnDone (or TurnError). `ssml`: the text is an SSML document (docs/ssml.md).

        Raises VoxpoolError (InvalidRequest, ServerBusy, ServerUnavailable, ...) on a non-OK status; malformed SSML
        is InvalidRequest, its details naming the line and column.
        """
        req = pb.SynthesizeRequest(
            text=text, voice=voice, audio=audio_format(encoding, sample_rate_hz, frame_ms),
            spans=text_spans(spans), pacing=pacing_proto(pacing, lead_ms), preroll_ms=int(preroll_ms),
            word_timestamps=bool(word_timestamps),
        )
        if ssml or speaking_rate is not None or volume_db is not None:
            req.options.CopyFrom(turn_options("SSML" if ssml else "PLAIN", speaking_rate=speaking_rate,
                                              volume_db=volume_db))
        if lexicon:
            req.lexicon.update(dict(lexicon))
        if seed is not None:
            req.seed = int(seed)
        call = self._stub.Synthesize(req, timeout=timeout_s, metadata=self._metadata)
        try:
            while True:
                try:
                    msg = await call.read()
                except grpc.aio.AioRpcError as err:
                    raise error_from_rpc(err) from None
                if msg is grpc.aio.EOF:
                    code = await call.code()
                    if code != grpc.StatusCode.OK:
                        raise VoxpoolError(code, await call.details() or "")
                    return
                yield event_from_proto(msg, time.perf_counter())
        finally:
            if not call.done():
                call.cancel()

    async def converse(self, voice: str = "", encoding: str = "PCMU", sample_rate_hz: int = 8000, frame_ms: int = 20,
                       pacing: str = "REALTIME", *, config: pb.SessionConfig | None = None,
                       timeout_s: float | None = None, **config_kw: Any) -> Conversation:
        """Open a Converse stream, send the session config and wait for `started`.

        `config` (a ready SessionConfig) wins over the plain arguments; `config_kw` go to `session_config`
        (lead_ms, preroll_ms, fade_ms, language, lexicon, one_as_yao, seed, word_timestamps, speaking_rate,
        volume_db). `timeout_s` bounds the whole stream.
        """
        if config is None:
            config = session_config(voice, encoding, sample_rate_hz, frame_ms, pacing, **config_kw)
        call = self._stub.Converse(timeout=timeout_s, metadata=self._metadata)
        conv = Conversation(call, started=None)  # type: ignore[arg-type]
        try:
            await conv._write(pb.ClientEvent(config=config))
            first = await conv.next_event()
        except BaseException:
            call.cancel()
            raise
        if not isinstance(first, Started):
            call.cancel()
            raise VoxpoolError(grpc.StatusCode.INTERNAL, f"expected `started` first, got {type(first).__name__}")
        conv.started = first
        return conv

    async def list_voices(self, language: str = "", timeout_s: float | None = 10.0) -> list[VoiceInfo]:
        """The server's voices (language: BCP-47 prefix filter, "cmn"; empty = all)."""
        try:
            resp = await self._stub.ListVoices(pb.ListVoicesRequest(language=language), timeout=timeout_s,
                                               metadata=self._metadata)
        except grpc.aio.AioRpcError as err:
            raise error_from_rpc(err) from None
        return [_voice_info(v) for v in resp.voices]

    async def normalize(self, text: str, voice: str = "", *, lexicon: Mapping[str, str] | None = None,
                        spans: Sequence[tuple[int, int, str]] | None = None,
                        timeout_s: float | None = 10.0) -> pb.NormalizeResponse:
        """Dry run of the front end: normalized_text, pinyin, ids (the NormalizeResponse message)."""
        req = pb.NormalizeRequest(text=text, voice=voice, spans=text_spans(spans))
        if lexicon:
            req.lexicon.update(dict(lexicon))
        try:
            return await self._stub.Normalize(req, timeout=timeout_s, metadata=self._metadata)
        except grpc.aio.AioRpcError as err:
            raise error_from_rpc(err) from None


# ---------------------------------------------------------------------------------------------
# Sync wrapper (scripts): the async client on a private event loop in a daemon thread
# ---------------------------------------------------------------------------------------------


class SyncConversation:
    """Blocking view of a Conversation (from `SyncVoxpoolClient.converse`); iterate it for the events."""

    def __init__(self, owner: "SyncVoxpoolClient", conv: Conversation):
        self._owner = owner
        self._conv = conv
        self.started = conv.started

    def send_text(self, delta: str, turn_id: str = "", spans: Sequence[tuple[int, int, str]] | None = None, *,
                  options: pb.TurnOptions | None = None) -> float:
        return self._owner._run(self._conv.send_text(delta, turn_id, spans, options=options))

    def send_ssml(self, document: str, turn_id: str = "", **kw: Any) -> float:
        return self._owner._run(self._conv.send_ssml(document, turn_id, **kw))

    def flush(self, turn_id: str = "") -> float:
        return self._owner._run(self._conv.flush(turn_id))

    def mark(self, name: str, turn_id: str = "") -> float:
        return self._owner._run(self._conv.mark(name, turn_id))

    def clear(self, turn_id: str = "") -> float:
        return self._owner._run(self._conv.clear(turn_id))

    def end(self) -> float:
        return self._owner._run(self._conv.end())

    def cancel(self) -> None:
        self._owner._loop.call_soon_threadsafe(self._conv.cancel)

    def __iter__(self) -> Iterator[Event]:
        while True:
            ev = self._owner._run(self._conv.next_event())
            if ev is None:
                return
            yield ev


class SyncVoxpoolClient:
    """Blocking client for scripts: same constructor and methods as VoxpoolClient, without `await`.

    `synthesize(...)` returns an iterator of events; `converse(...)` a SyncConversation. Close it (or use
    `with SyncVoxpoolClient(target) as client:`) to stop its background thread.
    """

    def __init__(self, target: str, **kw: Any):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="voxpool-client", daemon=True)
        self._thread.start()

        async def make() -> VoxpoolClient:
            return VoxpoolClient(target, **kw)

        self._client = self._run(make())

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def target(self) -> str:
        return self._client.target

    def wait_ready(self, timeout_s: float = 5.0) -> None:
        self._run(self._client.wait_ready(timeout_s))

    def synthesize(self, text: str, **kw: Any) -> Iterator[Event]:
        agen = self._client.synthesize(text, **kw)
        try:
            while True:
                try:
                    yield self._run(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._run(agen.aclose())

    def converse(self, *args: Any, **kw: Any) -> SyncConversation:
        return SyncConversation(self, self._run(self._client.converse(*args, **kw)))

    def list_voices(self, language: str = "", timeout_s: float | None = 10.0) -> list[VoiceInfo]:
        return self._run(self._client.list_voices(language, timeout_s))

    def normalize(self, text: str, voice: str = "", **kw: Any) -> pb.NormalizeResponse:
        return self._run(self._client.normalize(text, voice, **kw))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> "SyncVoxpoolClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
