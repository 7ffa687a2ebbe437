"""Engine progress watch: an engine that owes work and finishes no loop turn for `stall_s` is stalled (liveness)."""

from __future__ import annotations

import sys
import time
import traceback
from typing import Any, Callable

CONFIRM_S = 1.0  # the watch itself must have seen the same stall this long (a frozen process is not a stalled engine)
MAX_GAP_S = 2.0  # readings further apart than this: the watch was not running either, its observation starts again
BLOCKED_CPU_SHARE = 0.01  # engine thread CPU below this share of the observed time: blocked, not merely starved
SPIN_CPU_SHARE = 0.9  # engine thread CPU since its last loop turn at least this share of stall_s: spinning


def thread_cpu_s(thread: Any) -> float | None:
    """CPU seconds a live thread has used (its own clock), or None where the platform cannot tell."""
    ident = getattr(thread, "ident", None)
    if ident is None or not thread.is_alive():
        return None
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (AttributeError, OSError, ValueError):
        return None


class ProgressWatch:
    """Reads the engine's heartbeat (`loop_turns`, `stalled_for_s()`, engine/core.py) each time `check()` is called.

    Stalled means all of:
    - the engine has queued or live requests and its loop finished no turn for at least `stall_s` (its own clock);
    - this watch saw that same loop turn, reading after reading (no gap over MAX_GAP_S), for at least
      min(CONFIRM_S, stall_s): a process frozen as a whole (SIGSTOP, a VM pause) is not taken for a stalled engine;
    - the engine thread is blocked (it used under BLOCKED_CPU_SHARE of the observed time in CPU: a lock, a device
      wait, I/O) or spinning (it used at least SPIN_CPU_SHARE × stall_s of CPU since the observation began). A
      thread that is merely starved of CPU by a busy host gets its share and finishes its turn: not a stall.
    Where thread CPU clocks are not available the first rule and the second decide. A backend without a heartbeat
    (the benchmark baselines) is never stalled.
    """

    def __init__(self, backend: Any, stall_s: float, clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float | None] | None = None) -> None:
        self.backend = backend
        self.stall_s = stall_s
        self.clock = clock
        self.cpu_clock = cpu_clock or (lambda: thread_cpu_s(getattr(backend, "thread", None)))
        self.supported = hasattr(backend, "stalled_for_s") and hasattr(backend, "loop_turns")
        self._turns: int | None = None
        self._last_s: float | None = None
        self._seen_s = 0.0
        self._since_s = 0.0  # observation start (watch clock) and the engine thread's CPU clock then
        self._cpu0: float | None = None

    def check(self) -> bool:
        """True once the engine is stalled by the rules above."""
        if not self.supported or self.stall_s <= 0:
            return False
        owed_s = self.backend.stalled_for_s()
        turns = self.backend.loop_turns
        now = self.clock()
        cpu = self.cpu_clock()
        last_s, self._last_s = self._last_s, now
        if owed_s <= 0 or turns != self._turns or last_s is None or now - last_s > MAX_GAP_S:
            self._turns = turns
            self._seen_s = 0.0
            self._since_s, self._cpu0 = now, cpu
            return False
        self._seen_s += now - last_s
        if owed_s < self.stall_s or self._seen_s < min(CONFIRM_S, self.stall_s):
            return False
        if cpu is None or self._cpu0 is None:
            return True
        used_s = cpu - self._cpu0
        blocked = used_s < BLOCKED_CPU_SHARE * (now - self._since_s)
        spinning = used_s >= SPIN_CPU_SHARE * self.stall_s
        return blocked or spinning

    def stalled_for_s(self) -> float:
        """The engine's own reading of how long it has owed progress (0 when it owes none)."""
        return self.backend.stalled_for_s() if self.supported else 0.0


def thread_stack(thread: Any) -> str:
    """Where a thread is now, as a formatted stack ('' when it is not running): the log of a stall shows it."""
    ident = getattr(thread, "ident", None)
    frame = sys._current_frames().get(ident) if ident is not None else None  # noqa: SLF001 - diagnosis only
    return "".join(traceback.format_stack(frame)) if frame is not None else ""
