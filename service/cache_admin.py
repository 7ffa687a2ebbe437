"""The audio cache in the service: building the CachingEngine from config, and the CacheAdmin RPCs (serving port)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator, Mapping

import grpc

from engine.audio_cache import AudioCache
from engine.cached_engine import CachingEngine
from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc
from service.admission import Admission, CallSlot
from service.cache_warm import FAILED, TIMED_OUT, WARMED, CacheWarmer, LineResult
from service.config import CacheConfig
from service.errors import Overloaded, ServiceError, Unavailable
from service.security import current_tenant

log = logging.getLogger(__name__)

MAX_WARM_LINES = 100_000
_OUTCOMES = {WARMED: pb.WarmLineResult.WARMED, FAILED: pb.WarmLineResult.FAILED,
             TIMED_OUT: pb.WarmLineResult.TIMED_OUT}


def with_audio_cache(engine: Any, cfg: CacheConfig, voices: Mapping[str, Any], default_voice: str) -> Any:
    """`engine` behind a CachingEngine when cache.enabled, else `engine` itself (same interface either way)."""
    if not cfg.enabled:
        return engine
    cache = AudioCache(cfg.max_mib * 1024 * 1024, cfg.admit_after_sightings, cfg.doorkeeper_entries)
    default = getattr(getattr(engine, "backend", None), "default_voice", None) or default_voice
    return CachingEngine(engine, cache, default, voices=voices)


def stats_proto(cache: AudioCache | None) -> pb.CacheStats:
    """The cache's counters as the admin RPC answers them (enabled=false when there is no cache)."""
    if cache is None:
        return pb.CacheStats(enabled=False)
    s = cache.stats()
    return pb.CacheStats(
        enabled=True, max_bytes=s.max_bytes, bytes=s.bytes, entries=s.entries, hits=s.hits, misses=s.misses,
        coalesced=s.coalesced, admitted=s.admitted, rejected_first_sighting=s.rejected_first_sighting,
        rejected_too_large=s.rejected_too_large, evictions=s.evictions, evicted_bytes=s.evicted_bytes,
        hit_ratio=s.hit_ratio,
    )


def report_proto(results: list[LineResult], elapsed_s: float, cache: AudioCache | None) -> pb.WarmCacheReport:
    """Per-line results and totals."""
    report = pb.WarmCacheReport(elapsed_ms=int(elapsed_s * 1000), stats=stats_proto(cache))
    for r in results:
        report.lines.append(pb.WarmLineResult(line_number=r.line_number, outcome=_OUTCOMES[r.outcome],
                                              message=r.message, audio_ms=r.audio_ms))
    report.warmed = sum(r.outcome == WARMED for r in results)
    report.failed = sum(r.outcome == FAILED for r in results)
    report.timed_out = sum(r.outcome == TIMED_OUT for r in results)
    return report


async def admitted(admission: Admission, tenant: str) -> CallSlot:
    """A call slot of `tenant` for one warm-up line: waits (the refusal's pushback at a time) while the server or the
    tenant is full, so warm-up yields to calls and never passes either limit; Unavailable when the server refuses
    calls (draining, engine down)."""
    while True:
        try:
            return admission.acquire(tenant)
        except Overloaded as exc:
            await asyncio.sleep((exc.retry_after_ms or 100) / 1000.0)


class CacheAdminServicer(tts_pb2_grpc.CacheAdminServicer):
    """WarmCache and GetCacheStats; `cache` is None when cache.enabled is false.

    Each warm-up line is synthesized like a Synthesize call and holds one of the caller's call slots meanwhile.
    """

    def __init__(self, warmer: CacheWarmer, cache: AudioCache | None, cfg: CacheConfig,
                 admission: Admission) -> None:
        self.warmer = warmer
        self.cache = cache
        self.cfg = cfg
        self.admission = admission

    async def WarmCache(self, request_iterator: AsyncIterator[pb.WarmCacheLine],
                        context: grpc.aio.ServicerContext) -> pb.WarmCacheReport:
        if self.cache is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                "the audio cache is disabled on this server; set cache.enabled: true to warm it")
        tenant = current_tenant()
        lines: list[tuple[int, str]] = []
        try:
            async for message in request_iterator:
                if len(lines) >= MAX_WARM_LINES:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                        f"more than {MAX_WARM_LINES} lines; split the prompt file")
                lines.append((message.line_number or len(lines) + 1, message.line))
        except ServiceError as exc:  # the tenant's text rate (service/security.py)
            if exc.retry_after_ms is not None:
                context.set_trailing_metadata((("grpc-retry-pushback-ms", str(exc.retry_after_ms)),))
            await context.abort(exc.code, exc.message)
        try:  # refused at once when the server takes no calls (draining, engine down); when full, lines wait for slots
            self.admission.check_accepting()
        except Unavailable as exc:
            await context.abort(exc.code, exc.message)
        timeout_s = self.cfg.warm_timeout_s
        remaining = context.time_remaining()
        if remaining is not None:  # answer before the caller's deadline
            timeout_s = max(0.1, min(timeout_s, remaining - 0.5))
        started = time.monotonic()
        results = await self.warmer.warm_lines(lines, timeout_s, admit=lambda: admitted(self.admission, tenant))
        return report_proto(results, time.monotonic() - started, self.cache)

    async def GetCacheStats(self, request: pb.CacheStatsRequest,
                            context: grpc.aio.ServicerContext) -> pb.CacheStats:
        return stats_proto(self.cache)
