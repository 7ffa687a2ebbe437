"""Turn and segment traces of a call: child spans and synthesis totals; telemetry hooks that never fail a call."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from opentelemetry.trace import Status, StatusCode

from service import figures

log = logging.getLogger("service.telemetry.calls")

MAX_LATE_EVENTS = 10  # chunk_late span events per call
LATE_EVENT_S = 0.1  # a chunk later than this gets a span event
_F = TypeVar("_F", bound=Callable[..., Any])
_warned: set[str] = set()


def never_raises(default: Any = None) -> Callable[[_F], _F]:
    """Telemetry must not fail a call: log the first exception of each hook, return `default`."""

    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception:
                if fn.__qualname__ not in _warned:
                    _warned.add(fn.__qualname__)
                    log.exception("telemetry hook %s failed; ignored (logged once)", fn.__qualname__)
                return default

        return run  # type: ignore[return-value]

    return wrap


def wall_ns(mono_s: float | None, now_mono: float, now_ns: int) -> int | None:
    """A time.monotonic() reading as epoch nanoseconds (span timestamps)."""
    if mono_s is None:
        return None
    return now_ns - int((now_mono - mono_s) * 1e9)


class SegmentTrace:
    """One segment: frontend → engine submit → first chunk → last chunk (a child span of its turn when tracing)."""

    __slots__ = (
        "audio_s",
        "chars",
        "chunks",
        "ended",
        "finish",
        "first_chunk_s",
        "frontend_s",
        "held_s",
        "ids",
        "index",
        "last_chunk_s",
        "late_chunks",
        "queue_ms",
        "span",
        "started_s",
        "submitted_s",
        "turn",
    )

    def __init__(self, turn: TurnTrace, index: int, chars: int, span: Any):
        self.turn = turn
        self.index = index
        self.chars = chars
        self.span = span
        self.started_s = time.monotonic()
        self.frontend_s: float | None = None
        self.submitted_s: float | None = None
        self.first_chunk_s: float | None = None
        self.last_chunk_s: float | None = None
        self.held_s = 0.0
        self.audio_s = 0.0
        self.chunks = 0
        self.late_chunks = 0
        self.ids = 0
        self.queue_ms: float | None = None
        self.finish = ""
        self.ended = False

    def frontend_done(self, ids: int) -> None:
        """Text → ids finished."""
        self.frontend_s = time.monotonic()
        self.ids = ids
        if self.span is not None:
            self.span.add_event("frontend_done", {"tts.segment.ids": ids})

    def submitted(self, request_id: str) -> None:
        """The engine took the request."""
        self.submitted_s = time.monotonic()
        if self.span is not None:
            self.span.set_attribute("tts.engine.request_id", request_id)
            self.span.add_event("submitted")

    def chunk(self, lateness_s: float, duration_s: float) -> None:
        """An engine chunk arrived; `lateness_s` = arrival − (first arrival + audio received before it)."""
        now = time.monotonic()
        if self.first_chunk_s is None:
            self.first_chunk_s = now
            if self.span is not None:
                self.span.add_event("first_chunk")
        self.last_chunk_s = now
        self.chunks += 1
        self.audio_s += duration_s
        call = self.turn.call
        if figures.is_late(lateness_s):
            self.late_chunks += 1
            call.max_lateness_s = max(call.max_lateness_s, lateness_s)
            if lateness_s > LATE_EVENT_S and self.turn.span is not None and call.late_events < MAX_LATE_EVENTS:
                call.late_events += 1
                self.turn.span.add_event("chunk_late", {"tts.lateness_ms": round(lateness_s * 1000.0, 1),
                                                        "tts.segment.index": self.index})
        call.metrics.chunk(lateness_s, call.exemplar)

    def held(self, seconds: float) -> None:
        """The call held the stream back this long (pacing look-ahead full): not synthesis time."""
        self.held_s += seconds

    @never_raises()
    def finished(self, event: Any) -> None:
        """The engine's Finished event (reason, timings)."""
        timings = getattr(event, "timings", None)
        self.finish = str(getattr(getattr(event, "reason", None), "value", ""))
        if timings is not None:
            self.queue_ms = timings.queue_ms
        if self.span is not None:
            attrs: dict[str, Any] = {"tts.engine.finish": self.finish}
            if timings is not None:
                if timings.queue_ms is not None:
                    attrs["tts.engine.queue_ms"] = round(timings.queue_ms, 2)
                if timings.ttfa_ms is not None:
                    attrs["tts.engine.ttfa_ms"] = round(timings.ttfa_ms, 2)
                attrs["tts.engine.decoder_steps"] = timings.decoder_steps
            self.span.set_attributes(attrs)

    @property
    def synth_s(self) -> float:
        """Submit → last chunk, minus the time the call held the stream back."""
        if self.submitted_s is None or self.last_chunk_s is None:
            return 0.0
        return max(0.0, self.last_chunk_s - self.submitted_s - self.held_s)

    @never_raises()
    def end(self, outcome: str = "") -> None:
        """Close the segment (idempotent); outcome completed | cancelled | skipped | failed."""
        if self.ended:
            return
        self.ended = True
        if not outcome:  # the engine's finish reason; no Finished event: cut short by the turn's end, or an error
            outcome = self.finish or ("failed" if self.turn.turn.active else "cancelled")
        turn = self.turn
        turn.synth_s += self.synth_s
        turn.synth_audio_s += self.audio_s
        turn.open_segments.discard(self)
        if self.span is None:
            return
        attrs: dict[str, Any] = {
            "tts.segment.outcome": outcome, "tts.segment.chunks": self.chunks,
            "tts.segment.late_chunks": self.late_chunks, "tts.segment.audio_ms": round(self.audio_s * 1000.0, 1),
        }
        if self.frontend_s is not None:
            attrs["tts.segment.frontend_ms"] = round((self.frontend_s - self.started_s) * 1000.0, 2)
        if self.submitted_s is not None and self.first_chunk_s is not None:
            attrs["tts.segment.first_chunk_ms"] = round((self.first_chunk_s - self.submitted_s) * 1000.0, 2)
        if self.last_chunk_s is not None:
            self.span.add_event("last_chunk", timestamp=wall_ns(self.last_chunk_s, time.monotonic(), time.time_ns()))
        if self.audio_s > 0:
            attrs["tts.segment.rtf"] = round(self.synth_s / self.audio_s, 4)
        self.span.set_attributes(attrs)
        if outcome == "failed":
            self.span.set_status(Status(StatusCode.ERROR, "segment failed"))
        self.span.end()


class TurnTrace:
    """One turn's span and synthesis totals (the Turn object itself holds the playout counts)."""

    __slots__ = ("active", "call", "open_segments", "segments", "span", "synth_audio_s", "synth_s", "turn")

    def __init__(self, call: Any, turn: Any, span: Any):
        self.call = call
        self.turn = turn
        self.span = span
        self.segments = 0
        self.open_segments: set[SegmentTrace] = set()
        self.synth_s = 0.0
        self.synth_audio_s = 0.0
        self.active = True


