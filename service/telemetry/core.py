"""Telemetry: one per server; owns tracing and metrics, starts each call's recorder, wraps the call handlers."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc

from service.telemetry.calls import CallTelemetry, _current
from service.telemetry.metrics import Metrics, NullMetrics
from service.telemetry.privacy import set_log_caller_text
from service.telemetry.tracing import Tracing, metadata_dict, provider_from_env

log = logging.getLogger(__name__)


class Telemetry:
    """Tracing (on when OTEL_* variables ask for it, or given a provider) and metrics (on when metrics_port > 0)."""

    def __init__(self, cfg: Any, *, tracer_provider: Any | None = None, environ: Mapping[str, str] | None = None,
                 metrics: Metrics | None = None):
        self.cfg = cfg
        set_log_caller_text(getattr(cfg, "log_caller_text", False))
        self._owns_provider = tracer_provider is None
        provider = tracer_provider if tracer_provider is not None else provider_from_env(environ)
        self.tracing = Tracing(provider)
        if metrics is not None:
            self.metrics: Metrics | NullMetrics = metrics
        elif cfg.metrics_port > 0:
            self.metrics = Metrics()
        else:
            self.metrics = NullMetrics()
        self.metrics_port = 0

    # ------------------------------------------------------------------ wiring

    def bind_server(self, active_calls: Callable[[], int], max_calls: int) -> None:
        """Gauges read at scrape time: active calls, slots, utilization (= active / server.max_calls)."""
        self.metrics.bind_calls(active_calls, max_calls)

    def attach_engine(self, engine: Any) -> None:
        """Feed the engine's iteration stats to the metrics (before the engine starts) and read its counters.

        The engine takes observers at construction; a server handed a built engine appends to its observer
        fan-out. Nothing is attached when metrics are off, so the engine thread does no telemetry work.
        """
        if not self.metrics.enabled:
            return
        backend = getattr(engine, "backend", engine)
        fanout = getattr(backend, "observer", None)
        observers = getattr(fanout, "observers", None)
        if isinstance(observers, list) and self.metrics.engine_observer not in observers:
            observers.append(self.metrics.engine_observer)
        else:
            log.warning("engine %r has no observer fan-out: engine iteration metrics are off", type(backend).__name__)
        config = getattr(backend, "config", None)
        self.metrics.bind_engine(engine.counters, getattr(config, "max_slots", None))

    async def start(self, host: str) -> None:
        """Open the metrics endpoint (telemetry.metrics_port) when metrics are on."""
        if self.metrics.enabled and self.cfg.metrics_port > 0:
            loop = asyncio.get_running_loop()
            self.metrics_port = await loop.run_in_executor(None, self.metrics.serve, host, self.cfg.metrics_port)

    async def stop(self) -> None:
        """Close the metrics endpoint and flush the span exporters."""
        loop = asyncio.get_running_loop()
        if self.metrics.enabled:
            await loop.run_in_executor(None, self.metrics.stop)
        if self._owns_provider:
            await loop.run_in_executor(None, self.tracing.shutdown)

    # ------------------------------------------------------------------ calls

    def start_call(self, method: str, context: Any) -> CallTelemetry:
        """The recorder of one call: the server span starts now, parented on the caller's trace context."""
        try:
            headers = metadata_dict(context.invocation_metadata())
        except Exception:  # noqa: BLE001 - a context without metadata (tests, in-process calls)
            headers = {}
        try:
            peer = context.peer() or ""
        except Exception:  # noqa: BLE001
            peer = ""
        return CallTelemetry(method, self.tracing.tracer, self.metrics, headers, peer)


def _final_code(context: Any, default: grpc.StatusCode) -> str:
    try:
        code = context.code()
    except Exception:  # noqa: BLE001
        code = None
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):
        return next((c.name for c in grpc.StatusCode if c.value[0] == code), default.name)
    return default.name


def _deadline_passed(context: Any) -> bool:
    """Whether the client's deadline is what cancelled the handler."""
    try:
        remaining = context.time_remaining()
    except Exception:  # noqa: BLE001 - a context without a deadline API
        return False
    return remaining is not None and remaining <= 0


def traced_call(method: str) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """Decorate a TtsServicer streaming handler: one CallTelemetry per call, ended with the call's status.

    The handler's servicer must have `deps.telemetry` (a Telemetry, or None for no telemetry).
    """

    def wrap(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(handler)
        async def run(self: Any, request: Any, context: Any) -> Any:
            hub: Telemetry | None = getattr(getattr(self, "deps", None), "telemetry", None)
            if hub is None:
                return await handler(self, request, context)
            call = hub.start_call(method, context)
            token = _current.set(call)
            try:
                result = await handler(self, request, context)
            except asyncio.CancelledError:
                call.end("DEADLINE_EXCEEDED" if _deadline_passed(context) else "CANCELLED")
                raise
            except grpc.aio.AbortError as abort:  # the servicer mapped an exception to a status: keep it for the span
                call.end(_final_code(context, grpc.StatusCode.UNKNOWN), abort.__context__)
                raise
            except BaseException as exc:
                call.end("UNKNOWN", exc)  # what grpc answers for an exception a handler lets out
                raise
            else:
                call.end(_final_code(context, grpc.StatusCode.OK))
                return result
            finally:
                _current.reset(token)

        return run

    return wrap
