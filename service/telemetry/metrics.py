"""Prometheus metrics (voxpool_*): call SLIs, engine iteration figures, gauges read at scrape time, /metrics."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import (
    ThreadingWSGIServer,
    generate_latest,
    make_wsgi_app,
)
from prometheus_client.openmetrics.exposition import (
    generate_latest as generate_openmetrics,
)
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

# Histogram buckets, in base units.
TTFA_BUCKETS_S = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0)
LATENESS_BUCKETS_S = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)
CALL_BUCKETS_S = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
ITERATION_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DECODE_STEP_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16)
QUEUE_BUCKETS_S = (0.0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
MODULES = ("encode", "decode", "vocode")
CALL_OUTCOMES = ("ok", "cancelled", "shed", "client_error", "server_error")
TURN_OUTCOMES = ("done", "cleared", "failed", "abandoned")


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class NullMetrics:
    """Metrics off (telemetry.metrics_port = 0): every method is a no-op, nothing is registered."""

    enabled = False
    engine_observer = None

    def call_ended(self, method: str, outcome: str, code: str, duration_s: float) -> None:
        """No-op."""

    def turn_ended(self, outcome: str, ttfa_s: float | None, rtf: float | None, audio_s: float, underruns: int,
                   late_chunks: int, chunks: int, dropped_s: float, exemplar: dict[str, str] | None) -> None:
        """No-op."""

    def chunk(self, lateness_s: float, exemplar: dict[str, str] | None) -> None:
        """No-op."""

    def bind_calls(self, active: Callable[[], float], max_calls: int) -> None:
        """No-op."""

    def bind_engine(self, counters: Callable[[], Any], max_slots: int | None) -> None:
        """No-op."""

    def bind_audio_cache(self, stats: Callable[[], Any]) -> None:
        """No-op."""


class EngineMetrics:
    """EngineObserver feeding the iteration histograms; runs on the engine thread (a few observe() calls)."""

    def __init__(self, registry: CollectorRegistry):
        self.iteration = Histogram(
            "voxpool_engine_iteration_seconds", "Wall time of one engine iteration that did work",
            buckets=ITERATION_BUCKETS_S, registry=registry,
        )
        module_s = Histogram(
            "voxpool_engine_module_seconds", "Time one module took in an iteration where it ran (all voices)",
            ["module"], buckets=ITERATION_BUCKETS_S, registry=registry,
        )
        batch = Histogram(
            "voxpool_engine_batch_size", "Items batched into one module run (per iteration where it ran)",
            ["module"], buckets=BATCH_BUCKETS, registry=registry,
        )
        self.queue = Histogram(
            "voxpool_engine_queue_seconds", "Engine request: submitted to holding a pool slot",
            buckets=QUEUE_BUCKETS_S, registry=registry,
        )
        self.decode_steps = Histogram(
            "voxpool_engine_decode_call_size", "Decoder steps in one batched decoder call (catch-up keeps mel ahead)",
            buckets=DECODE_STEP_BUCKETS, registry=registry,
        )
        self._module_s = tuple(module_s.labels(m) for m in MODULES)
        self._batch = tuple(batch.labels(m) for m in MODULES)
        self.pool_active = 0
        self.pool_waiting = 0

    def on_iteration(self, stats: Any) -> None:
        """engine.telemetry.IterationStats → histograms; pool occupancy kept for the gauges."""
        self.iteration.observe(stats.duration_s)
        self.pool_active = stats.pool_active
        self.pool_waiting = stats.pool_waiting
        for i, (n, seconds) in enumerate(((stats.encode_batch, stats.encode_s), (stats.decode_batch, stats.decode_s),
                                          (stats.vocode_batch, stats.vocode_s))):
            if n:
                self._batch[i].observe(n)
                self._module_s[i].observe(seconds)
        if stats.decode_steps:
            self.decode_steps.observe(stats.decode_steps)

    def on_request_done(self, request_id: str, reason: Any, timings: Any) -> None:
        """Queueing time of every request that got a slot."""
        queue_ms = timings.queue_ms
        if queue_ms is not None:
            self.queue.observe(queue_ms / 1000.0)


class _EngineCounters(Collector):
    """Reads engine.counters() and the pool occupancy at scrape time (no work on the engine thread)."""

    def __init__(self, counters: Callable[[], Any], observer: EngineMetrics, max_slots: int | None):
        self.counters = counters
        self.observer = observer
        self.max_slots = max_slots

    def collect(self) -> Iterable[Any]:
        c = self.counters()
        yield CounterMetricFamily("voxpool_engine_iterations", "Engine iterations that did work", value=c.iterations)
        yield CounterMetricFamily("voxpool_engine_busy_seconds", "Engine thread time spent in iterations",
                                  value=c.busy_s)
        yield CounterMetricFamily("voxpool_engine_requests_submitted", "Requests submitted to the engine",
                                  value=c.requests_submitted)
        done = CounterMetricFamily("voxpool_engine_requests_finished", "Requests that left the engine, by reason",
                                   labels=["reason"])
        done.add_metric(["completed"], c.requests_completed)
        done.add_metric(["cancelled"], c.requests_cancelled)
        done.add_metric(["failed"], c.requests_failed)
        yield done
        yield CounterMetricFamily("voxpool_engine_failed_batches", "Module batches that raised", value=c.failed_batches)
        yield CounterMetricFamily("voxpool_engine_deferred_chunks",
                                  "Ready chunks left for a later iteration (lazy vocoding, staggered starts, budget)",
                                  value=c.deferred_chunks)
        in_flight = c.requests_submitted - c.requests_completed - c.requests_cancelled - c.requests_failed
        yield GaugeMetricFamily("voxpool_engine_requests_in_flight", "Requests in the engine (slot or waiting)",
                                value=max(0, in_flight))
        yield GaugeMetricFamily("voxpool_engine_pool_active", "Requests holding a pool slot (last iteration)",
                                value=self.observer.pool_active)
        yield GaugeMetricFamily("voxpool_engine_pool_waiting", "Requests waiting for a pool slot (last iteration)",
                                value=self.observer.pool_waiting)
        if self.max_slots is not None:
            yield GaugeMetricFamily("voxpool_engine_pool_slots", "Pool slots (engine.max_slots)", value=self.max_slots)


class _AudioCacheCollector(Collector):
    """Reads the segment audio cache's stats (engine.audio_cache.CacheStats) at scrape time."""

    def __init__(self, stats: Callable[[], Any]):
        self.stats = stats

    def collect(self) -> Iterable[Any]:
        s = self.stats()
        yield CounterMetricFamily("voxpool_audio_cache_hits", "Segments served from the audio cache", value=s.hits)
        yield CounterMetricFamily("voxpool_audio_cache_misses", "Segment lookups that missed the audio cache",
                                  value=s.misses)
        yield CounterMetricFamily("voxpool_audio_cache_coalesced",
                                  "Misses served by an identical synthesis already in flight", value=s.coalesced)
        yield CounterMetricFamily("voxpool_audio_cache_admitted", "Segments stored in the audio cache",
                                  value=s.admitted)
        rejected = CounterMetricFamily("voxpool_audio_cache_rejected", "Completed syntheses not stored, by reason",
                                       labels=["reason"])
        rejected.add_metric(["first_sighting"], s.rejected_first_sighting)
        rejected.add_metric(["too_large"], s.rejected_too_large)
        yield rejected
        yield CounterMetricFamily("voxpool_audio_cache_evictions", "Entries evicted to stay within the bound",
                                  value=s.evictions)
        yield CounterMetricFamily("voxpool_audio_cache_evicted_bytes", "Bytes evicted", value=s.evicted_bytes)
        yield GaugeMetricFamily("voxpool_audio_cache_bytes", "Accounted bytes held by the audio cache", value=s.bytes)
        yield GaugeMetricFamily("voxpool_audio_cache_max_bytes", "The audio cache's bound (cache.max_mib)",
                                value=s.max_bytes)
        yield GaugeMetricFamily("voxpool_audio_cache_entries", "Segments held by the audio cache", value=s.entries)
        yield GaugeMetricFamily("voxpool_audio_cache_hit_ratio", "hits / (hits + misses) since start",
                                value=s.hit_ratio)


