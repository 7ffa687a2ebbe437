"""Engines that stand between a test server's edge and its real engine: every call passes through, and each
request's stream can have its events changed or delayed on the way (a stalled chunk, quiet leading audio)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable


class StreamWrapper:
    """An engine stream whose events pass through `on_event` (a coroutine that returns the event to deliver);
    closing and the consumer's reports (skip_leading) reach the real stream."""

    def __init__(self, inner: Any, on_event: Callable[[Any], Awaitable[Any]]):
        self.inner = inner
        self.on_event = on_event

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __aiter__(self) -> "StreamWrapper":
        return self

    async def __anext__(self) -> Any:
        return await self.on_event(await self.inner.__anext__())

    def close(self) -> None:
        self.inner.close()

    def skip_leading(self, samples: int) -> None:
        self.inner.skip_leading(samples)


class EngineWrapper:
    """Wraps the engine: attributes pass through; `submit` hands out `wrap(stream)` (the stream itself here)."""

    def __init__(self, engine: Any):
        self.engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def submit(self, request: Any) -> Any:
        return self.wrap(self.engine.submit(request))

    def wrap(self, stream: Any) -> Any:
        return stream
