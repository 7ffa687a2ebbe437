"""AsyncEngine: the event-loop side of an engine thread (submit → OutputStream, cancel, health, drain, stop)."""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol

from engine.config import EngineConfig
from engine.core import EngineCore, Health, StreamSink
from engine.output import OutputStream
from engine.request import RequestTimings, SynthesisRequest, now_s
from engine.telemetry import EngineCounters, EngineObserver

if TYPE_CHECKING:  # models are imported lazily: `import engine` must not import torch
    from models.voices.bundle import Voice

logger = logging.getLogger(__name__)


class EngineBackend(Protocol):
    """What AsyncEngine drives: EngineCore, or a baseline from engine.baselines (same contract)."""

    def start(self, warmup: bool = True, timeout_s: float | None = None) -> None: ...
    def submit(self, spec: SynthesisRequest, sink: StreamSink, timings: RequestTimings | None = None) -> Any: ...
    def cancel(self, request_id: str) -> bool: ...
    def health(self) -> Health: ...
    def drain(self, timeout_s: float | None = None) -> bool: ...
    def stop(self, timeout_s: float | None = 10.0) -> None: ...
    def counters(self) -> EngineCounters: ...
    def sample_rate_hz(self, voice: str) -> int: ...


class EngineClient(Protocol):
    """What the edge calls on an engine, from the event loop: AsyncEngine, or engine.cached_engine.CachingEngine in
    front of one (the audio cache every shipped configuration puts in the call path)."""

    @property
    def backend(self) -> EngineBackend: ...
    async def start(self, warmup: bool = True) -> None: ...
    def submit(self, request: SynthesisRequest) -> OutputStream: ...
    def cancel(self, request_id: str) -> bool: ...
    def health(self) -> Health: ...
    def counters(self) -> EngineCounters: ...
    async def drain(self, timeout_s: float | None = None) -> bool: ...
    async def stop(self) -> None: ...


class AsyncEngine:
    """Event-loop handle on an engine thread. All methods are called from the loop's thread.

    ```
    engine = AsyncEngine.from_config(EngineConfig(voices=("baker-zh",)))
    await engine.start()
    stream = engine.submit(SynthesisRequest("call-1/seg-0", ids, voice="baker-zh", seed=7))
    async for event in stream:          # AudioChunk ..., then Finished (errors raise)
        ...
    await engine.drain(timeout_s=30)
    ```
    """

    def __init__(self, backend: EngineBackend) -> None:
        self.backend = backend
        self._streams: weakref.WeakValueDictionary[str, OutputStream] = weakref.WeakValueDictionary()

    @classmethod
    def from_config(
        cls,
        config: EngineConfig,
        voices: Mapping[str, "Voice"] | None = None,
        observers: Iterable[EngineObserver] = (),
        backend: str = "engine",
    ) -> "AsyncEngine":
        """Build the engine (or a baseline: backend='naive' | 'non_incremental') over loaded voices.

        `voices` maps name → models.voices.bundle.Voice; when None, each name in config.voices is loaded
        with load_voice(name, device, dtype, weights).
        """
        from engine.runner import build_runners  # torch is imported here, not at `import engine`

        runners = build_runners(config, voices)
        if backend == "engine":
            return cls(EngineCore(config, runners, observers))
        from engine.baselines import make_baseline

        return cls(make_baseline(backend, config, runners, observers))

    async def start(self, warmup: bool = True) -> None:
        """Start the engine thread (warm-up runs off the loop); returns when it serves."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: self.backend.start(warmup))

    def submit(self, request: SynthesisRequest) -> OutputStream:
        """Queue a request and return its stream; raises InvalidRequest, EngineOverloaded, EngineStopped or
        EngineDead at once (nothing is queued then)."""
        loop = asyncio.get_running_loop()
        timings = RequestTimings(submitted_s=now_s())
        stream = OutputStream(
            request.request_id,
            self.backend.sample_rate_hz(request.voice),
            loop,
            timings,
            on_close=self._on_close,
        )
        self.backend.submit(request, stream, timings)
        self._streams[request.request_id] = stream
        return stream

    def _on_close(self, request_id: str) -> None:
        self._streams.pop(request_id, None)
        self.backend.cancel(request_id)

    def cancel(self, request_id: str) -> bool:
        """Cancel a request: its stream ends with Finished(CANCELLED) at once (unread audio dropped) and the
        engine frees its slot at its next iteration. False when the id is unknown or already ended."""
        stream = self._streams.pop(request_id, None)
        known = self.backend.cancel(request_id)
        if stream is not None and stream.finished is None:
            stream.cancelled_by_engine()
            return True
        return known

    def health(self) -> Health:
        """SERVING or NOT_SERVING."""
        return self.backend.health()

    def counters(self) -> EngineCounters:
        """Cumulative engine counters."""
        return self.backend.counters()

    async def drain(self, timeout_s: float | None = None) -> bool:
        """Refuse new requests, let live ones finish (up to timeout_s), stop. True if all finished."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: self.backend.drain(timeout_s))

    async def stop(self) -> None:
        """Stop at once; live streams end with EngineStopped."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.backend.stop)
