"""Client library for gateway code: async (grpc.aio) and sync access to the Tts API, with client-side balancing."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import grpc

# The records, errors and Conversation live in clients/conversation.py; they are imported from here as before.
from clients.conversation import (  # noqa: F401
    FAILOVER_OFF,
    Audio,
    Cleared,
    ClientConfigError,
    Conversation,
    ConversationClosed,
    Event,
    Failover,
    FailoverPolicy,
    InvalidRequest,
    MarkReached,
    ServerBusy,
    ServerUnavailable,
    ServerWarning,
    Started,
    TurnDone,
    TurnError,
    VoiceInfo,
    VoxpoolError,
    WordTime,
    Words,
    _voice_info,
    error_from_rpc,
    event_from_proto,
    events_from_proto,
    failover_policy,
    named_choice,
    text_spans,
    turn_options,
)
from clients.failover import FailoverConversation, transport_lost
from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc

log = logging.getLogger(__name__)

# Round robin over every address the target resolves to, skipping pods whose readiness is not SERVING
# (gRPC client-side health checking against the standard grpc.health.v1 service).
DEFAULT_SERVICE_CONFIG: dict[str, Any] = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": "voxpool.readiness"},
}
# Pauses before opening a Converse stream again when its connection was already gone (see converse()).
OPEN_RETRY_PAUSES_S = (0.05, 0.25)
KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000

ENCODINGS = {"PCMU": pb.AudioFormat.PCMU, "PCMA": pb.AudioFormat.PCMA, "L16": pb.AudioFormat.L16}
PACINGS = {"REALTIME": pb.Pacing.REALTIME, "ASAP": pb.Pacing.ASAP}


# ---------------------------------------------------------------------------------------------
# Building requests
# ---------------------------------------------------------------------------------------------


def audio_format(encoding: str = "PCMU", sample_rate_hz: int = 8000, frame_ms: int = 20,
                 fade_ms: int | None = None) -> pb.AudioFormat:
    """AudioFormat from plain values; encoding is "PCMU" | "PCMA" | "L16" (any case)."""
    fmt = pb.AudioFormat(encoding=named_choice(encoding, ENCODINGS, "encoding"), sample_rate_hz=int(sample_rate_hz),
                         frame_ms=int(frame_ms))
    if fade_ms is not None:
        fmt.fade_ms = int(fade_ms)
    return fmt


def pacing_proto(pacing: str, lead_ms: int | None = None) -> pb.Pacing:
    """Pacing from "REALTIME" | "ASAP" (any case) and an optional lead."""
    out = pb.Pacing(mode=named_choice(pacing, PACINGS, "pacing"))
    if lead_ms is not None:
        out.lead_ms = int(lead_ms)
    return out


def session_config(voice: str = "", encoding: str = "PCMU", sample_rate_hz: int = 8000, frame_ms: int = 20,
                   pacing: str = "REALTIME", *, lead_ms: int | None = None, preroll_ms: int = 0,
                   fade_ms: int | None = None, language: str = "", lexicon: Mapping[str, str] | None = None,
                   one_as_yao: bool | None = None, seed: int | None = None, word_timestamps: bool = False,
                   speaking_rate: float | None = None, volume_db: float | None = None,
                   frames_per_event: int = 1) -> pb.SessionConfig:
    """The SessionConfig message for Converse (see tts.proto for every field's meaning and default).
    `frames_per_event` > 1 asks for audio frames packed into `audio_batch` events (REALTIME: lead_ms must be at
    least frames_per_event × frame_ms); this library reads both forms as the same Audio records."""
    cfg = pb.SessionConfig(
        voice=voice, audio=audio_format(encoding, sample_rate_hz, frame_ms, fade_ms),
        pacing=pacing_proto(pacing, lead_ms), preroll_ms=int(preroll_ms), language=language,
        word_timestamps=bool(word_timestamps), frames_per_event=int(frames_per_event),
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


class VoxpoolClient:
    """Async client over one grpc.aio channel (many concurrent calls share it; HTTP/2 multiplexing).

    In Kubernetes, point it at the pods, not at a ClusterIP: a headless Service gives one DNS A record per
    ready pod, and the default service config balances calls round robin over them, skipping pods whose
    `voxpool.readiness` health is not SERVING (draining, warming up)::

        client = VoxpoolClient("dns:///voxpool.NAMESPACE.svc.cluster.local:50051")

    tls: None/False = plaintext; True = TLS with the system roots; or grpc.ChannelCredentials.
    token: sent as `authorization: Bearer TOKEN` metadata on every call.
    service_config: dict or JSON text; None = DEFAULT_SERVICE_CONFIG; "" = none (pick_first).
    failover: True (default) = Converse calls survive a lost server (FailoverPolicy; a `Failover` record reports
    each one); False = a broken stream raises VoxpoolError at once; or a FailoverPolicy. `converse(failover=...)`
    overrides it per call.
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
                 options: Sequence[tuple[str, Any]] = (), failover: bool | FailoverPolicy = True):
        self.target = target
        self.failover = failover_policy(failover)
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

    def converse_call(self, timeout_s: float | None = None) -> grpc.aio.StreamStreamCall:
        """A raw Converse call on this client's channel, with its credentials (nothing sent yet)."""
        return self._stub.Converse(timeout=timeout_s, metadata=self._metadata)

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
                         word_timestamps: bool = False, frames_per_event: int = 1,
                         timeout_s: float | None = None) -> AsyncIterator[Event]:
        """Speak one text: yields Started, the Audio frames (with Words before them when `word_timestamps`),
        then TurnDone (or TurnError). `ssml`: the text is an SSML document (docs/ssml.md).

        Raises VoxpoolError (InvalidRequest, ServerBusy, ServerUnavailable, ...) on a non-OK status; malformed SSML
        is InvalidRequest, its details naming the line and column.
        """
        req = pb.SynthesizeRequest(
            text=text, voice=voice, audio=audio_format(encoding, sample_rate_hz, frame_ms),
            spans=text_spans(spans), pacing=pacing_proto(pacing, lead_ms), preroll_ms=int(preroll_ms),
            word_timestamps=bool(word_timestamps), frames_per_event=int(frames_per_event),
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
                for ev in events_from_proto(msg, time.perf_counter()):
                    yield ev
        finally:
            if not call.done():
                call.cancel()

    async def converse(self, voice: str = "", encoding: str = "PCMU", sample_rate_hz: int = 8000, frame_ms: int = 20,
                       pacing: str = "REALTIME", *, config: pb.SessionConfig | None = None,
                       timeout_s: float | None = None, failover: bool | FailoverPolicy | None = None,
                       **config_kw: Any) -> Conversation:
        """Open a Converse stream, send the session config and wait for `started`.

        `config` (a ready SessionConfig) wins over the plain arguments; `config_kw` go to `session_config`
        (lead_ms, preroll_ms, fade_ms, language, lexicon, one_as_yao, seed, word_timestamps, speaking_rate,
        volume_db, frames_per_event). `timeout_s` bounds the whole stream
        (each stream after a failover gets what is left of it). `failover`: None = the client's policy.
        """
        if config is None:
            config = session_config(voice, encoding, sample_rate_hz, frame_ms, pacing, **config_kw)
        policy = self.failover if failover is None else failover_policy(failover)
        pauses_s = iter(OPEN_RETRY_PAUSES_S)
        while True:
            try:
                if policy.enabled:
                    return await FailoverConversation.open(self, config, policy, timeout_s)
                return await self._open_conversation(config, timeout_s)
            except VoxpoolError as err:
                # A new call can land on a connection that has just failed (the channel has not seen it yet):
                # gRPC core then fails it at once. Nothing of the caller's was sent but the config, so opening
                # again is safe; a server's own answer (overload, drain, bad config) is never retried here.
                pause_s = next(pauses_s, None)
                if pause_s is None or not transport_lost(err):
                    raise
                log.info("converse: the new stream's connection was gone (%s); opening again", err.details)
            await asyncio.sleep(pause_s)

    async def _open_conversation(self, config: pb.SessionConfig, timeout_s: float | None) -> Conversation:
        """One Converse stream without failover: send the config, wait for `started`."""
        call = self.converse_call(timeout_s)
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
