"""One server span per call on a real server (in-memory exporter): rpc.* attributes, TTS figures, parent from metadata."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import grpc
import pytest
from opentelemetry.trace import SpanKind, StatusCode

from protos.voxpool.v1 import tts_pb2 as pb
from service.telemetry import Telemetry, bind_call, outcome_for
from service.telemetry.tracing import (
    metadata_dict,
    parent_context,
    provider_from_env,
    span_ids,
    tracing_requested,
)
from tests.service.conftest import (
    collect,
    config_event,
    end_event,
    flush_event,
    stub_for,
    text_event,
    wait_for,
)
from tests.service.telemetry_support import memory_tracing, telemetry_server

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"
TTFA_TOLERANCE_MS = 5.0


class Feeder:
    """A request iterator the test drives."""

    def __init__(self):
        self.q: asyncio.Queue = asyncio.Queue()

    def put(self, event):
        self.q.put_nowait(event)

    def __aiter__(self):
        return self

    async def __anext__(self):
        item = await self.q.get()
        if item is None:
            raise StopAsyncIteration
        return item


def server_spans(exporter):
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]


def children(exporter, parent, name):
    return [s for s in exporter.get_finished_spans() if s.name == name and s.parent is not None
            and s.parent.span_id == parent.context.span_id]


async def test_one_call_one_server_span_with_the_call_figures():
    provider, exporter = memory_tracing()
    async with telemetry_server(provider) as server:
        async with stub_for(server.port) as stub:
            t_sent = time.monotonic()
            first_audio = None
            events = []
            async for ev in stub.Converse(iter([config_event(), text_event("你好。这是第二句。", turn_id="t"),
                                                end_event()])):
                if first_audio is None and ev.HasField("audio") and not ev.audio.silence:
                    first_audio = time.monotonic()
                events.append(ev)
        await wait_for(lambda: len(server_spans(exporter)) == 1)
    client_ttfa_ms = (first_audio - t_sent) * 1000.0
    done = next(e.turn_done for e in events if e.HasField("turn_done"))
    speech = [e.audio for e in events if e.HasField("audio") and not e.audio.silence]

    (span,) = server_spans(exporter)
    a = span.attributes
    assert span.name == "voxpool.v1.Tts/Converse"
    assert (a["rpc.system"], a["rpc.service"], a["rpc.method"]) == ("grpc", "voxpool.v1.Tts", "Converse")
    assert a["rpc.grpc.status_code"] == grpc.StatusCode.OK.value[0] == 0
    assert span.status.status_code is StatusCode.UNSET
    assert a["network.peer.address"] == "127.0.0.1" and a["network.peer.port"] > 0
    assert a["voxpool.session_id"] == events[0].started.session_id
    assert (a["tts.voice"], a["tts.encoding"], a["tts.sample_rate_hz"], a["tts.pacing"]) == ("tiny", "PCMU", 8000, "ASAP")
    # TTFA: the server's value is the one sent in turn_done, and within what the client measured
    assert a["tts.ttfa_ms"] == pytest.approx(done.ttfa_ms, abs=0.51)
    assert 0 < a["tts.ttfa_ms"] <= client_ttfa_ms + TTFA_TOLERANCE_MS
    assert a["tts.audio_ms"] == done.audio_ms == sum(f.duration_ms for f in speech) == 2000
    assert (a["tts.underruns"], a["tts.late_chunks"], a["tts.chunks"]) == (done.underruns, done.late_chunks, done.chunks)
    assert a["tts.chunks"] > 0
    assert a["tts.on_time_fraction"] == pytest.approx(1.0 - done.late_chunks / done.chunks, abs=1e-4)
    assert a["tts.cleared"] is False and a["tts.cancelled"] is False
    assert (a["tts.turns"], a["tts.turns_done"], a["tts.segments"], a["tts.outcome"]) == (1, 1, 2, "ok")

    (turn,) = children(exporter, span, "voxpool.turn")
    assert turn.attributes["tts.turn_id"] == "t" and turn.attributes["tts.turn.outcome"] == "done"
    assert turn.attributes["tts.ttfa_ms"] == pytest.approx(a["tts.ttfa_ms"], abs=0.06)
    # chunk_late events depend on the host's speed (a loaded CI machine makes some): the order of the rest does not
    assert [e.name for e in turn.events if e.name != "chunk_late"] == ["first_audio"]
    segments = sorted(children(exporter, turn, "voxpool.segment"), key=lambda s: s.attributes["tts.segment.index"])
    assert [s.attributes["tts.segment.chars"] for s in segments] == [3, 6]  # 你好。 | 这是第二句。
    for seg in segments:
        assert [e.name for e in seg.events if e.name != "chunk_late"] == ["frontend_done", "submitted", "first_chunk",
                                                                         "last_chunk"]
        assert seg.attributes["tts.segment.outcome"] == "completed"
        assert seg.attributes["tts.engine.queue_ms"] >= 0
        assert seg.attributes["tts.segment.audio_ms"] == pytest.approx(1000.0, abs=1)
        assert seg.start_time <= seg.events[0].timestamp <= seg.events[-1].timestamp <= seg.end_time
    # the first segment's engine latency is part of the turn's TTFA
    assert segments[0].attributes["tts.segment.first_chunk_ms"] <= turn.attributes["tts.ttfa_ms"]
    assert sum(s.attributes["tts.segment.chunks"] for s in segments) == done.chunks
    # the call's RTF is its segments' synthesis time over their audio: their RTFs weighted by their audio
    audio_ms = [s.attributes["tts.segment.audio_ms"] for s in segments]
    weighted = sum(s.attributes["tts.segment.rtf"] * ms for s, ms in zip(segments, audio_ms)) / sum(audio_ms)
    assert a["tts.rtf"] == pytest.approx(weighted, rel=1e-3, abs=2e-4)  # each figure rounded to 4 decimals
    assert turn.attributes["tts.rtf"] == a["tts.rtf"]  # one turn: the turn's figure is the call's


async def test_trace_context_from_client_metadata_becomes_the_parent():
    provider, exporter = memory_tracing()
    traceparent = f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"
    async with telemetry_server(provider) as server:
        async with stub_for(server.port) as stub:
            await collect(stub.Synthesize(pb.SynthesizeRequest(text="好。"),
                                          metadata=(("traceparent", traceparent), ("x-request-id", "gw-42"))))
        await wait_for(lambda: len(server_spans(exporter)) == 1)
    (span,) = server_spans(exporter)
    assert span.name == "voxpool.v1.Tts/Synthesize" and span.attributes["rpc.method"] == "Synthesize"
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None and span.parent.is_remote
    assert format(span.parent.span_id, "016x") == PARENT_SPAN_ID
    assert span.attributes["voxpool.request_id"] == "gw-42"
    # every span of the call belongs to the gateway's trace
    assert {format(s.context.trace_id, "032x") for s in exporter.get_finished_spans()} == {TRACE_ID}


async def test_clear_and_cancel_are_recorded():
    provider, exporter = memory_tracing()
    text = "您好，这是第一句。这是第二句，还有第三句。最后一句话。"
    async with telemetry_server(provider) as server:
        async with stub_for(server.port) as stub:
            feeder = Feeder()
            call = stub.Converse(feeder)
            received: list[pb.ServerEvent] = []

            async def read():
                async for ev in call:
                    received.append(ev)

            reader = asyncio.create_task(read())
            feeder.put(config_event(pacing=pb.Pacing.REALTIME))
            feeder.put(text_event(text, turn_id="a"))
            feeder.put(flush_event("a"))
            await wait_for(lambda: sum(e.HasField("audio") for e in received) >= 5)
            feeder.put(pb.ClientEvent(clear=pb.Clear()))
            await wait_for(lambda: any(e.HasField("cleared") for e in received))
            feeder.put(text_event(text, turn_id="b"))  # a second turn, cancelled by the client mid-audio
            feeder.put(flush_event("b"))
            await wait_for(lambda: sum(e.HasField("audio") and e.audio.turn_id == "b" for e in received) >= 3)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reader
        await wait_for(lambda: len(server_spans(exporter)) == 1)
    cleared = next(e.cleared for e in received if e.HasField("cleared"))
    (span,) = server_spans(exporter)
    a = span.attributes
    assert a["rpc.grpc.status_code"] == grpc.StatusCode.CANCELLED.value[0]
    assert span.status.status_code is StatusCode.UNSET  # a client cancel is not a server error
    assert a["tts.cancelled"] is True and a["tts.cleared"] is True and a["tts.outcome"] == "cancelled"
    assert (a["tts.turns"], a["tts.turns_cleared"], a["tts.turns_done"]) == (2, 1, 0)
    assert a["tts.dropped_audio_ms"] == cleared.dropped_audio_ms > 0
    turns = {t.attributes["tts.turn_id"]: t for t in children(exporter, span, "voxpool.turn")}
    assert turns["a"].attributes["tts.turn.outcome"] == "cleared"
    assert [e.name for e in turns["a"].events][-1] == "cleared"
    assert turns["b"].attributes["tts.turn.outcome"] == "abandoned"
    outcomes = [s.attributes["tts.segment.outcome"] for s in children(exporter, turns["a"], "voxpool.segment")]
    assert "cancelled" in outcomes


async def test_rejected_and_invalid_calls_get_their_status():
    provider, exporter = memory_tracing()
    async with telemetry_server(provider, server={"max_calls": 1}) as server:
        async with stub_for(server.port) as stub:
            feeder = Feeder()
            holder = stub.Converse(feeder)
            feeder.put(config_event())
            await wait_for(lambda: server.admission.active == 1)
            with pytest.raises(grpc.aio.AioRpcError) as shed:
                await collect(stub.Converse(iter([config_event(), end_event()])))
            assert shed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            feeder.put(end_event())
            await collect(holder)
            with pytest.raises(grpc.aio.AioRpcError) as bad:
                await collect(stub.Converse(iter([text_event("先发文字。")])))
            assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        await wait_for(lambda: len(server_spans(exporter)) == 3)
    by_code = {s.attributes["rpc.grpc.status_code"]: s for s in server_spans(exporter)}
    assert set(by_code) == {0, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], grpc.StatusCode.INVALID_ARGUMENT.value[0]}
    shed_span = by_code[grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]]
    assert shed_span.attributes["tts.outcome"] == "shed" and "voxpool.session_id" not in shed_span.attributes
    invalid = by_code[grpc.StatusCode.INVALID_ARGUMENT.value[0]]
    assert invalid.attributes["tts.outcome"] == "client_error"
    assert all(s.status.status_code is StatusCode.UNSET for s in by_code.values())  # none is a server error


async def test_tracing_off_by_default_creates_no_spans(monkeypatch):
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    async with telemetry_server(None) as server:
        assert not server.telemetry.tracing.enabled
        async with stub_for(server.port) as stub:
            events = await collect(stub.Synthesize(pb.SynthesizeRequest(text="好。")))
        assert any(e.HasField("turn_done") for e in events)


# ------------------------------------------------------------------ units


def test_tracing_follows_the_standard_environment_variables(monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert tracing_requested({}) == []
    assert tracing_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}) == ["otlp"]
    assert tracing_requested({"OTEL_TRACES_EXPORTER": "otlp,console"}) == ["otlp", "console"]
    assert tracing_requested({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}) == []
    assert tracing_requested({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}) == []
    assert provider_from_env({}) is None
    provider = provider_from_env({"OTEL_TRACES_EXPORTER": "console"})
    try:
        assert provider.resource.attributes["service.name"] == "voxpool"
    finally:
        provider.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "tts-eu-1")  # the SDK's own variables win over our default
    provider = provider_from_env({"OTEL_TRACES_EXPORTER": "console"})
    assert provider.resource.attributes["service.name"] == "tts-eu-1"
    provider.shutdown()
    with pytest.raises(ValueError, match="unknown exporter"):
        provider_from_env({"OTEL_TRACES_EXPORTER": "zipkin-ish"})
    provider = provider_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"})  # builds; exports lazily
    provider.shutdown()


def test_parent_context_parsing():
    headers = metadata_dict([("TraceParent", f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"), ("x-bin", b"\x00")])
    assert set(headers) == {"traceparent"}
    assert span_ids(parent_context(headers)) == (TRACE_ID, PARENT_SPAN_ID)
    assert parent_context({"traceparent": "garbage"}) is None
    assert parent_context({}) is None


@pytest.mark.parametrize("code, admitted, outcome", [
    ("OK", True, "ok"), ("CANCELLED", True, "cancelled"), ("RESOURCE_EXHAUSTED", False, "shed"),
    ("RESOURCE_EXHAUSTED", True, "client_error"), ("INVALID_ARGUMENT", True, "client_error"),
    ("UNAVAILABLE", False, "server_error"), ("INTERNAL", True, "server_error"),
    ("DEADLINE_EXCEEDED", True, "server_error"),
])
def test_outcome_table(code, admitted, outcome):
    assert outcome_for(code, admitted) == outcome


def test_a_session_outside_a_traced_call_gets_a_detached_recorder():
    call = bind_call("s-1")
    assert call.session_id == "s-1" and call.span is None
    assert call.end("OK")["outcome"] == "ok"
    assert call.end("OK") == {}  # once


def test_telemetry_without_metrics_attaches_nothing_to_the_engine():
    from service.config import TelemetryConfig

    fanout = SimpleNamespace(observers=[])

    class Backend:
        observer = fanout

    class Engine:
        backend = Backend()

        def counters(self):
            raise AssertionError("not read when metrics are off")

    tel = Telemetry(TelemetryConfig(), environ={})
    tel.attach_engine(Engine())
    assert fanout.observers == [] and not tel.metrics.enabled and not tel.tracing.enabled


def test_a_failing_hook_never_fails_the_call(caplog):
    call = bind_call("s-2")
    with caplog.at_level("ERROR", logger="service.telemetry.calls"):
        call.turn_done(object())  # not a Turn: the hook fails inside, the call goes on
    assert "telemetry hook" in caplog.text
    assert call.end("OK")["turns"] == 0