class Metrics:
    """The process's metrics in their own registry (several servers may live in one test process)."""

    enabled = True

    def __init__(self, registry: CollectorRegistry | None = None, process_metrics: bool = True):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        if process_metrics:
            from prometheus_client.gc_collector import GCCollector
            from prometheus_client.platform_collector import PlatformCollector
            from prometheus_client.process_collector import ProcessCollector

            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)
        self.ttfa = Histogram(
            "voxpool_time_to_first_audio_seconds",
            "Per turn: segment synthesizable (text, flush or closing punctuation) to first audio frame released",
            buckets=TTFA_BUCKETS_S, registry=r,
        )
        self.lateness = Histogram(
            "voxpool_chunk_lateness_seconds",
            "Per engine chunk: arrival after the playback of the audio before it would have ended (0 = on time)",
            buckets=LATENESS_BUCKETS_S, registry=r,
        )
        self.rtf = Histogram(
            "voxpool_real_time_factor", "Per turn: synthesis wall time (excluding pacing holds) / audio duration",
            buckets=RTF_BUCKETS, registry=r,
        )
        self.call_duration = Histogram(
            "voxpool_call_duration_seconds", "Admitted Converse/Synthesize calls: stream open to status",
            ["method"], buckets=CALL_BUCKETS_S, registry=r,
        )
        self.calls = Counter("voxpool_calls", "Calls by method, outcome and gRPC status code",
                             ["method", "outcome", "grpc_code"], registry=r)
        turns = Counter("voxpool_turns", "Turns by outcome", ["outcome"], registry=r)
        self._turns = {o: turns.labels(o) for o in TURN_OUTCOMES}
        self.clears = Counter("voxpool_clears", "Turns cleared by barge-in (Clear)", registry=r)
        self.underruns = Counter("voxpool_playout_underruns",
                                 "Underruns: runs of silence frames sent because audio was not ready", registry=r)
        self.chunks = Counter("voxpool_chunks", "Engine audio chunks received by calls", registry=r)
        self.late_chunks = Counter("voxpool_late_chunks", "Engine audio chunks that arrived late", registry=r)
        self.audio = Counter("voxpool_audio_seconds", "Speech audio released to gateways", registry=r)
        self.dropped = Counter("voxpool_dropped_audio_seconds", "Synthesized audio dropped by barge-in", registry=r)
        self.active_calls = Gauge("voxpool_active_calls", "Calls holding an admission slot", registry=r)
        self.slots = Gauge("voxpool_stream_slots", "Admission slots (server.max_calls)", registry=r)
        self.utilization = Gauge("voxpool_stream_slot_utilization",
                                 "Active calls / server.max_calls (the autoscaling signal)", registry=r)
        self.engine_observer = EngineMetrics(r)
        self._engine_collector: _EngineCounters | None = None
        self._cache_collector: _AudioCacheCollector | None = None
        self._httpd: Any = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ------------------------------------------------------------------ recording

    def call_ended(self, method: str, outcome: str, code: str, duration_s: float) -> None:
        """One call ended (admitted or not)."""
        self.calls.labels(method, outcome, code).inc()
        if outcome != "shed":
            self.call_duration.labels(method).observe(duration_s)

    def turn_ended(self, outcome: str, ttfa_s: float | None, rtf: float | None, audio_s: float, underruns: int,
                   late_chunks: int, chunks: int, dropped_s: float, exemplar: dict[str, str] | None) -> None:
        """One turn ended: its TTFA (when it had audio), RTF, counts."""
        self._turns[outcome].inc()
        if ttfa_s is not None:
            self.ttfa.observe(ttfa_s, exemplar)
        if rtf is not None:
            self.rtf.observe(rtf, exemplar)
        if outcome == "cleared":
            self.clears.inc()
        if underruns:
            self.underruns.inc(underruns)
        if chunks:
            self.chunks.inc(chunks)
        if late_chunks:
            self.late_chunks.inc(late_chunks)
        if audio_s:
            self.audio.inc(audio_s)
        if dropped_s:
            self.dropped.inc(dropped_s)

    def chunk(self, lateness_s: float, exemplar: dict[str, str] | None) -> None:
        """One engine chunk reached its call; `lateness_s` ≤ 0 is on time."""
        if lateness_s > 0.0:
            self.lateness.observe(lateness_s, exemplar)
        else:
            self.lateness.observe(0.0)

    # ------------------------------------------------------------------ gauges read at scrape time

    def bind_calls(self, active: Callable[[], float], max_calls: int) -> None:
        """Active calls come from `active()`; utilization = active / max_calls."""
        self.active_calls.set_function(active)
        self.slots.set(max_calls)
        self.utilization.set_function(lambda: active() / max_calls if max_calls else 0.0)

    def bind_engine(self, counters: Callable[[], Any], max_slots: int | None) -> None:
        """Engine counters (engine.counters()) and pool size, collected at scrape time."""
        if self._engine_collector is not None:
            self.registry.unregister(self._engine_collector)
        self._engine_collector = _EngineCounters(counters, self.engine_observer, max_slots)
        self.registry.register(self._engine_collector)

    def bind_audio_cache(self, stats: Callable[[], Any]) -> None:
        """The segment audio cache's counters (engine.audio_cache.AudioCache.stats), collected at scrape time."""
        if self._cache_collector is not None:
            self.registry.unregister(self._cache_collector)
        self._cache_collector = _AudioCacheCollector(stats)
        self.registry.register(self._cache_collector)

    # ------------------------------------------------------------------ exposition

    def exposition(self, openmetrics: bool = False) -> bytes:
        """The text a scrape would get (OpenMetrics carries the exemplars)."""
        return generate_openmetrics(self.registry) if openmetrics else generate_latest(self.registry)

    def serve(self, host: str, port: int) -> int:
        """Serve /metrics on a daemon thread; returns the bound port (port 0 = any free port)."""
        addr = host.strip("[]") or "0.0.0.0"

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET

        self._httpd = make_server(addr, port, make_wsgi_app(self.registry), Server, handler_class=_QuietHandler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="voxpool-metrics", daemon=True)
        self._thread.start()
        self.port = int(self._httpd.server_port)
        log.info("metrics on http://%s:%d/metrics", host, self.port)
        return self.port

    def stop(self) -> None:
        """Stop the HTTP endpoint."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
