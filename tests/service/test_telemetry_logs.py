"""Structured logs: JSON lines with request and trace ids, one line per call with its figures, none per frame."""

from __future__ import annotations

import contextlib
import io
import json
import logging

import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from service.config import TelemetryConfig
from service.telemetry import configure_logging
from tests.service.conftest import (
    collect,
    config_event,
    end_event,
    stub_for,
    text_event,
)
from tests.service.telemetry_support import memory_tracing, telemetry_server

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"


@contextlib.contextmanager
def captured_logs(json_logs: bool, level: str = "INFO"):
    """Route the root logger through configure_logging into a buffer; restore the old handlers after."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    buf = io.StringIO()
    try:
        configure_logging(TelemetryConfig(log_level=level, json_logs=json_logs), stream=buf)
        yield buf
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])


def call_lines(lines):
    return [line for line in lines if line["message"].startswith("call ended")]


async def test_json_lines_carry_ids_and_one_line_per_call_has_the_figures():
    with captured_logs(json_logs=True) as buf:
        async with telemetry_server(None) as server:  # tracing off: the gateway's trace id still reaches the logs
            async with stub_for(server.port) as stub:
                events = await collect(stub.Converse(
                    iter([config_event(), text_event("你好。这是第二句。"), end_event()]),
                    metadata=(("traceparent", TRACEPARENT),)))
                await collect(stub.Converse(iter([config_event(), text_event("好。"), end_event()])))
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert lines, "nothing logged"
    for line in lines:  # every line has the id fields
        assert {"ts", "level", "logger", "message", "request_id", "trace_id", "span_id"} <= line.keys()
    first, second = call_lines(lines)  # exactly one line per call
    session = events[0].started.session_id
    done = next(e.turn_done for e in events if e.HasField("turn_done"))
    frames = sum(e.HasField("audio") for e in events)
    assert first["request_id"] == first["session_id"] == first["call"]["session_id"] == session
    assert first["trace_id"] == TRACE_ID
    figures = first["call"]
    assert figures["grpc_code"] == "OK" and figures["outcome"] == "ok" and figures["method"] == "Converse"
    assert figures["ttfa_ms"] == pytest.approx(done.ttfa_ms, abs=0.51)
    assert figures["audio_ms"] == done.audio_ms and figures["chunks"] == done.chunks
    assert (figures["voice"], figures["encoding"], figures["turns"]) == ("tiny", "PCMU", 1)
    assert f"ttfa_ms={figures['ttfa_ms']}" in first["message"]  # readable without a JSON viewer too
    assert second["trace_id"] == "" and second["request_id"] != session
    # every line logged inside the first call carries its ids; nothing is logged per frame
    in_call = [line for line in lines if line["session_id"] == session]
    assert all(line["request_id"] == session and line["trace_id"] == TRACE_ID for line in in_call)
    assert len(in_call) < 5 < frames


async def test_request_id_from_metadata_and_trace_id_of_our_span():
    provider, exporter = memory_tracing()
    with captured_logs(json_logs=True) as buf:
        async with telemetry_server(provider) as server:
            async with stub_for(server.port) as stub:
                await collect(stub.Synthesize(pb.SynthesizeRequest(text="好。"), metadata=(("x-request-id", "gw-7"),)))
    (line,) = call_lines([json.loads(x) for x in buf.getvalue().splitlines()])
    (span,) = [s for s in exporter.get_finished_spans() if s.name.endswith("/Synthesize")]
    assert line["request_id"] == "gw-7"
    assert line["trace_id"] == format(span.context.trace_id, "032x")
    assert line["span_id"] == format(span.context.span_id, "016x")


async def test_plain_text_lines_name_the_ids():
    with captured_logs(json_logs=False) as buf:
        async with telemetry_server(None) as server:
            async with stub_for(server.port) as stub:
                await collect(stub.Converse(iter([config_event(), text_event("好。"), end_event()]),
                                            metadata=(("traceparent", TRACEPARENT),)))
    (line,) = [x for x in buf.getvalue().splitlines() if "call ended" in x]
    assert f"trace={TRACE_ID}]" in line and "[req=" in line and "outcome=ok" in line


def test_log_level_is_checked():
    with pytest.raises(ValueError, match="log_level"):
        with captured_logs(json_logs=False, level="CHATTY"):
            pass


@pytest.mark.parametrize("env, match", [
    ({"VOXPOOL__TELEMETRY__LOG_LEVEL": "chatty"}, "log_level"),
    ({"VOXPOOL__TELEMETRY__METRICS_PORT": "70000"}, "metrics_port"),
    ({"VOXPOOL__TELEMETRY__METRICS_PORT": "50051"}, "differ"),
])
def test_telemetry_config_is_checked(env, match):
    from service.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=match):
        load_config(None, environ=env)
