"""Call admission: a fixed number of call slots (and per-tenant quotas), refused at once with a jittered retry delay."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from service.errors import Overloaded, Unavailable


@dataclass
class CallSlot:
    """A held admission slot; release it exactly once (idempotent)."""

    admission: "Admission"
    tenant: str = ""
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.admission._release(self)


class Admission:
    """Counts active calls against `max_calls`; decides in O(1), before any engine work."""

    def __init__(self, max_calls: int, retry_after_ms: int, rng: random.Random | None = None,
                 tenant_max_calls: Callable[[str], int] | None = None):
        self.max_calls = max_calls
        self.retry_after_ms = retry_after_ms
        self._tenant_max_calls = tenant_max_calls  # tenant → most concurrent calls (0 = no limit)
        self._active = 0
        self._by_tenant: dict[str, int] = {}
        self._accepting = False
        self._closed_because = ""  # why new calls are refused, when not the default (starting or draining)
        self._rng = rng or random.Random()

    @property
    def active(self) -> int:
        """Calls holding a slot now."""
        return self._active

    def active_for(self, tenant: str) -> int:
        """Calls of one tenant holding a slot now."""
        return self._by_tenant.get(tenant, 0)

    @property
    def utilization(self) -> float:
        """active / max_calls (the autoscaling signal)."""
        return self._active / self.max_calls

    def open(self) -> None:
        """Start admitting (after warm-up)."""
        self._accepting = True

    def close(self, because: str = "") -> None:
        """Stop admitting (drain, engine death or stall); `because` replaces the refusal's default message."""
        self._accepting = False
        self._closed_because = self._closed_because or because

    def _pushback_ms(self) -> int:
        return int(self.retry_after_ms * self._rng.uniform(0.5, 1.5))

    def check_accepting(self) -> None:
        """Unavailable when the server takes no calls now (starting, draining, engine down); a full server passes."""
        if not self._accepting:
            raise Unavailable(
                self._closed_because or "server is not accepting calls (starting or draining); retry on another server",
                retry_after_ms=self._pushback_ms(),
            )

    def acquire(self, tenant: str = "") -> CallSlot:
        """A slot for a new call, or Unavailable (not accepting) / Overloaded (full, or the tenant at its quota)."""
        self.check_accepting()
        if self._active >= self.max_calls:
            raise Overloaded(
                f"all {self.max_calls} call slots are busy; retry after the delay in grpc-retry-pushback-ms",
                retry_after_ms=self._pushback_ms(),
            )
        limit = self._tenant_max_calls(tenant) if tenant and self._tenant_max_calls else 0
        if limit and self._by_tenant.get(tenant, 0) >= limit:
            raise Overloaded(
                f"tenant {tenant} already has {limit} calls in progress, its limit; retry after the delay in "
                "grpc-retry-pushback-ms",
                retry_after_ms=self._pushback_ms(),
            )
        self._active += 1
        if tenant:
            self._by_tenant[tenant] = self._by_tenant.get(tenant, 0) + 1
        return CallSlot(self, tenant)

    def _release(self, slot: CallSlot) -> None:
        self._active -= 1
        if slot.tenant:
            left = self._by_tenant.get(slot.tenant, 0) - 1
            if left > 0:
                self._by_tenant[slot.tenant] = left
            else:
                self._by_tenant.pop(slot.tenant, None)
