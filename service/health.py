"""Standard gRPC health service with separate startup, readiness and liveness names."""

from __future__ import annotations

import logging

from grpc_health.v1 import health, health_pb2

log = logging.getLogger(__name__)

STARTUP = "voxpool.startup"  # SERVING once the voice is loaded and the engine warmed up
READINESS = "voxpool.readiness"  # SERVING while warm, not draining and able to allocate (never depends on load)
LIVENESS = "voxpool.liveness"  # SERVING while the engine thread is alive and makes progress (service/liveness.py)
TTS_SERVICE = "voxpool.v1.Tts"
OVERALL = ""

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Health:
    """Owns the aio HealthServicer and the meaning of each service name."""

    def __init__(self) -> None:
        self.servicer = health.aio.HealthServicer()
        self._started = False
        self._draining = False
        self._engine_alive = True
        self._allocating = True  # False while memory or thread allocations fail (service/pressure.py)

    async def _set(self, name: str, serving: bool) -> None:
        await self.servicer.set(name, SERVING if serving else NOT_SERVING)

    async def publish(self) -> None:
        """Push the current state to every name (watchers are notified by the servicer)."""
        ready = self._started and not self._draining and self._engine_alive and self._allocating
        await self._set(STARTUP, self._started)
        await self._set(READINESS, ready)
        await self._set(TTS_SERVICE, ready)
        await self._set(OVERALL, ready)
        await self._set(LIVENESS, self._engine_alive)

    async def starting(self) -> None:
        await self.publish()

    async def started(self) -> None:
        self._started = True
        await self.publish()

    async def draining(self) -> None:
        self._draining = True
        await self.publish()

    async def engine_died(self) -> None:
        self._engine_alive = False
        log.error("engine is dead: readiness and liveness now NOT_SERVING")
        await self.publish()

    async def engine_stalled(self, stalled_for_s: float) -> None:
        """The engine owes work and made no progress: readiness and liveness NOT_SERVING for good (restart the pod)."""
        self._engine_alive = False
        log.error("engine made no progress for %.1f s with work queued: readiness and liveness now NOT_SERVING",
                  stalled_for_s)
        await self.publish()

    async def allocations_failing(self, failing: bool) -> None:
        """Readiness NOT_SERVING while the process cannot allocate (liveness stays: it may recover by itself)."""
        self._allocating = not failing
        await self.publish()

    @property
    def accepting(self) -> bool:
        """True when new calls may be admitted."""
        return self._started and not self._draining and self._engine_alive
