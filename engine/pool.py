"""The instant request pool: fixed decoder slots, a bounded waiting queue, and the submit-side admission gate."""

from __future__ import annotations

import collections
import heapq
import threading

from engine.errors import EngineOverloaded
from engine.request import Request, Status, now_s


class AdmissionGate:
    """Thread-safe count of live requests (waiting + in slots); `acquire` raises EngineOverloaded past the limit.

    `submit` (any thread) acquires before the request reaches the engine thread, so overload is answered at
    once; the engine thread releases when the request's stream ends.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._count = 0
        self._lock = threading.Lock()

    def acquire(self, request_id: str) -> None:
        """Count one more live request, or raise EngineOverloaded."""
        with self._lock:
            if self._count >= self._limit:
                raise EngineOverloaded(
                    f"engine full: {self._count} live requests (slots + waiting queue = {self._limit})",
                    request_id=request_id,
                )
            self._count += 1

    def release(self) -> None:
        """One live request ended."""
        with self._lock:
            self._count = max(0, self._count - 1)

    @property
    def count(self) -> int:
        """Live requests right now."""
        return self._count

    @property
    def limit(self) -> int:
        """Most live requests."""
        return self._limit


class RequestPool:
    """Live requests of one engine thread: `max_slots` decoder slots plus a FIFO waiting queue (engine thread only).

    A slot is a row of the runner's preallocated batched decoder state; the lowest free slot is handed out
    first so the live rows stay packed at the front of the state tensors. Requests by id are looked up in the
    engine's one registry of live requests (EngineCore), not here.
    """

    def __init__(self, max_slots: int) -> None:
        self.max_slots = max_slots
        self._slots: list[Request | None] = [None] * max_slots
        self._free: list[int] = list(range(max_slots))
        heapq.heapify(self._free)
        self._waiting: collections.deque[Request] = collections.deque()

    def enqueue(self, request: Request) -> None:
        """A request joins the pool (waiting for a slot; admitted at the next iteration when one is free)."""
        request.status = Status.WAITING
        self._waiting.append(request)

    def admit(self) -> list[Request]:
        """Move waiting requests into free slots (FIFO); returns the newly admitted ones."""
        admitted: list[Request] = []
        while self._waiting and self._free:
            request = self._waiting.popleft()
            slot = heapq.heappop(self._free)
            self._slots[slot] = request
            request.slot = slot
            request.status = Status.ENCODING
            request.timings.admitted_s = now_s()
            admitted.append(request)
        return admitted

    def remove(self, request: Request) -> None:
        """Take a request out of the pool (finished, cancelled or failed); frees its slot if it had one."""
        if request.slot >= 0:
            if self._slots[request.slot] is request:
                self._slots[request.slot] = None
                heapq.heappush(self._free, request.slot)
            request.slot = -1
        else:
            try:
                self._waiting.remove(request)
            except ValueError:
                pass
        request.status = Status.DONE

    def active(self) -> list[Request]:
        """Requests holding a slot, in slot order."""
        return [r for r in self._slots if r is not None]

    def waiting(self) -> list[Request]:
        """Requests waiting for a slot, oldest first."""
        return list(self._waiting)

    def requests(self) -> list[Request]:
        """Every request in the pool: those holding a slot (slot order), then the waiting ones (oldest first)."""
        return self.active() + list(self._waiting)

    def __len__(self) -> int:
        return self.num_active + len(self._waiting)

    @property
    def num_active(self) -> int:
        """Slots in use."""
        return self.max_slots - len(self._free)

    @property
    def num_waiting(self) -> int:
        """Requests waiting for a slot."""
        return len(self._waiting)

    @property
    def num_free(self) -> int:
        """Free slots."""
        return len(self._free)
