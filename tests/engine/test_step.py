"""The engine step's three verbs without the engine thread: the plan holds the newcomers' first decoder step,
`execute` runs a module call on a runner, `StepUpdate.update` applies the result and returns the events to deliver,
delivering none itself."""

from __future__ import annotations

import numpy as np

from engine.errors import InvalidRequest, RequestFailed
from engine.request import FinishReason, Request, RequestTimings, Status, SynthesisRequest
from engine.scheduler import ChunkJob
from engine.step import BatchFailed, BatchOk, End, ModuleCall, Publish, StepUpdate, execute
from engine.telemetry import EngineCounters
from tests.engine.fakes import FakeRunner
from tests.engine.test_scheduler import decoding, setup


class RecordingSink:
    """A sink that fails the test if anything is delivered to it: update must only return events."""

    unread_ms = 0.0
    skipped_samples = 0
    held_samples = 0

    def publish_chunk(self, chunk) -> None:  # noqa: ANN001
        raise AssertionError("update delivered a chunk itself")

    def finish(self, reason, error, timings) -> None:  # noqa: ANN001
        raise AssertionError("update ended a request itself")


def request(rid: str, slot: int, ids: list[int]) -> Request:
    r = Request(spec=SynthesisRequest(rid, ids), voice="fake", sink=RecordingSink(), timings=RequestTimings(0.0),
                first_chunk_frames=16, chunk_frames=24)
    r.slot = slot
    return r


def test_plan_gives_newcomers_the_room_left_under_the_decode_batch_cap() -> None:
    sched, pool, rs = setup(5, max_decode_batch=3, max_encode_per_iteration=4)
    for r in rs[:2]:
        decoding(r, decoded=4)
    plan = sched.plan(pool, now=0.0)
    assert plan.encode["v"] == rs[2:]
    assert plan.newcomers["v"] == [rs[2]]  # 3 rows at most, 2 of them planned: room for one newcomer
    assert plan.decode_rows("v") == rs[:2]  # its encode has not been applied yet
    rs[2].status = Status.DECODING  # what update does when the encode succeeds
    assert plan.decode_rows("v") == sorted(rs[:3], key=lambda r: r.slot)


def test_plan_without_room_gives_newcomers_none() -> None:
    sched, pool, rs = setup(3, max_decode_batch=2)
    for r in rs[:2]:
        decoding(r, decoded=4)
    plan = sched.plan(pool, now=0.0)
    assert plan.encode["v"] == [rs[2]]
    assert plan.newcomers["v"] == []


def test_encode_then_decode_then_vocode_update_requests_and_return_events_in_order() -> None:
    runner = FakeRunner(frames_per_id=4, quiet_tail=2)
    counters = EngineCounters()
    updater = StepUpdate({"fake": runner}, counters)
    r = request("a", slot=0, ids=[1, 2])

    events = updater.update(execute(runner, ModuleCall("encode", "fake", [r]), prenet_dropout=0.0))
    assert [type(e) for e in events] == [BatchOk]
    assert r.status is Status.DECODING and r.timings.encoded_s is not None
    assert (counters.encode_calls, counters.encoded_items) == (1, 1)

    events = updater.update(execute(runner, ModuleCall("decode", "fake", [r], steps=8), prenet_dropout=0.0))
    assert [type(e) for e in events] == [BatchOk]
    assert r.status is Status.DRAINING  # 8 loud frames and 2 quiet ones: it stopped inside 8 steps of 2 frames
    assert r.frames_decoded == 10 and r.end_frame == r.frames_decided == 8  # the quiet tail is trimmed
    assert r.timings.decoder_steps == 5 and len(r.peaks) == 5

    job = ChunkJob(r, 0, r.end_frame, last=True)
    events = updater.update(execute(runner, ModuleCall("vocode", "fake", [r], jobs=[job]), prenet_dropout=0.0))
    assert [type(e) for e in events] == [BatchOk, Publish, End]
    publish, end = events[1], events[2]
    assert isinstance(publish, Publish) and publish.request is r and publish.chunk.first
    assert publish.chunk.samples.size == r.samples_emitted > 0
    assert isinstance(end, End) and end.reason is FinishReason.COMPLETED and end.error is None
    assert r.frames_emitted == 8 and counters.audio_samples == r.samples_emitted
    assert r.status is Status.DRAINING  # the core ends it when it delivers the End


def test_a_failed_call_returns_the_failure_then_each_live_request_end() -> None:
    runner = FakeRunner()
    runner.fail["decode"] = lambda slots: True
    counters = EngineCounters()
    a, b, done = request("a", 0, [1]), request("b", 1, [1]), request("c", 2, [1])
    done.status = Status.DONE
    result = execute(runner, ModuleCall("decode", "fake", [a, b, done], steps=1), prenet_dropout=0.0)
    assert result.output is None and isinstance(result.error, RuntimeError)
    events = StepUpdate({"fake": runner}, counters).update(result)
    assert isinstance(events[0], BatchFailed) and events[0].module == "decode"
    ends = events[1:]
    assert [e.request for e in ends] == [a, b]  # an ended request is not ended twice
    assert all(isinstance(e, End) and isinstance(e.error, RequestFailed) for e in ends)
    assert counters.decode_calls == 0 and a.frames_decoded == 0  # a failure changes no request


def test_an_invalid_request_at_encode_ends_its_requests_without_counting_a_failed_batch() -> None:
    runner = FakeRunner()

    def refuse(slots, ids, seeds):  # noqa: ANN001
        raise InvalidRequest("ids out of range")

    runner.encode = refuse  # type: ignore[method-assign]
    a = request("a", 0, [1])
    before = a.status
    events = StepUpdate({"fake": runner}, EngineCounters()).update(
        execute(runner, ModuleCall("encode", "fake", [a]), prenet_dropout=0.0))
    assert len(events) == 1 and isinstance(events[0], End)
    assert isinstance(events[0].error, InvalidRequest) and events[0].error.request_id == "a"
    assert a.status is before  # nothing applied


def test_a_vocoder_that_returns_the_wrong_number_of_results_fails_its_call() -> None:
    runner = FakeRunner()
    runner.vocode = lambda jobs: [np.zeros(4, np.float32)]  # type: ignore[method-assign]
    a, b = request("a", 0, [1]), request("b", 1, [1])
    jobs = [ChunkJob(a, 0, 4, last=False), ChunkJob(b, 0, 4, last=False)]
    result = execute(runner, ModuleCall("vocode", "fake", [a, b], jobs=jobs), prenet_dropout=0.0)
    assert "2 chunks" in str(result.error)
