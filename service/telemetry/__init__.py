"""Observability: a server span per call (TTFA, streaming viability), Prometheus metrics, structured logs."""

from service.telemetry.calls import (
    CallTelemetry,
    SegmentTrace,
    bind_call,
    current_call,
    outcome_for,
)
from service.telemetry.core import Telemetry, traced_call
from service.telemetry.logs import configure_logging

__all__ = [
    "CallTelemetry", "SegmentTrace", "Telemetry", "bind_call", "configure_logging", "current_call", "outcome_for",
    "traced_call",
]
