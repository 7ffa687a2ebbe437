"""Engine progress watch: an engine that owes work and finishes no loop turn for `stall_s` is stalled (liveness)."""

from __future__ import annotations

import sys
import time
import traceback
from typing import Any, Callable

CONFIRM_S = 1.0  # the watch itself must have seen the same stall this long (a frozen process is not a stalled engine)
MAX_GAP_S = 0.5  # at most this much of the time between two readings counts towards CONFIRM_S


class ProgressWatch:
    """Reads the engine's heartbeat (`loop_turns`, `stalled_for_s()`, engine/core.py) each time `check()` is called.

    Stalled means: the engine has queued or live requests, its loop finished no turn for at least `stall_s` on its own
    clock, and this watch saw that same heartbeat value across readings worth min(CONFIRM_S, stall_s), each gap
    between readings counting at most MAX_GAP_S. The second rule keeps a process frozen as a whole (SIGSTOP, a VM
    pause) from reading as a stalled engine when it resumes: the engine thread finishes its turn before enough
    readings pass. A backend without a heartbeat (the benchmark baselines) is never stalled.
    """

    def __init__(self, backend: Any, stall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self.stall_s = stall_s
        self.clock = clock
        self._turns: int | None = None
        self._last_s: float | None = None
        self._seen_s = 0.0
        self.supported = hasattr(backend, "stalled_for_s") and hasattr(backend, "loop_turns")

    def check(self) -> bool:
        """True once the engine is stalled by the rule above."""
        if not self.supported or self.stall_s <= 0:
            return False
        owed_s = self.backend.stalled_for_s()
        turns = self.backend.loop_turns
        now = self.clock()
        last_s, self._last_s = self._last_s, now
        if owed_s <= 0 or turns != self._turns or last_s is None:
            self._turns = turns
            self._seen_s = 0.0
            return False
        self._seen_s += min(MAX_GAP_S, max(0.0, now - last_s))
        return owed_s >= self.stall_s and self._seen_s >= min(CONFIRM_S, self.stall_s)

    def stalled_for_s(self) -> float:
        """The engine's own reading of how long it has owed progress (0 when it owes none)."""
        return self.backend.stalled_for_s() if self.supported else 0.0


def thread_stack(thread: Any) -> str:
    """Where a thread is now, as a formatted stack ('' when it is not running): the log of a stall shows it."""
    ident = getattr(thread, "ident", None)
    frame = sys._current_frames().get(ident) if ident is not None else None  # noqa: SLF001 - diagnosis only
    return "".join(traceback.format_stack(frame)) if frame is not None else ""
