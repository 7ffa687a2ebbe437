"""The /metrics endpoint of a real server: every metric exposed, values move as calls run, exemplars, no per-call labels."""

from __future__ import annotations

import asyncio
import re

from prometheus_client.parser import text_string_to_metric_families

from protos.voxpool.v1 import tts_pb2 as pb
from tests.service.conftest import (
    collect,
    config_event,
    end_event,
    flush_event,
    stub_for,
    text_event,
    wait_for,
)
from tests.service.telemetry_support import (
    memory_tracing,
    sample,
    scrape,
    telemetry_server,
)

HISTOGRAMS = (
    "voxpool_time_to_first_audio_seconds", "voxpool_chunk_lateness_seconds", "voxpool_real_time_factor",
    "voxpool_call_duration_seconds", "voxpool_engine_iteration_seconds", "voxpool_engine_module_seconds",
    "voxpool_engine_batch_size", "voxpool_engine_queue_seconds", "voxpool_engine_decode_call_size",
)
COUNTERS = (
    "voxpool_calls", "voxpool_turns", "voxpool_clears", "voxpool_playout_underruns", "voxpool_chunks",
    "voxpool_late_chunks", "voxpool_audio_seconds", "voxpool_dropped_audio_seconds", "voxpool_engine_iterations",
    "voxpool_engine_busy_seconds", "voxpool_engine_requests_submitted", "voxpool_engine_requests_finished",
    "voxpool_engine_deferred_chunks",
)
GAUGES = (
    "voxpool_active_calls", "voxpool_stream_slots", "voxpool_stream_slot_utilization", "voxpool_engine_pool_active",
    "voxpool_engine_pool_waiting", "voxpool_engine_pool_slots", "voxpool_engine_requests_in_flight",
)
ALLOWED_LABELS = {"method", "outcome", "grpc_code", "module", "reason", "le"}


def families(text: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text) if f.name.startswith("voxpool_")}


class Feeder:
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


