"""Per-call telemetry: the server span, turn and segment child spans, the call's figures, metrics and end-of-call log."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from service import figures
from service.telemetry.metrics import NullMetrics
from service.telemetry.segments import SegmentTrace, TurnTrace, never_raises, wall_ns
from service.telemetry.tracing import (
    RPC_SERVICE,
    SERVER_ERROR_CODES,
    parent_context,
    span_ids,
)

log = logging.getLogger("service.telemetry.calls")


_current: ContextVar[CallTelemetry | None] = ContextVar("voxpool_call_telemetry", default=None)


def current_call() -> CallTelemetry | None:
    """The CallTelemetry of the gRPC call this task serves (None outside calls)."""
    return _current.get()


def bind_call(session_id: str) -> CallTelemetry:
    """The current call's telemetry, now knowing its session id; a detached recorder outside a traced call."""
    call = _current.get()
    if call is None:
        call = CallTelemetry("", None, NullMetrics(), {}, "", emit_log=False)
    call.bind(session_id)
    return call


def outcome_for(code: str, admitted: bool) -> str:
    """ok | cancelled | shed (refused before admission: full) | server_error (semconv set) | client_error."""
    if code == "OK":
        return "ok"
    if code == "CANCELLED":
        return "cancelled"
    if code == "RESOURCE_EXHAUSTED" and not admitted:
        return "shed"
    if code in SERVER_ERROR_CODES:
        return "server_error"
    return "client_error"


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _peer(peer: str) -> dict[str, Any]:
    """'ipv4:127.0.0.1:5000' / 'ipv6:[::1]:5000' → network.peer.* attributes."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6") or ":" not in rest:
        return {}
    addr, _, port = rest.rpartition(":")
    try:
        return {"network.peer.address": addr.strip("[]"), "network.peer.port": int(port)}
    except ValueError:
        return {}


class CallTelemetry:
    """Everything observed about one Converse/Synthesize call; `end()` records it once."""

    def __init__(self, method: str, tracer: Any, metrics: Any, headers: Mapping[str, str], peer: str,
                 emit_log: bool = True):
        self.method = method
        self.metrics = metrics
        self.emit_log = emit_log
        self.started_s = time.monotonic()
        self.request_id = headers.get("x-request-id", "")
        self.session_id = ""
        self.settings: Any = None
        self.span: Any = None
        self.exemplar: dict[str, str] | None = None
        self.ended = False
        self._turns: dict[int, TurnTrace] = {}
        self.late_events = 0
        self.max_lateness_s = 0.0
        self.turns = {"done": 0, "cleared": 0, "failed": 0, "abandoned": 0}
        self.first_ttfa_ms: float | None = None
        self.first_ttfs_ms: float | None = None  # time to first speech of the call's first turn with speech
        self.max_ttfa_ms: float | None = None
        self.audio_ms = 0
        self.silence_ms = 0
        self.dropped_ms = 0
        self.underruns = 0
        self.chunks = 0
        self.late_chunks = 0
        self.turns_with_chunks = 0
        self.turns_on_time = 0
        self.synth_s = 0.0
        self.synth_audio_s = 0.0
        self.segments = 0
        self.text_chars = 0
        parent = parent_context(headers) if headers else None
        if tracer is not None:
            attrs = {"rpc.system": "grpc", "rpc.service": RPC_SERVICE, "rpc.method": method, **_peer(peer)}
            if self.request_id:
                attrs["voxpool.request_id"] = self.request_id
            self.span = tracer.start_span(f"{RPC_SERVICE}/{method}", context=parent, kind=SpanKind.SERVER,
                                          attributes=attrs)
            self._tracer = tracer
            self._ctx = trace.set_span_in_context(self.span)
            self.trace_id, self.span_id = span_ids(self.span)
            if self.span.get_span_context().trace_flags.sampled and metrics.enabled:
                self.exemplar = {"trace_id": self.trace_id}
        else:
            self._tracer = None
            self._ctx = None
            self.trace_id, self.span_id = span_ids(parent) if parent is not None else ("", "")

    # ------------------------------------------------------------------ call

    def bind(self, session_id: str) -> None:
        """The call was admitted and got its session id."""
        self.session_id = session_id
        if self.span is not None:
            self.span.set_attribute("voxpool.session_id", session_id)

    @never_raises()
    def configured(self, settings: Any) -> None:
        """The negotiated session settings (service.negotiation.SessionSettings)."""
        self.settings = settings
        if self.span is not None:
            self.span.set_attributes({
                "tts.voice": settings.voice.name, "tts.encoding": settings.encoding,
                "tts.sample_rate_hz": settings.sample_rate_hz, "tts.frame_ms": settings.frame_ms,
                "tts.pacing": settings.pacing,
            })

    @property
    def frame_ms(self) -> int:
        return self.settings.frame_ms if self.settings is not None else 0

    # ------------------------------------------------------------------ turns and segments

    def _turn(self, turn: Any) -> TurnTrace:
        tt = self._turns.get(id(turn))
        if tt is None or tt.turn is not turn:
            span = None
            if self._tracer is not None:
                now_mono, now_ns = time.monotonic(), time.time_ns()
                start = wall_ns(getattr(turn, "trigger_s", None), now_mono, now_ns)
                span = self._tracer.start_span("voxpool.turn", context=self._ctx,
                                               attributes={"tts.turn_id": turn.turn_id}, start_time=start)
            tt = TurnTrace(self, turn, span)
            self._turns[id(turn)] = tt
        return tt

    def segment_started(self, turn: Any, segment: Any) -> SegmentTrace:
        """A segment of `turn` goes to the frontend now."""
        tt = self._turn(turn)
        tt.segments += 1
        self.segments += 1
        chars = len(segment.text)
        span = None
        if tt.span is not None:
            span = self._tracer.start_span("voxpool.segment", context=trace.set_span_in_context(tt.span),
                                           attributes={"tts.segment.index": tt.segments, "tts.segment.chars": chars})
        seg = SegmentTrace(tt, tt.segments, chars, span)
        tt.open_segments.add(seg)
        return seg

    def text_received(self, chars: int) -> None:
        """Text the call accepted into a turn (every character received, spoken or not)."""
        self.text_chars += chars

    def turn_done(self, turn: Any) -> None:
        """Every frame of the turn was released (turn_done sent)."""
        self._end_turn(turn, "done")

    def turn_cleared(self, turn: Any) -> None:
        """Barge-in ended the turn (cleared sent)."""
        self._end_turn(turn, "cleared")

    def turn_failed(self, turn: Any, message: str) -> None:
        """An in-band error ended the turn. `message` is the client's (it may quote caller text): the span never
        carries it (service/telemetry/privacy.py)."""
        self._end_turn(turn, "failed")

    @never_raises()
    def _end_turn(self, turn: Any, outcome: str) -> None:
        tt = self._turns.pop(id(turn), None)
        if tt is None or tt.turn is not turn:
            if outcome == "abandoned":
                return
            tt = self._turn(turn)
            self._turns.pop(id(turn), None)
        tt.active = False
        for seg in list(tt.open_segments):
            seg.end("failed" if outcome == "failed" else "cancelled")
        frame_ms = self.frame_ms
        ttfa_ms = turn.ttfa_ms
        ttfs_ms = turn.ttfs_ms
        if ttfs_ms is not None and self.first_ttfs_ms is None:
            self.first_ttfs_ms = ttfs_ms
        if ttfa_ms is not None:
            if self.first_ttfa_ms is None:
                self.first_ttfa_ms = ttfa_ms
            self.max_ttfa_ms = ttfa_ms if self.max_ttfa_ms is None else max(self.max_ttfa_ms, ttfa_ms)
        audio_ms = turn.audio_frames * frame_ms
        silence_ms = turn.silence_frames * frame_ms
        dropped_ms = turn.dropped_frames * frame_ms if outcome == "cleared" else 0
        rtf = tt.synth_s / tt.synth_audio_s if tt.synth_audio_s > 0 else None
        self.turns[outcome] += 1
        self.audio_ms += audio_ms
        self.silence_ms += silence_ms
        self.dropped_ms += dropped_ms
        self.underruns += turn.underruns
        self.chunks += turn.chunks
        self.late_chunks += turn.late_chunks
        if turn.chunks:
            self.turns_with_chunks += 1
            self.turns_on_time += figures.fully_on_time(turn.chunks, turn.late_chunks, turn.underruns)
        self.synth_s += tt.synth_s
        self.synth_audio_s += tt.synth_audio_s
        self.metrics.turn_ended(outcome, None if ttfa_ms is None else ttfa_ms / 1000.0, rtf, audio_ms / 1000.0,
                                turn.underruns, turn.late_chunks, turn.chunks, dropped_ms / 1000.0, self.exemplar)
        span = tt.span
        if span is None:
            return
        now_mono, now_ns = time.monotonic(), time.time_ns()
        if turn.first_audio_s is not None:
            span.add_event("first_audio", timestamp=wall_ns(turn.first_audio_s, now_mono, now_ns))
        attrs: dict[str, Any] = {
            "tts.turn.outcome": outcome, "tts.audio_ms": audio_ms, "tts.underruns": turn.underruns,
            "tts.silence_ms": silence_ms, "tts.chunks": turn.chunks, "tts.late_chunks": turn.late_chunks,
            "tts.segments": tt.segments, "tts.text_chars": len(turn.text),
        }
        on_time = figures.on_time_fraction(turn.chunks, turn.late_chunks, turn.underruns)
        if on_time is not None:
            attrs["tts.on_time_fraction"] = round(on_time, 4)
        if ttfa_ms is not None:
            attrs["tts.ttfa_ms"] = round(ttfa_ms, 2)
        if ttfs_ms is not None:
            attrs["tts.ttfs_ms"] = round(ttfs_ms, 2)
        if rtf is not None:
            attrs["tts.rtf"] = round(rtf, 4)
        if outcome == "cleared":
            attrs["tts.dropped_audio_ms"] = dropped_ms
            span.add_event("cleared", {"tts.text_spoken_chars": turn.released_pos})
        span.set_attributes(attrs)
        if outcome == "failed":
            span.set_status(Status(StatusCode.ERROR, "turn failed"))
        span.end()

    # ------------------------------------------------------------------ end

    def figures(self, code: str, outcome: str) -> dict[str, Any]:
        """The call's figures (the end-of-call log line and the span attributes share them)."""
        s = self.settings
        turns_total = sum(self.turns.values())
        out: dict[str, Any] = {
            "method": self.method, "session_id": self.session_id, "grpc_code": code, "outcome": outcome,
            "duration_s": round(time.monotonic() - self.started_s, 3),
        }
        if s is not None:
            out.update(voice=s.voice.name, encoding=s.encoding, sample_rate_hz=s.sample_rate_hz,
                       frame_ms=s.frame_ms, pacing=s.pacing)
        out.update(
            turns=turns_total, turns_done=self.turns["done"], turns_cleared=self.turns["cleared"],
            turns_failed=self.turns["failed"], segments=self.segments, text_chars=self.text_chars,
            ttfa_ms=None if self.first_ttfa_ms is None else round(self.first_ttfa_ms, 1),
            ttfa_ms_max=None if self.max_ttfa_ms is None else round(self.max_ttfa_ms, 1),
            ttfs_ms=None if self.first_ttfs_ms is None else round(self.first_ttfs_ms, 1),
            audio_ms=self.audio_ms, silence_ms=self.silence_ms, dropped_audio_ms=self.dropped_ms,
            rtf=round(self.synth_s / self.synth_audio_s, 4) if self.synth_audio_s > 0 else None,
            underruns=self.underruns, chunks=self.chunks, late_chunks=self.late_chunks,
            on_time_fraction=_rounded(figures.on_time_fraction(self.chunks, self.late_chunks, self.underruns)),
            turns_on_time_fraction=(round(self.turns_on_time / self.turns_with_chunks, 4)
                                    if self.turns_with_chunks else None),
            max_chunk_lateness_ms=round(self.max_lateness_s * 1000.0, 1),
            cleared=self.turns["cleared"] > 0, cancelled=code == "CANCELLED",
        )
        return out

    @never_raises(default={})
    def end(self, code: str, error: BaseException | None = None) -> dict[str, Any]:
        """Record the call once: metrics, span (status, attributes), the end-of-call log line; returns the figures."""
        if self.ended:
            return {}
        self.ended = True
        for tt in list(self._turns.values()):
            self._end_turn(tt.turn, "abandoned")
        admitted = bool(self.session_id)
        outcome = outcome_for(code, admitted)
        figures = self.figures(code, outcome)
        self.metrics.call_ended(self.method, outcome, code, figures["duration_s"])
        if self.span is not None:
            import grpc

            attrs = {f"tts.{k}": v for k, v in figures.items()
                     if v is not None and k not in ("method", "session_id", "grpc_code", "duration_s")}
            attrs["rpc.grpc.status_code"] = getattr(grpc.StatusCode, code).value[0]
            self.span.set_attributes(attrs)
            if code in SERVER_ERROR_CODES:
                if error is not None:  # the type only: an exception's message may quote caller text
                    self.span.add_event("exception", {"exception.type": type(error).__qualname__})
                self.span.set_status(Status(StatusCode.ERROR, code))
            self.span.end()
        if self.emit_log:
            level = logging.DEBUG if outcome == "shed" else logging.INFO
            if log.isEnabledFor(level):
                text = " ".join(f"{k}={v}" for k, v in figures.items() if v is not None)
                log.log(level, "call ended: %s", text, extra={"call": figures})
        return figures
