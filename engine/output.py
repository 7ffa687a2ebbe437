"""OutputStream: a request's audio as an async iterator on the event loop, fed from the engine thread."""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Callable

import numpy as np

from engine.request import AudioChunk, Finished, FinishReason, RequestTimings, now_s

logger = logging.getLogger(__name__)


class OutputStream:
    """Async iterator of `AudioChunk` events, then one `Finished` event (normal end or cancel).

    If the request fails, iteration raises the typed error (RequestFailed, EngineDead, ConsumerStalled,
    InvalidRequest) after the chunks already delivered; `finished` holds the final event in every case.

    Engine side (any thread): `publish_chunk` / `finish` hop onto the loop with `call_soon_threadsafe`.
    Loop side: iterate, `close()` (= cancel), or `async with stream:` (closes on exit).
    `unread_ms` (read by the engine thread) is the audio published but not yet taken by the consumer; the
    engine pauses a request whose stream holds more than `max_unread_audio_ms` (see engine/scheduler.py).
    """

    def __init__(
        self,
        request_id: str,
        sample_rate_hz: int,
        loop: asyncio.AbstractEventLoop,
        timings: RequestTimings,
        on_close: Callable[[str], None] | None = None,
        on_skip: Callable[[int], None] | None = None,
        on_hold: Callable[[int], None] | None = None,
    ) -> None:
        self.request_id = request_id
        self.sample_rate_hz = sample_rate_hz
        self.timings = timings  # the engine's live record (a copy is frozen into `finished`)
        self.finished: Finished | None = None
        self._loop = loop
        self._on_close = on_close
        self._events: collections.deque[AudioChunk | Finished] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._published_samples = 0  # written by the producer thread only
        self._consumed_samples = 0  # written by the loop only
        self._skipped_samples = 0  # written by the loop only: leading samples the consumer dropped unplayed
        self._on_skip = on_skip
        self._held_samples = 0  # written by the loop only: delivered samples the consumer holds, not yet queued to play
        self._on_hold = on_hold
        self._final_delivered = False
        self._closed = False

    # --- producer side (engine thread)

    @property
    def unread_ms(self) -> float:
        """Audio published but not yet consumed, in ms."""
        unread = self._published_samples - self._consumed_samples
        return 1000.0 * unread / float(self.sample_rate_hz)

    @property
    def skipped_samples(self) -> int:
        """Leading samples the consumer dropped (model silence before the first speech): they never play, so the
        engine's playback clock counts the request's audio this much shorter."""
        return self._skipped_samples

    def skip_leading(self, samples: int) -> None:
        """Loop side: the consumer dropped `samples` more of the request's leading samples unplayed."""
        if samples <= 0:
            return
        self._skipped_samples += samples
        if self._on_skip is not None:
            self._on_skip(samples)

    @property
    def held_samples(self) -> int:
        """Delivered samples the consumer still holds before its playback queue (a resampler's delay, a partial
        frame): they play later than the engine's playback clock assumes, so the stream's buffer is that much thinner."""
        return self._held_samples

    def hold(self, samples: int) -> None:
        """Loop side: the consumer now holds `samples` delivered samples not yet queued to play (an absolute count)."""
        self._held_samples = max(0, int(samples))
        if self._on_hold is not None:
            self._on_hold(self._held_samples)

    @property
    def closed(self) -> bool:
        """True once the consumer closed the stream or the final event was queued."""
        return self._closed

    def publish_chunk(self, chunk: AudioChunk) -> None:
        """Queue one chunk (thread-safe)."""
        if self._closed:
            return
        self._published_samples += len(chunk.samples)
        self._call(self._put, chunk)

    def finish(self, reason: FinishReason, error: BaseException | None, timings: RequestTimings) -> None:
        """Queue the final event (thread-safe); later calls are ignored."""
        self._call(self._put, Finished(reason, error, timings.copy()))

    def _call(self, fn: Callable[..., None], *args: object) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            logger.debug("request %s: event loop closed, event dropped", self.request_id)

    # --- loop side

    def _put(self, event: AudioChunk | Finished) -> None:
        if self.finished is not None:
            return
        if isinstance(event, Finished):
            self.finished = event
            self._closed = True
        self._events.append(event)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def close(self) -> None:
        """Stop listening: cancels the request (its slot is freed at the engine's next iteration)."""
        if self.finished is None:
            timings = self.timings.copy()
            timings.finished_s = now_s()
            self._events.clear()
            self._consumed_samples = self._published_samples
            self._put(Finished(FinishReason.CANCELLED, None, timings))
            if self._on_close is not None:
                self._on_close(self.request_id)
        self._closed = True

    def cancelled_by_engine(self) -> None:
        """Cancel noticed by the owner (AsyncEngine.cancel): drop unread audio, end with Finished(CANCELLED)."""
        on_close, self._on_close = self._on_close, None
        self.close()
        self._on_close = on_close

    def __aiter__(self) -> "OutputStream":
        return self

    async def __anext__(self) -> AudioChunk | Finished:
        while not self._events:
            if self._final_delivered:
                raise StopAsyncIteration
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        event = self._events.popleft()
        if isinstance(event, AudioChunk):
            self._consumed_samples += len(event.samples)
            return event
        self._final_delivered = True
        if event.error is not None:
            raise event.error
        return event

    async def __aenter__(self) -> "OutputStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def collect(self) -> tuple[np.ndarray, list[AudioChunk], Finished]:
        """Read to the end: (all samples float32 [N], the chunks, the Finished event); raises the typed error."""
        chunks: list[AudioChunk] = []
        final: Finished | None = None
        async for event in self:
            if isinstance(event, AudioChunk):
                chunks.append(event)
            else:
                final = event
        if final is None:  # cannot happen: the iterator stops only after a Finished event
            raise RuntimeError(f"request {self.request_id}: stream ended without a final event")
        audio = np.concatenate([c.samples for c in chunks]) if chunks else np.zeros(0, np.float32)
        return audio.astype(np.float32, copy=False), chunks, final
