"""Per-iteration engine telemetry: a stats record per iteration, cumulative counters, and an observer hook."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from engine.request import FinishReason, RequestTimings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IterationStats:
    """One loop iteration: what ran, how big each module's batch was, how long it took (seconds)."""

    index: int
    started_s: float
    duration_s: float
    encode_batch: int
    decode_batch: int
    vocode_batch: int
    decode_steps: int
    encode_s: float
    decode_s: float
    vocode_s: float
    pool_active: int  # requests holding a slot
    pool_waiting: int  # requests waiting for a slot
    urgent: int  # streaming requests that were urgent this iteration
    deferred_chunks: int  # ready non-urgent chunks left for a later, bigger batch
    skipped_decode: int  # decoding requests left out (decode batch cap)
    paused: int  # requests paused because their consumer is not reading
    failed_batches: int
    vocode_frames: int = 0  # mel frames vocoded (the chunks' sizes summed)


@dataclass
class EngineCounters:
    """Totals since start (engine thread writes, anyone may read a snapshot)."""

    iterations: int = 0
    busy_s: float = 0.0
    requests_submitted: int = 0
    requests_completed: int = 0
    requests_cancelled: int = 0
    requests_failed: int = 0
    encode_calls: int = 0
    decode_calls: int = 0
    vocode_calls: int = 0
    encoded_items: int = 0
    decoded_rows: int = 0
    vocoded_chunks: int = 0
    urgent_iterations: int = 0  # sum over iterations of the urgent count
    deferred_chunks: int = 0  # sum over iterations of deferred ready chunks
    failed_batches: int = 0
    allocation_failures: int = 0  # failed batches whose error was a failed allocation (memory, a thread)
    audio_samples: int = 0
    max_decode_batch: int = 0
    max_vocode_batch: int = 0

    def snapshot(self) -> "EngineCounters":
        """A copy."""
        return EngineCounters(**self.__dict__)


class EngineObserver(Protocol):
    """Receives telemetry on the engine thread; keep it cheap (no I/O). Exceptions are logged and ignored."""

    def on_iteration(self, stats: IterationStats) -> None:
        """After every iteration that did work."""

    def on_request_done(self, request_id: str, reason: FinishReason, timings: RequestTimings) -> None:
        """When a request leaves the engine (completed, cancelled or failed)."""


class ObserverFanout:
    """Calls several observers, isolating the engine from their failures."""

    def __init__(self, observers: list[EngineObserver]) -> None:
        self.observers = list(observers)
        self._warned: set[int] = set()

    def _guard(self, observer: EngineObserver, exc: BaseException) -> None:
        if id(observer) not in self._warned:
            self._warned.add(id(observer))
            logger.warning("engine observer %r raised %r; ignored (logged once)", observer, exc)

    def on_iteration(self, stats: IterationStats) -> None:
        """Forward to every observer."""
        for observer in self.observers:
            try:
                observer.on_iteration(stats)
            except Exception as exc:  # noqa: BLE001 - telemetry must never stop the engine
                self._guard(observer, exc)

    def on_request_done(self, request_id: str, reason: FinishReason, timings: RequestTimings) -> None:
        """Forward to every observer."""
        for observer in self.observers:
            try:
                observer.on_request_done(request_id, reason, timings)
            except Exception as exc:  # noqa: BLE001
                self._guard(observer, exc)


class RecordingObserver:
    """Keeps the last `limit` iteration stats and finished requests in memory (tests, benchmarks)."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self.iterations: list[IterationStats] = []
        self.finished: list[tuple[str, FinishReason, RequestTimings]] = []

    def on_iteration(self, stats: IterationStats) -> None:
        """Record."""
        if len(self.iterations) < self.limit:
            self.iterations.append(stats)

    def on_request_done(self, request_id: str, reason: FinishReason, timings: RequestTimings) -> None:
        """Record."""
        if len(self.finished) < self.limit:
            self.finished.append((request_id, reason, timings))
