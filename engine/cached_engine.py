"""CachingEngine: AsyncEngine's interface with an exact segment-audio cache in front (hits skip the engine; misses single-flight)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import logging
import weakref
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from engine.audio_cache import AudioCache, CachedSegment, CacheKey
from engine.core import Health
from engine.errors import EngineStopped, InvalidRequest
from engine.output import OutputStream
from engine.request import AudioChunk, Finished, FinishReason, RequestTimings, SynthesisRequest, now_s
from engine.telemetry import EngineCounters

if TYPE_CHECKING:
    from engine.async_engine import AsyncEngine
    from models.voices.bundle import Voice

logger = logging.getLogger(__name__)

# EngineConfig fields that change the audio of a given request (the rest change scheduling only).
AUDIO_ENGINE_SETTINGS = ("device", "dtype", "weights", "prenet_dropout", "vocoder_dtype")

_force_admit: contextvars.ContextVar[bool] = contextvars.ContextVar("voxpool_cache_force_admit", default=False)


@contextlib.contextmanager
def warming() -> Iterator[None]:
    """Requests submitted in this context (and tasks it starts) are stored without the second-sighting rule."""
    token = _force_admit.set(True)
    try:
        yield
    finally:
        _force_admit.reset(token)


def model_fingerprint(voice: "Voice", engine_settings: Mapping[str, Any]) -> str:
    """Hex digest of a voice's weights, symbols, rate and metadata, and of the engine settings that change audio."""
    import torch

    h = hashlib.blake2b(digest_size=16)
    meta = {"name": voice.name, "rate_hz": voice.sample_rate_hz, "symbols": list(voice.symbols),
            "weights": voice.weights, "meta": voice.meta, "engine": dict(engine_settings)}
    h.update(json.dumps(meta, sort_keys=True, default=str).encode("utf-8"))
    for role, model in (("acoustic", voice.acoustic), ("vocoder", voice.vocoder)):
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            t = tensor.detach()
            if t.is_quantized:
                t = t.int_repr()
            h.update(f"{role}.{name}:{t.dtype}:{tuple(t.shape)}".encode("utf-8"))
            h.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class _Flight:
    """One engine request shared by every identical request submitted while it runs."""

    def __init__(self, key: CacheKey, engine_stream: OutputStream, force: bool) -> None:
        self.key = key
        self.engine_stream = engine_stream
        self.force = force
        self.subscribers: dict[str, OutputStream] = {}
        self.chunks: list[AudioChunk] = []
        self.task: asyncio.Task[None] | None = None
        self.done = False


