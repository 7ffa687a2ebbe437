"""LiveKit Agents TTS plugin backed by voxpool: streaming (one voxpool turn per stream) and one-shot synthesis."""

from __future__ import annotations

import asyncio
import logging
import uuid

from livekit.agents import tts
from livekit.agents import APIConnectionError, APIError, APIStatusError, APITimeoutError
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions, TimedString

from clients.client import (
    Audio,
    Cleared,
    InvalidRequest,
    ServerWarning,
    ServerBusy,
    TurnDone,
    TurnError,
    VoxpoolClient,
    VoxpoolError,
    session_config,
)
from clients.integrations.session import SessionEvent, StreamBroken, TurnWords, VoxpoolSession
from protos.voxpool.v1 import wire

log = logging.getLogger(__name__)

MIME_PCM = "audio/pcm"
FRAME_MS = 20  # LiveKit re-chunks pushed PCM into frames this long (its default, 200 ms, would delay first audio)


def api_error(err: VoxpoolError) -> APIError:
    """The LiveKit error for a voxpool status: bad requests are not retried, a lost server is."""
    if isinstance(err, InvalidRequest):
        return APIStatusError(f"voxpool rejected the request: {err.details}", status_code=400, retryable=False)
    if isinstance(err, ServerBusy):
        return APIStatusError(f"voxpool is full: {err.details}", status_code=429, retryable=True)
    return APIConnectionError(f"voxpool stream failed ({err}); a new stream reconnects", retryable=True)


