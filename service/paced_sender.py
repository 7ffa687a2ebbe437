"""PacedSender: runs a Pacer on the event loop, sending each released or silence frame as the clock allows."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Generic, Protocol, TypeVar

from service.pacing import Action, ActionKind, Pacer

T = TypeVar("T")
_EPS_S = 1e-6


class HeldFrames(Protocol):
    """Where sent frames may wait to leave together (service/call/outbox.py packs frames into one event)."""

    held_frames: int  # frames sent but not yet written
    send_by_s: float | None  # the clock reading by which the held frames must be written (None: none held)

    async def flush(self) -> None: ...


class PacedSender(Generic[T]):
    """Runs a Pacer on the asyncio event loop: sends each released or silence frame through `send`.

    The Converse handler pushes frames (`push`), awaits room before synthesizing more
    (`wait_for_room`), calls `finish` at the end of a turn's audio and `clear` on barge-in, and runs
    `run()` as a task for the life of the call; `close()` ends it.

    `held`: frames that `send` may keep back to write several in one event. They are written as soon as the pacer
    has nothing more to release now and either goes idle or their `send_by_s` comes, so an event only ever groups
    frames whose release time has come.
    """

    def __init__(self, pacer: Pacer[T], send: Callable[[Action], Awaitable[None]],
                 held: HeldFrames | None = None) -> None:
        self.pacer = pacer
        self._send = send
        self._held = held
        self._wake = asyncio.Event()  # something changed: re-ask the pacer
        self._room = asyncio.Event()  # a frame left: look-ahead may have room again
        self._sending = False  # a released frame's send (and what its release makes due) is in progress

    @property
    def unsent_frames(self) -> int:
        """Frames queued in the pacer plus the one whose send is in progress: 0 only once everything pushed has
        been written (the call may end then without losing a frame, or the `turn_done` / `cleared` its send
        writes after it)."""
        held = self._held.held_frames if self._held is not None else 0
        return self.pacer.queued_frames + self._sending + held

    def push(self, item: T) -> None:
        """Queue one frame and wake the sender."""
        self.pacer.push(item)
        self._wake.set()

    def finish(self) -> None:
        """No more audio for now (end of a turn)."""
        self.pacer.finish()
        self._wake.set()

    def clear(self) -> list[T]:
        """Drop unreleased frames and return them; wakes the sender and any producer waiting for room."""
        dropped = self.pacer.clear()
        self._wake.set()
        self._room.set()
        return dropped

    def close(self) -> None:
        """Stop `run` (after the send in progress, if any)."""
        self.pacer.close()
        self._wake.set()
        self._room.set()

    async def wait_for_room(self) -> None:
        """Return once the pacer wants more audio (ahead of playback < max_ahead_ms) or is closed."""
        while not self.pacer.closed and not self.pacer.wants_more():
            self._room.clear()
            try:  # asyncio.timeout, not wait_for: wait_for (3.11) may swallow a cancel that lands with the wake-up
                async with asyncio.timeout(self.pacer.frame_ms / 1000.0):
                    await self._room.wait()
            except TimeoutError:
                pass

    async def run(self) -> None:
        """Release frames on the pacer's clock until `close`; exceptions from `send` propagate."""
        while True:
            self._wake.clear()
            action = self.pacer.next_action()
            if action.kind is ActionKind.CLOSED:
                return
            if action.kind in (ActionKind.RELEASE, ActionKind.SILENCE):
                self._sending = True
                try:
                    await self._send(action)
                finally:
                    self._sending = False
                self._room.set()
                continue
            timeout = None
            if action.kind is ActionKind.WAIT:
                timeout = max(0.0, action.at_s - self.pacer.clock())
            if self._held is not None and self._held.send_by_s is not None:
                left_s = self._held.send_by_s - self.pacer.clock()
                if action.kind is ActionKind.IDLE or left_s <= _EPS_S:
                    self._sending = True
                    try:
                        await self._held.flush()
                    finally:
                        self._sending = False
                    continue
                timeout = left_s if timeout is None else min(timeout, left_s)
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass
