"""Readiness under memory pressure: NOT_SERVING while the process cannot allocate memory or start threads, SERVING
again once it can, so a load balancer, Kubernetes and the client library's failover send calls elsewhere meanwhile."""

from __future__ import annotations

import logging
import threading
import time
from typing import Awaitable, Callable

from engine.errors import is_allocation_failure

log = logging.getLogger(__name__)

PROBE_BYTES = 16 * 1024 * 1024  # a recovery probe allocates (and touches) this much
RECOVER_AFTER_S = 1.0  # no failure for this long, and a probe that works, before SERVING again


def probe_allocation(nbytes: int = PROBE_BYTES) -> bool:
    """Can the process allocate `nbytes` and start a thread right now?"""
    try:
        buf = bytearray(nbytes)
        buf[::4096] = b"\1" * len(range(0, nbytes, 4096))  # touch every page: a lazy mapping is not enough
        t = threading.Thread(target=lambda: None, name="alloc-probe")
        t.start()
        t.join()
        return True
    except (MemoryError, RuntimeError, OSError):
        return False


class AllocationWatch:
    """Turns allocation failures (seen by the servicer, counted by the engine) into readiness.

    `observe(exc)` takes any exception a call ended with; `check(engine_failures)` runs on the server's watchdog tick
    with the engine's cumulative `allocation_failures` counter: the first failure sets readiness NOT_SERVING (via
    `set_failing(True)`); once nothing failed for `recover_after_s` and a probe allocation works, SERVING again.
    """

    def __init__(self, set_failing: Callable[[bool], Awaitable[None]], *, recover_after_s: float = RECOVER_AFTER_S,
                 probe: Callable[[], bool] = probe_allocation, clock: Callable[[], float] = time.monotonic):
        self._set_failing = set_failing
        self._recover_after_s = recover_after_s
        self._probe = probe
        self._clock = clock
        self._engine_failures = 0
        self._last_failure_s: float | None = None
        self.failing = False

    def observe(self, exc: BaseException) -> None:
        if is_allocation_failure(exc):
            self._last_failure_s = self._clock()

    async def check(self, engine_failures: int) -> None:
        now = self._clock()
        if engine_failures > self._engine_failures:
            self._engine_failures = engine_failures
            self._last_failure_s = now
        recent = self._last_failure_s is not None and now - self._last_failure_s < self._recover_after_s
        if not self.failing and recent:
            self.failing = True
            log.error("allocations are failing (memory or threads): readiness NOT_SERVING until they work again")
            await self._set_failing(True)
        elif self.failing and not recent and self._probe():
            self.failing = False
            log.warning("allocations work again: readiness SERVING")
            await self._set_failing(False)