class VoxpoolTTS(tts.TTS):
    """voxpool as a LiveKit Agents TTS: `stream()` sends text as it is pushed (one voxpool turn per stream, all
    streams sharing one Converse call) with word-aligned transcripts; `synthesize()` uses the Synthesize RPC.

    Audio is 16-bit PCM at `sample_rate` (any rate in protos.voxpool.v1.wire.SAMPLE_RATES_HZ, 8 to 48 kHz), mono,
    released as fast as synthesized (LiveKit paces playback).
    """

    def __init__(self, *, target: str = "localhost:50051", voice: str = "", sample_rate: int = 24000,
                 client: VoxpoolClient | None = None, lexicon: dict[str, str] | None = None):
        if sample_rate not in wire.SAMPLE_RATES_HZ:
            raise ValueError(f"voxpool sends {wire.sample_rates_text()} Hz audio, not {sample_rate} Hz")
        super().__init__(capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=True),
                         sample_rate=sample_rate, num_channels=1)
        self._target = target
        self._voice = voice
        self._own_client = client is None
        self._client = client
        self._lexicon = dict(lexicon or {})
        self._session: VoxpoolSession | None = None
        self._routes: dict[str, asyncio.Queue[SessionEvent]] = {}
        self.heard: dict[str, Cleared] = {}

    @property
    def model(self) -> str:
        return self._voice or "default"

    @property
    def provider(self) -> str:
        return "voxpool"

    @property
    def session(self) -> VoxpoolSession | None:
        return self._session

    def client(self) -> VoxpoolClient:
        if self._client is None:
            # VoxpoolSession reopens a broken stream itself (StreamBroken → APIConnectionError): no library failover
            self._client = VoxpoolClient(self._target, service_config="", failover=False)
        return self._client

    def shared_session(self) -> VoxpoolSession:
        if self._session is None:
            cfg = session_config(self._voice, "L16", self.sample_rate, wire.fitting_frame_ms(self.sample_rate), "ASAP",
                                 lexicon=self._lexicon)
            self._session = VoxpoolSession(self.client(), cfg, self._route)
        return self._session

    def subscribe(self, turn_id: str) -> asyncio.Queue[SessionEvent]:
        q: asyncio.Queue[SessionEvent] = asyncio.Queue()
        self._routes[turn_id] = q
        return q

    def unsubscribe(self, turn_id: str) -> None:
        self._routes.pop(turn_id, None)

    async def _route(self, ev: SessionEvent) -> None:
        if isinstance(ev, ServerWarning):  # the turn goes on (an SSML element ignored, a reading adjusted)
            log.warning("voxpool turn %s: %s: %s", ev.turn_id, ev.code, ev.message)
            return
        if isinstance(ev, StreamBroken):
            for q in self._routes.values():
                q.put_nowait(ev)
            return
        if isinstance(ev, Cleared):
            self.heard[ev.turn_id] = ev
        q = self._routes.get(getattr(ev, "turn_id", ""))
        if q is not None:
            q.put_nowait(ev)

    def synthesize(self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
                   ) -> "VoxpoolChunkedStream":
        return VoxpoolChunkedStream(tts=self, input_text=text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> "VoxpoolSynthesizeStream":
        return VoxpoolSynthesizeStream(tts=self, conn_options=conn_options)

    def prewarm(self) -> None:
        asyncio.get_running_loop().create_task(self._prewarm())

    async def _prewarm(self) -> None:
        try:
            await self.shared_session().open()
        except VoxpoolError as err:
            log.warning("voxpool prewarm failed: %s", err)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._own_client and self._client is not None:
            await self._client.close()
            self._client = None


class VoxpoolChunkedStream(tts.ChunkedStream):
    """One text through the Synthesize RPC (16-bit PCM frames as they are synthesized)."""

    def __init__(self, *, tts: VoxpoolTTS, input_text: str, conn_options: APIConnectOptions):
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._vtts = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(request_id=uuid.uuid4().hex, sample_rate=self._vtts.sample_rate, num_channels=1,
                                  mime_type=MIME_PCM)
        try:
            async for ev in self._vtts.client().synthesize(
                    self.input_text, voice=self._vtts._voice, encoding="L16", sample_rate_hz=self._vtts.sample_rate,
                    frame_ms=wire.fitting_frame_ms(self._vtts.sample_rate), lexicon=self._vtts._lexicon or None,
                    timeout_s=self._conn_options.timeout * 10):
                if isinstance(ev, Audio) and not ev.silence:
                    output_emitter.push(ev.payload)
                elif isinstance(ev, TurnError):
                    raise APIError(f"voxpool: {ev.code}: {ev.message}", retryable=ev.retryable)
        except VoxpoolError as err:
            raise api_error(err) from err
        output_emitter.flush()


class VoxpoolSynthesizeStream(tts.SynthesizeStream):
    """Text pushed as it arrives goes to one voxpool turn; `flush()`/`end_input()` complete it."""

    def __init__(self, *, tts: VoxpoolTTS, conn_options: APIConnectOptions):
        super().__init__(tts=tts, conn_options=conn_options)
        self._vtts = tts
        self.turn_id = ""

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        self.turn_id = f"lk-{uuid.uuid4().hex[:12]}"
        session = self._vtts.shared_session()
        output_emitter.initialize(request_id=self.turn_id, sample_rate=self._vtts.sample_rate, num_channels=1,
                                  mime_type=MIME_PCM, frame_size_ms=FRAME_MS, stream=True)
        events = self._vtts.subscribe(self.turn_id)
        sent_text = asyncio.Event()
        input_done = asyncio.Event()
        finished = False
        loop = asyncio.get_running_loop()
        timeout_s = self._conn_options.timeout
        # conn_options.timeout bounds each wait on voxpool: a send (the stream's opening included), and the next
        # event while voxpool owes one (text sent since its last event, or the turn flushed)
        last_sent_s, last_event_s, flushed = 0.0, 0.0, False

        async def bounded(op) -> None:
            nonlocal last_sent_s
            try:
                await asyncio.wait_for(op, timeout_s)
            except asyncio.TimeoutError:
                raise APITimeoutError(f"voxpool did not take the text within {timeout_s:g} s "
                                      "(conn_options.timeout)") from None
            last_sent_s = loop.time()

        async def send() -> None:
            nonlocal flushed
            async for data in self._input_ch:
                if isinstance(data, self._FlushSentinel):
                    if sent_text.is_set() and not flushed:
                        await bounded(session.flush(self.turn_id))
                        flushed = True
                    continue
                if flushed:
                    continue  # one segment per stream (LiveKit drops a second one with a warning)
                if not sent_text.is_set():
                    output_emitter.start_segment(segment_id=self.turn_id)
                    self._mark_started()
                await bounded(session.send_text(self.turn_id, data))
                sent_text.set()
            input_done.set()

        async def next_event() -> SessionEvent:
            nonlocal last_event_s
            while True:
                owed = flushed or last_sent_s > last_event_s
                wait_s = max(last_sent_s, last_event_s) + timeout_s - loop.time() if owed else timeout_s
                if wait_s <= 0:
                    raise APITimeoutError(f"voxpool sent nothing for {timeout_s:g} s (conn_options.timeout)")
                try:
                    ev = await asyncio.wait_for(events.get(), wait_s)
                except asyncio.TimeoutError:
                    continue  # more text may have been sent meanwhile: wait from then
                last_event_s = loop.time()
                return ev

        async def receive() -> None:
            nonlocal finished
            await sent_text.wait()
            while True:
                ev = await next_event()
                if isinstance(ev, Audio):
                    if not ev.silence:
                        output_emitter.push(ev.payload)
                elif isinstance(ev, TurnWords):
                    output_emitter.push_timed_transcript(
                        [TimedString(w.text, start_time=w.start_s, end_time=w.end_s) for w in ev.words])
                elif isinstance(ev, TurnDone):
                    finished = True
                    output_emitter.end_segment()
                    return
                elif isinstance(ev, TurnError):
                    finished = True
                    raise APIError(f"voxpool turn failed: {ev.code}: {ev.message}", retryable=ev.retryable)
                elif isinstance(ev, StreamBroken):
                    finished = True
                    raise api_error(ev.error)

        send_task = asyncio.create_task(send())
        recv_task = asyncio.create_task(receive())
        try:
            # a timeout or a broken stream on the receiving side ends the attempt even while text is still coming
            done, _ = await asyncio.wait({send_task, recv_task}, return_when=asyncio.FIRST_COMPLETED)
            if recv_task in done:
                recv_task.result()
                return
            try:
                send_task.result()
            except VoxpoolError as err:
                raise api_error(err) from err
            if not sent_text.is_set():
                return  # no text at all: nothing to say
            await recv_task
        finally:
            for t in (send_task, recv_task):
                if not t.done():
                    t.cancel()
            await asyncio.gather(send_task, recv_task, return_exceptions=True)
            self._vtts.unsubscribe(self.turn_id)
            if not finished and sent_text.is_set() and session.has_turn(self.turn_id):
                # closed before the turn finished (interruption): stop it on the server now
                try:
                    await asyncio.shield(session.clear(self.turn_id))
                except (VoxpoolError, asyncio.CancelledError) as err:
                    log.debug("voxpool: clear of %s failed: %s", self.turn_id, err)
