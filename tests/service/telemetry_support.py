"""Test helpers for telemetry: a real server (tiny voice, port 0) with an in-memory span exporter and /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import urllib.request

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def memory_tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider that keeps every finished span in memory (exported synchronously on end)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def telemetry_server(provider=None, metrics: bool = False, **overrides):
    """Start a VoxpoolServer (tiny voice) whose Telemetry uses `provider` and, with `metrics`, a /metrics port."""
    from engine.async_engine import AsyncEngine
    from models.voices.bundle import tiny_voice
    from service.config import load_config
    from service.server import VoxpoolServer, engine_config
    from service.telemetry import Telemetry

    decoder_steps = overrides.pop("decoder_steps", 40)
    cfg = load_config(None, environ={})
    cfg.server.port = 0
    cfg.server.host = "127.0.0.1"
    cfg.voice.default = "tiny"
    cfg.engine = {"max_slots": 8, **overrides.pop("engine", {})}
    if metrics:
        cfg.telemetry.metrics_port = free_port()
    for section, values in overrides.items():
        for k, v in values.items():
            setattr(getattr(cfg, section), k, v)
    voices = {"tiny": tiny_voice(decoder_steps=decoder_steps)}
    engine = AsyncEngine.from_config(engine_config(cfg), voices=voices)
    telemetry = Telemetry(cfg.telemetry, tracer_provider=provider, environ={})
    server = VoxpoolServer(cfg, engine, voices, telemetry=telemetry)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def scrape(port: int, openmetrics: bool = False) -> str:
    """GET /metrics from the server's metrics port (off the event loop)."""
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}

    def get() -> str:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.read().decode()

    return await asyncio.get_running_loop().run_in_executor(None, get)


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text exposition (None when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None