async def test_every_metric_is_exposed_and_moves_with_calls():
    async with telemetry_server(None, metrics=True, server={"max_calls": 4}) as server:
        port = server.telemetry.metrics_port
        assert port == server.cfg.telemetry.metrics_port > 0
        before = await scrape(port)
        assert sample(before, "voxpool_stream_slots") == 4
        assert sample(before, "voxpool_stream_slot_utilization") == 0
        assert sample(before, "voxpool_engine_pool_slots") == 8
        assert sample(before, "voxpool_time_to_first_audio_seconds_count") == 0

        async with stub_for(server.port) as stub:
            # a paced call in flight: active calls and utilization follow it
            feeder = Feeder()
            call = stub.Converse(feeder)
            feeder.put(config_event(pacing=pb.Pacing.REALTIME))
            feeder.put(text_event("您好，这是一段比较长的文字。", turn_id="a"))
            feeder.put(flush_event("a"))
            async for ev in call:
                if ev.HasField("audio"):
                    break
            during = await scrape(port)
            assert sample(during, "voxpool_active_calls") == 1
            assert sample(during, "voxpool_stream_slot_utilization") == 0.25
            assert sample(during, "voxpool_engine_requests_submitted_total") >= 1
            feeder.put(end_event())
            rest = [ev async for ev in call]
            done = next(e.turn_done for e in rest if e.HasField("turn_done"))

            after_one = await scrape(port)
            assert sample(after_one, "voxpool_calls_total", method="Converse", outcome="ok", grpc_code="OK") == 1
            assert sample(after_one, "voxpool_active_calls") == 0
            assert sample(after_one, "voxpool_stream_slot_utilization") == 0
            assert sample(after_one, "voxpool_time_to_first_audio_seconds_count") == 1
            ttfa_sum = sample(after_one, "voxpool_time_to_first_audio_seconds_sum")
            assert abs(ttfa_sum * 1000 - done.ttfa_ms) <= 0.51
            assert sample(after_one, "voxpool_chunk_lateness_seconds_count") == done.chunks
            assert sample(after_one, "voxpool_chunks_total") == done.chunks
            assert sample(after_one, "voxpool_late_chunks_total") == done.late_chunks
            assert sample(after_one, "voxpool_playout_underruns_total") == done.underruns
            assert sample(after_one, "voxpool_audio_seconds_total") == done.audio_ms / 1000
            assert sample(after_one, "voxpool_real_time_factor_count") == 1
            assert sample(after_one, "voxpool_turns_total", outcome="done") == 1
            assert sample(after_one, "voxpool_call_duration_seconds_count", method="Converse") == 1
            assert sample(after_one, "voxpool_engine_iterations_total") > 0
            assert sample(after_one, "voxpool_engine_iteration_seconds_count") == sample(
                after_one, "voxpool_engine_iterations_total")
            assert sample(after_one, "voxpool_engine_batch_size_count", module="decode") > 0
            assert sample(after_one, "voxpool_engine_batch_size_count", module="vocode") > 0
            assert sample(after_one, "voxpool_engine_decode_call_size_count") == sample(
                after_one, "voxpool_engine_batch_size_count", module="decode")  # one observation per decoder call
            assert sample(after_one, "voxpool_engine_decode_call_size_sum") >= sample(
                after_one, "voxpool_engine_decode_call_size_count")  # at least one step each
            assert sample(after_one, "voxpool_engine_module_seconds_count", module="encode") >= 1
            assert sample(after_one, "voxpool_engine_queue_seconds_count") >= 1
            await wait_for(lambda: server.engine.counters().requests_completed
                           + server.engine.counters().requests_cancelled >= 2)

            # a second call, then a barge-in: the counters move again
            await collect(stub.Synthesize(pb.SynthesizeRequest(text="好。")))
            after_two = await scrape(port)
            assert sample(after_two, "voxpool_calls_total", method="Synthesize", outcome="ok", grpc_code="OK") == 1
            assert sample(after_two, "voxpool_time_to_first_audio_seconds_count") == 2
            assert sample(after_two, "voxpool_engine_requests_finished_total", reason="completed") >= 3

            feeder = Feeder()
            call = stub.Converse(feeder)
            feeder.put(config_event(pacing=pb.Pacing.REALTIME))
            feeder.put(text_event("您好，这是第一句。这是第二句，还有第三句。", turn_id="c"))
            feeder.put(flush_event("c"))
            seen = 0
            async for ev in call:
                seen += ev.HasField("audio")
                if seen == 5:
                    feeder.put(pb.ClientEvent(clear=pb.Clear()))
                if ev.HasField("cleared"):
                    feeder.put(end_event())
        after_clear = await scrape(port)
        assert sample(after_clear, "voxpool_clears_total") == 1
        assert sample(after_clear, "voxpool_turns_total", outcome="cleared") == 1
        assert sample(after_clear, "voxpool_dropped_audio_seconds_total") > 0

        exposed = families(after_clear)
        for name in HISTOGRAMS:
            assert exposed.get(name) == "histogram", name
        for name in COUNTERS:
            assert exposed.get(name) == "counter", name
        for name in GAUGES:
            assert exposed.get(name) == "gauge", name
        # no per-call labels: only the fixed low-cardinality label names
        labels = {k for f in text_string_to_metric_families(after_clear) if f.name.startswith("voxpool_")
                  for s in f.samples for k in s.labels}
        assert labels <= ALLOWED_LABELS, labels - ALLOWED_LABELS


async def test_ttfa_histogram_carries_trace_exemplars():
    provider, exporter = memory_tracing()
    async with telemetry_server(provider, metrics=True) as server:
        async with stub_for(server.port) as stub:
            await collect(stub.Converse(iter([config_event(), text_event("好。"), end_event()])))
        text = await scrape(server.telemetry.metrics_port, openmetrics=True)
        plain = await scrape(server.telemetry.metrics_port)
    (span,) = [s for s in exporter.get_finished_spans() if s.name.endswith("/Converse")]
    trace_id = format(span.context.trace_id, "032x")
    exemplars = re.findall(r'^voxpool_time_to_first_audio_seconds_bucket\{[^}]*\} 1\.0 # \{trace_id="([0-9a-f]{32})"\}',
                           text, re.MULTILINE)
    assert exemplars == [trace_id]
    assert "# {trace_id" not in plain  # the classic text format has no exemplars
    assert text.rstrip().endswith("# EOF")


async def test_metrics_off_by_default():
    async with telemetry_server(None) as server:
        assert server.cfg.telemetry.metrics_port == 0
        assert not server.telemetry.metrics.enabled and server.telemetry.metrics_port == 0
        assert server.telemetry.metrics.engine_observer is None
        assert server.engine.backend.observer.observers == []
        async with stub_for(server.port) as stub:
            events = await collect(stub.Synthesize(pb.SynthesizeRequest(text="好。")))
        assert any(e.HasField("turn_done") for e in events)
