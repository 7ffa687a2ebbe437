"""The call's way out: server events written in order, a client that stops reading ends the call; with
frames_per_event > 1, consecutive audio frames leave together in one `audio_batch` event."""

from __future__ import annotations

import asyncio
from typing import Any

from protos.voxpool.v1 import tts_pb2 as pb
from service.errors import ClientStalled


class Outbox:
    """Writes ServerEvents to the gRPC stream one at a time (frames, marks, turn events, warnings, errors).

    Packing (`pack_audio`): `write_audio` keeps frames back until frames_per_event of them are held, any other event
    is written (the held frames go first: events keep the order single frames would have), or the PacedSender
    flushes them (its pacer has nothing more to release now and their `send_by_s` came or it went idle)."""

    def __init__(self, context: Any, stall_timeout_s: float):
        self.context = context
        self.stall_timeout_s = stall_timeout_s
        self._lock = asyncio.Lock()
        self.frames_per_event = 1
        self._held: list[pb.AudioFrame] = []
        self.send_by_s: float | None = None  # the clock reading by which the held frames must be written

    @property
    def held_frames(self) -> int:
        """Frames given to `write_audio` and not yet written."""
        return len(self._held)

    def pack_audio(self, frames_per_event: int) -> None:
        """Write up to `frames_per_event` consecutive frames per event (1: each frame its own `audio` event)."""
        self.frames_per_event = max(1, int(frames_per_event))

    async def write_audio(self, frame: pb.AudioFrame, send_by_s: float) -> None:
        """Send one audio frame: at once, or packed with the next ones and written by `send_by_s` at the latest."""
        if self.frames_per_event == 1:
            await self.write(pb.ServerEvent(audio=frame))
            return
        async with self._lock:
            if not self._held:
                self.send_by_s = send_by_s
            self._held.append(frame)
            if len(self._held) >= self.frames_per_event:
                await self._write_held()

    async def flush(self) -> None:
        """Write the held frames now."""
        async with self._lock:
            await self._write_held()

    async def _write_held(self) -> None:
        if not self._held:
            return
        event = pb.ServerEvent(audio_batch=pb.AudioBatch(frames=self._held))
        await self._write(event)
        self._held = []
        self.send_by_s = None

    async def write(self, event: pb.ServerEvent) -> None:
        """Send one event (after the held frames); a client that does not read within the stall timeout ends the
        call (ClientStalled)."""
        async with self._lock:
            await self._write_held()
            await self._write(event)

    async def _write(self, event: pb.ServerEvent) -> None:
        try:
            # NOTE: asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that lands as the write
            # completes, and a task that outlives its call's teardown hangs the call (tests/service/test_call_teardown.py)
            async with asyncio.timeout(self.stall_timeout_s):
                await self.context.write(event)
        except TimeoutError:
            raise ClientStalled(
                f"client did not read for {self.stall_timeout_s:.0f} s; read the stream continuously"
            ) from None

    async def warn(self, code: str, message: str, turn_id: str = "") -> None:
        await self.write(pb.ServerEvent(warning=pb.Warning(code=code, message=message, turn_id=turn_id)))

    async def error(self, code: int, message: str, turn_id: str = "", retryable: bool = False) -> None:
        """A turn-scoped error (the call goes on)."""
        await self.write(pb.ServerEvent(error=pb.Error(code=code, message=message, turn_id=turn_id, retryable=retryable)))
