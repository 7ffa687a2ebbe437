"""OpenTelemetry tracing: a tracer provider from the standard OTEL_* variables (off unless set), W3C extraction."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagate import extract
from opentelemetry.propagators.textmap import Getter

log = logging.getLogger(__name__)

SERVICE_NAME = "voxpool"
RPC_SERVICE = "voxpool.v1.Tts"
# gRPC status codes that the RPC semantic conventions count as server errors (span status ERROR).
SERVER_ERROR_CODES = frozenset({"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS"})

_OTLP_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class TracingConfigError(ValueError):
    """An OTEL_* variable asks for something this build cannot do (e.g. an exporter that is not installed)."""


def tracing_requested(environ: Mapping[str, str]) -> list[str]:
    """Span exporter names the environment asks for ([] = tracing off).

    Off unless `OTEL_TRACES_EXPORTER` names an exporter or an OTLP endpoint is set
    (`OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); `OTEL_SDK_DISABLED=true` wins.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = environ.get("OTEL_TRACES_EXPORTER")
    if names is None:
        return ["otlp"] if any(environ.get(v) for v in _OTLP_VARS) else []
    return [n.strip().lower() for n in names.split(",") if n.strip() and n.strip().lower() != "none"]


def _otlp_exporter(environ: Mapping[str, str]) -> Any:
    protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "grpc").strip().lower()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter,
        )

        return OTLPSpanExporter()  # endpoint, headers, TLS, timeout, compression: OTEL_EXPORTER_OTLP_* variables
    if protocol == "http/protobuf":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter as HttpExporter,
            )
        except ImportError:
            raise TracingConfigError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf needs opentelemetry-exporter-otlp-proto-http; "
                "install it or use grpc"
            ) from None
        return HttpExporter()
    raise TracingConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: use grpc or http/protobuf")


def provider_from_env(environ: Mapping[str, str] | None = None) -> Any | None:
    """An SDK TracerProvider with a batch processor per requested exporter, or None when tracing is off.

    The SDK reads the rest of the standard variables itself: OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
    OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*, OTEL_EXPORTER_OTLP_*. The service name defaults to "voxpool".
    """
    env = os.environ if environ is None else environ
    names = tracing_requested(env)
    if not names:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    from service.version import VERSION

    resource = Resource.create({"service.version": VERSION})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    for name in names:
        if name == "otlp":
            exporter = _otlp_exporter(env)
        elif name == "console":
            exporter = ConsoleSpanExporter()
        else:
            raise TracingConfigError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r}; use otlp, console or none")
        provider.add_span_processor(BatchSpanProcessor(exporter))
    log.info("tracing on: exporters %s", ", ".join(names))
    return provider


class _MetadataGetter(Getter[Mapping[str, str]]):
    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(key)
        return [value] if value is not None else None

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return list(carrier)


_GETTER = _MetadataGetter()


def metadata_dict(metadata: Iterable[Any] | None) -> dict[str, str]:
    """gRPC invocation metadata as {lowercase key: str value} (binary `-bin` entries are skipped)."""
    out: dict[str, str] = {}
    for item in metadata or ():
        key, value = item[0], item[1]
        if isinstance(value, str):
            out[key.lower()] = value
    return out


def parent_context(headers: Mapping[str, str]) -> Context | None:
    """The caller's trace context (W3C `traceparent`/`tracestate`, or whatever OTEL_PROPAGATORS names)."""
    if "traceparent" not in headers and "b3" not in headers and "x-b3-traceid" not in headers:
        return None
    ctx = extract(headers, getter=_GETTER)
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


class Tracing:
    """The tracer (None when tracing is off: nothing is created on the call path)."""

    def __init__(self, provider: Any | None = None):
        self.provider = provider
        self.tracer = provider.get_tracer("voxpool.service") if provider is not None else None

    @property
    def enabled(self) -> bool:
        """Whether spans are created."""
        return self.tracer is not None

    def shutdown(self) -> None:
        """Flush and stop the exporters (end of the process)."""
        provider, self.provider = self.provider, None
        if provider is not None and hasattr(provider, "shutdown"):
            provider.shutdown()


def span_ids(span_or_ctx: Any) -> tuple[str, str]:
    """(trace id, span id) as lowercase hex of a span or context; ("", "") when invalid."""
    if isinstance(span_or_ctx, Context):
        span_or_ctx = trace.get_current_span(span_or_ctx)
    sc = span_or_ctx.get_span_context()
    if not sc.is_valid:
        return "", ""
    return format(sc.trace_id, "032x"), format(sc.span_id, "016x")
