"""The call's way out: server events written in order, a client that stops reading ends the call."""

from __future__ import annotations

import asyncio
from typing import Any

from protos.voxpool.v1 import tts_pb2 as pb
from service.errors import ClientStalled


class Outbox:
    """Writes ServerEvents to the gRPC stream one at a time (frames, marks, turn events, warnings, errors)."""

    def __init__(self, context: Any, stall_timeout_s: float):
        self.context = context
        self.stall_timeout_s = stall_timeout_s
        self._lock = asyncio.Lock()

    async def write(self, event: pb.ServerEvent) -> None:
        """Send one event; a client that does not read within the stall timeout ends the call (ClientStalled)."""
        async with self._lock:
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
