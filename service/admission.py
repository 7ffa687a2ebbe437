"""Call admission: a fixed number of call slots, refused at once (with a jittered retry delay) when full or draining."""

from __future__ import annotations

import random
from dataclasses import dataclass

from service.errors import Overloaded, Unavailable


@dataclass
class CallSlot:
    """A held admission slot; release it exactly once (idempotent)."""

    admission: "Admission"
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.admission._active -= 1


class Admission:
    """Counts active calls against `max_calls`; decides in O(1), before any engine work."""

    def __init__(self, max_calls: int, retry_after_ms: int, rng: random.Random | None = None):
        self.max_calls = max_calls
        self.retry_after_ms = retry_after_ms
        self._active = 0
        self._accepting = False
        self._rng = rng or random.Random()

    @property
    def active(self) -> int:
        """Calls holding a slot now."""
        return self._active

    @property
    def utilization(self) -> float:
        """active / max_calls (the autoscaling signal)."""
        return self._active / self.max_calls

    def open(self) -> None:
        """Start admitting (after warm-up)."""
        self._accepting = True

    def close(self) -> None:
        """Stop admitting (drain, engine death)."""
        self._accepting = False

    def _pushback_ms(self) -> int:
        return int(self.retry_after_ms * self._rng.uniform(0.5, 1.5))

    def acquire(self) -> CallSlot:
        """A slot for a new call, or Unavailable (not accepting) / Overloaded (full) with a retry delay."""
        if not self._accepting:
            raise Unavailable(
                "server is not accepting calls (starting or draining); retry on another server",
                retry_after_ms=self._pushback_ms(),
            )
        if self._active >= self.max_calls:
            raise Overloaded(
                f"all {self.max_calls} call slots are busy; retry after the delay in grpc-retry-pushback-ms",
                retry_after_ms=self._pushback_ms(),
            )
        self._active += 1
        return CallSlot(self)
