"""An asyncio event loop on a virtual clock: when nothing is ready, time jumps to the next timer (sleeps cost nothing)."""

from __future__ import annotations

import asyncio
import selectors
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")
_STUCK_S = 10.0  # real seconds with no timer and no I/O before the loop gives up (a test that waits forever)


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; when nothing is ready, advances the owning loop's clock by the timeout instead."""

    loop: "VirtualTimeLoop | None" = None

    def select(self, timeout: float | None = None) -> list:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # no timer pending: only another thread (call_soon_threadsafe) can wake the loop
            ready = super().select(_STUCK_S)
            if not ready:
                raise RuntimeError(f"virtual-time loop: nothing scheduled and no I/O for {_STUCK_S} s (deadlock)")
            return ready
        assert self.loop is not None
        self.loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """`time()` starts at 0 and moves only when every ready callback has run: asyncio.sleep, wait_for timeouts and
    call_later fire in exactly the order and at exactly the virtual times they ask for, whatever the machine load."""

    def __init__(self) -> None:
        selector = _JumpingSelector()
        super().__init__(selector)
        selector.loop = self
        self._now_s = 0.0

    def time(self) -> float:
        return self._now_s

    def advance(self, seconds: float) -> None:
        self._now_s += max(0.0, seconds)


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a fresh VirtualTimeLoop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