class CachingEngine:
    """Drop-in for AsyncEngine (submit, cancel, start, health, counters, drain, stop, backend).

    `submit` looks the request up by `CacheKey` (resolved voice, the voice's model fingerprint, ids, seed and
    every audio option). A hit returns an OutputStream already holding the cached chunks and a
    Finished(COMPLETED): the same events, alignment and chunk boundaries as the synthesis that filled it,
    without entering the engine. A miss joins the identical request in flight, if any, or submits one to the
    engine; a pump task fans the engine's events out to every subscriber (a late joiner first gets the
    chunks so far). A subscriber that closes leaves alone; the engine request is cancelled only when the last
    one leaves. A failed synthesis fails every subscriber with the same error and is not stored; a completed
    one is offered to the cache (AudioCache decides admission).

    All methods run on the event loop's thread, like AsyncEngine's.
    """

    def __init__(self, engine: "AsyncEngine", cache: AudioCache, default_voice: str,
                 voices: Mapping[str, "Voice"] | None = None, model_versions: Mapping[str, str] | None = None) -> None:
        """`voices` are fingerprinted at start (model_fingerprint); `model_versions` gives versions directly."""
        self.engine = engine
        self.cache = cache
        self.voices = dict(voices or {})
        self.default_voice = default_voice
        self.model_versions: dict[str, str] = dict(model_versions or {})
        self._flights: dict[CacheKey, _Flight] = {}
        self._live: dict[str, _Flight] = {}  # request id → its flight (subscribers still attached)
        self._replays: weakref.WeakValueDictionary[str, OutputStream] = weakref.WeakValueDictionary()

    @property
    def backend(self) -> Any:
        """The engine's backend (telemetry reads its observers and config)."""
        return self.engine.backend

    @property
    def in_flight(self) -> int:
        """Distinct syntheses running for the cache (each may serve several requests)."""
        return len(self._flights)

    def _engine_settings(self) -> dict[str, Any]:
        config = getattr(self.backend, "config", None)
        settings = {name: getattr(config, name, None) for name in AUDIO_ENGINE_SETTINGS}
        if config is not None:  # what `auto` means on this machine changes the audio
            settings["vocoder_dtype"] = config.resolved_vocoder_dtype()
        return settings

    async def start(self, warmup: bool = True) -> None:
        """Fingerprint each voice (off the loop), then start the engine."""
        loop = asyncio.get_running_loop()
        settings = self._engine_settings()
        for name, voice in self.voices.items():
            if name not in self.model_versions:
                self.model_versions[name] = await loop.run_in_executor(None, model_fingerprint, voice, settings)
        await self.engine.start(warmup)

    def key_for(self, request: SynthesisRequest) -> CacheKey:
        """The cache key of a request; InvalidRequest for a voice this engine does not serve."""
        voice = request.voice or self.default_voice
        version = self.model_versions.get(voice)
        if version is None:
            if voice not in self.voices:
                raise InvalidRequest(f"unknown voice {request.voice!r}; this engine serves "
                                     f"{sorted({*self.voices, *self.model_versions})}",
                                     request_id=request.request_id)
            raise InvalidRequest("the engine has not started", request_id=request.request_id)
        return CacheKey.of(request, voice, version)

    def submit(self, request: SynthesisRequest) -> OutputStream:
        """As AsyncEngine.submit: a stream of AudioChunk events then Finished; errors raise at once on a miss."""
        if request.request_id in self._live:
            raise InvalidRequest(f"duplicate request_id {request.request_id!r}", request_id=request.request_id)
        key = self.key_for(request)
        force = _force_admit.get()
        entry = self.cache.get(key)
        if entry is not None:
            return self._replay(request, entry)
        flight = self._flights.get(key)
        if flight is None:
            flight = _Flight(key, self.engine.submit(request), force)  # raises before anything is registered
            self._flights[key] = flight
            flight.task = asyncio.get_running_loop().create_task(
                self._pump(flight), name=f"cache-flight-{request.request_id}")
        else:
            self.cache.note_coalesced()
            flight.force = flight.force or force
        return self._subscribe(flight, request)

    def _replay(self, request: SynthesisRequest, entry: CachedSegment) -> OutputStream:
        t = now_s()
        timings = RequestTimings(submitted_s=t, admitted_s=t, encoded_s=t, first_audio_s=t)
        stream = OutputStream(request.request_id, entry.sample_rate_hz, asyncio.get_running_loop(), timings)
        for chunk in entry.chunks:
            stream.publish_chunk(chunk)
        timings.finished_s = now_s()
        timings.audio_samples = entry.audio_samples
        timings.chunks = len(entry.chunks)
        stream.finish(FinishReason.COMPLETED, None, timings)
        self._replays[request.request_id] = stream
        return stream

    def _subscribe(self, flight: _Flight, request: SynthesisRequest) -> OutputStream:
        timings = RequestTimings(submitted_s=now_s())
        stream = OutputStream(request.request_id, flight.engine_stream.sample_rate_hz, asyncio.get_running_loop(),
                              timings, on_close=lambda rid: self._leave(flight, rid),
                              on_skip=lambda samples: self._skip(flight, samples),
                              on_hold=lambda samples: self._hold(flight, samples))
        flight.subscribers[request.request_id] = stream
        self._live[request.request_id] = flight
        for chunk in flight.chunks:  # a late joiner starts from the first chunk
            self._deliver(stream, chunk)
        return stream

    def _deliver(self, stream: OutputStream, chunk: AudioChunk) -> None:
        if stream.timings.first_audio_s is None:
            stream.timings.first_audio_s = now_s()
        stream.timings.chunks += 1
        stream.timings.audio_samples += len(chunk.samples)
        stream.publish_chunk(chunk)

    @staticmethod
    def _skip(flight: _Flight, samples: int) -> None:
        """A subscriber dropped leading samples: the engine's playback clock follows a flight's only consumer (one
        shared by several calls keeps counting the audio as made)."""
        if len(flight.subscribers) == 1:
            flight.engine_stream.skip_leading(samples)

    @staticmethod
    def _hold(flight: _Flight, samples: int) -> None:
        """A subscriber holds delivered samples before its playback queue: passed on, as `_skip`, for an only one."""
        if len(flight.subscribers) == 1:
            flight.engine_stream.hold(samples)

    def _leave(self, flight: _Flight, request_id: str) -> None:
        """A subscriber closed: drop it; the last one to leave cancels the engine request."""
        flight.subscribers.pop(request_id, None)
        self._live.pop(request_id, None)
        if not flight.subscribers and not flight.done:
            if self._flights.get(flight.key) is flight:
                del self._flights[flight.key]  # an identical request from now on starts a new synthesis
            flight.engine_stream.close()

    async def _pump(self, flight: _Flight) -> None:
        final: Finished | None = None
        error: BaseException | None = None
        try:
            async for event in flight.engine_stream:
                if isinstance(event, AudioChunk):
                    flight.chunks.append(event)
                    for stream in list(flight.subscribers.values()):
                        self._deliver(stream, event)
                else:
                    final = event
        except asyncio.CancelledError:
            error = EngineStopped("synthesis abandoned: the event loop is shutting down")
            raise
        except BaseException as exc:  # the engine's typed error: every subscriber gets it
            error = exc
        finally:
            self._complete(flight, final, error)

    def _complete(self, flight: _Flight, final: Finished | None, error: BaseException | None) -> None:
        flight.done = True
        if self._flights.get(flight.key) is flight:
            del self._flights[flight.key]
        engine_timings = flight.engine_stream.finished.timings if flight.engine_stream.finished else None
        reason = FinishReason.ERROR if error is not None else (final.reason if final else FinishReason.CANCELLED)
        if reason is FinishReason.COMPLETED and flight.chunks:
            steps = engine_timings.decoder_steps if engine_timings is not None else 0
            segment = CachedSegment.record(flight.chunks, flight.engine_stream.sample_rate_hz, steps)
            self.cache.put(flight.key, segment, force=flight.force)
        for request_id, stream in list(flight.subscribers.items()):
            self._live.pop(request_id, None)
            timings = stream.timings
            if engine_timings is not None:
                timings.admitted_s = _not_before(engine_timings.admitted_s, timings.submitted_s)
                timings.encoded_s = _not_before(engine_timings.encoded_s, timings.submitted_s)
                timings.decoder_steps = engine_timings.decoder_steps
            timings.finished_s = now_s()
            stream.finish(reason, error, timings)
        flight.subscribers.clear()

    def cancel(self, request_id: str) -> bool:
        """As AsyncEngine.cancel: the request's stream ends with Finished(CANCELLED); False when unknown or ended."""
        flight = self._live.get(request_id)
        if flight is not None:
            stream = flight.subscribers.get(request_id)
            if stream is not None and stream.finished is None:
                stream.cancelled_by_engine()
            self._leave(flight, request_id)
            return stream is not None
        stream = self._replays.pop(request_id, None)
        if stream is not None and stream.finished is None:
            stream.cancelled_by_engine()
            return True
        return False

    def health(self) -> Health:
        """The engine's health."""
        return self.engine.health()

    def counters(self) -> EngineCounters:
        """The engine's counters (hits never reach it; see AudioCache.stats)."""
        return self.engine.counters()

    async def drain(self, timeout_s: float | None = None) -> bool:
        """As AsyncEngine.drain (syntheses in flight finish and are stored)."""
        return await self.engine.drain(timeout_s)

    async def stop(self) -> None:
        """As AsyncEngine.stop: live streams end with EngineStopped."""
        await self.engine.stop()


def _not_before(t: float | None, floor: float) -> float | None:
    return None if t is None else max(t, floor)

