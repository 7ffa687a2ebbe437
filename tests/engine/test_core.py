"""Engine loop behaviour with a deterministic fake runner: order, cancel, faults, idle, death, overload, drain."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from engine import (
    AsyncEngine,
    AudioChunk,
    ConsumerStalled,
    EngineConfig,
    EngineDead,
    EngineStopped,
    EngineOverloaded,
    Finished,
    FinishReason,
    Health,
    InvalidRequest,
    RequestFailed,
    SynthesisOptions,
    SynthesisRequest,
)
from engine.core import EngineCore
from engine.telemetry import RecordingObserver
from tests.engine.fakes import HOP, FakeRunner, expected_audio


def make(runner: FakeRunner | None = None, observer: RecordingObserver | None = None, **cfg) -> tuple[AsyncEngine, FakeRunner]:
    runner = runner or FakeRunner()
    base = dict(voices=("fake",), max_slots=4, max_waiting=4)
    base.update(cfg)
    core = EngineCore(EngineConfig(**base), {"fake": runner}, [observer] if observer else [])
    return AsyncEngine(core), runner


async def wait_for(pred, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)


async def test_chunks_in_order_then_finished() -> None:
    engine, runner = make()
    await engine.start()
    lengths = [1, 2, 3, 5, 7, 4]
    streams = [engine.submit(SynthesisRequest(f"r{i}", [3] * n, seed=i)) for i, n in enumerate(lengths)]
    results = await asyncio.gather(*(s.collect() for s in streams))
    for i, (audio, chunks, final) in enumerate(results):
        frames = runner.frames_per_id * lengths[i]  # the quiet tail is trimmed
        np.testing.assert_array_equal(audio, expected_audio(i, frames))
        starts = [c.start_sample for c in chunks]
        assert starts == list(np.cumsum([0] + [len(c.samples) for c in chunks[:-1]]))
        assert [c.first for c in chunks] == [True] + [False] * (len(chunks) - 1)
        assert len(chunks[0].samples) == min(frames, 16) * HOP or frames <= 16 + 4 + 12
        assert sum(len(c.input_positions) for c in chunks) == frames // 2
        for c in chunks:  # each decoder step (2 frames) belongs to the chunk its audio starts in
            assert abs(len(c.input_positions) - len(c.samples) / HOP / 2) <= 1
            assert c.input_positions.min() >= 0 and c.input_positions.max() < lengths[i]
        assert isinstance(final, Finished) and final.reason is FinishReason.COMPLETED and final.error is None
        assert final.timings.audio_samples == frames * HOP
        assert final.timings.first_audio_s is not None and final.timings.ttfa_ms > 0
        assert final.timings.finished_s >= final.timings.first_audio_s
    # several requests shared decoder calls
    assert engine.counters().max_decode_batch >= 2
    assert await engine.drain(5.0)


async def test_first_chunk_short_later_chunks_longer() -> None:
    # min_chunk_frames=0: no short chunk for a starving stream (this checks the sizes, whatever the host's speed)
    engine, runner = make(first_chunk_frames=8, chunk_frames=20, max_chunk_frames=20, min_chunk_frames=0)
    await engine.start()
    stream = engine.submit(SynthesisRequest("long", [1] * 12, seed=3))  # 96 frames
    _, chunks, _ = await stream.collect()
    sizes = [len(c.samples) // HOP for c in chunks]
    assert sizes[0] == 8
    assert all(s == 20 for s in sizes[1:-1]) and 1 <= sizes[-1] <= 30 and sum(sizes) == 96
    await engine.stop()


async def test_cancel_ends_stream_and_frees_slot_within_one_step() -> None:
    runner = FakeRunner(frames_per_id=400)
    runner.delay_s["decode"] = 0.003
    engine, runner = make(runner)
    await engine.start()
    stream = engine.submit(SynthesisRequest("victim", [1, 2], seed=1))
    first = await stream.__anext__()
    assert isinstance(first, AudioChunk) and first.first
    slot = next(s for m, slots in runner.calls if m == "encode" for s in slots)
    assert engine.cancel("victim")
    n_calls = len(runner.calls)
    # the consumer sees the end at once
    final = await asyncio.wait_for(stream.__anext__(), 1.0)
    assert isinstance(final, Finished) and final.reason is FinishReason.CANCELLED
    await wait_for(lambda: slot in runner.released)
    later_decodes = [c for c in runner.calls[n_calls:] if c[0] == "decode" and slot in c[1]]
    assert len(later_decodes) <= 1  # at most the call already in flight
    core = engine.backend
    assert core.pool.num_free == 4 and core.live_count == 0
    assert not engine.cancel("victim")  # already gone
    # the slot serves the next request
    audio, _, final = await engine.submit(SynthesisRequest("next", [1], seed=2)).collect()
    assert final.reason is FinishReason.COMPLETED
    np.testing.assert_array_equal(audio, expected_audio(2, 400))
    await engine.stop()


async def test_closing_the_stream_cancels() -> None:
    runner = FakeRunner(frames_per_id=400)
    runner.delay_s["decode"] = 0.002
    engine, runner = make(runner)
    await engine.start()
    async with engine.submit(SynthesisRequest("a", [1], seed=1)) as stream:
        await stream.__anext__()
    await wait_for(lambda: engine.backend.live_count == 0)
    assert engine.counters().requests_cancelled == 1
    await engine.stop()


async def test_failing_batch_fails_only_its_requests() -> None:
    runner = FakeRunner(frames_per_id=60)
    runner.delay_s["decode"] = 0.002
    engine, runner = make(runner)
    await engine.start()
    a = engine.submit(SynthesisRequest("a", [1, 2, 3], seed=1))
    first = await a.__anext__()
    assert isinstance(first, AudioChunk)
    a_slot = next(s for m, slots in runner.calls if m == "encode" for s in slots)
    # the encoder fails for the newcomer's batch only
    runner.fail["encode"] = lambda slots: a_slot not in slots
    b = engine.submit(SynthesisRequest("b", [1], seed=2))
    with pytest.raises(RequestFailed) as info:
        await b.collect()
    assert info.value.module == "encode" and info.value.request_id == "b"
    assert b.finished.reason is FinishReason.ERROR
    del runner.fail["encode"]
    # a keeps streaming to the end, with exactly its audio
    rest, _, final = await a.collect()
    assert final.reason is FinishReason.COMPLETED
    np.testing.assert_array_equal(np.concatenate([first.samples, rest]), expected_audio(1, 180))
    # a failing vocoder batch: only the requests in it fail, the engine keeps serving
    c = engine.submit(SynthesisRequest("c", [1], seed=3))
    c_slot_holder: list[int] = []

    def vocode_fails(slots) -> bool:
        c_slot_holder.extend(slots)
        return True

    runner.fail["vocode"] = vocode_fails
    with pytest.raises(RequestFailed) as info:
        await c.collect()
    assert info.value.module == "vocode"
    del runner.fail["vocode"]
    assert engine.health() is Health.SERVING
    audio, _, final = await engine.submit(SynthesisRequest("d", [2], seed=4)).collect()
    np.testing.assert_array_equal(audio, expected_audio(4, 60))
    assert engine.counters().failed_batches == 2
    await engine.stop()


async def test_idle_loop_blocks_instead_of_polling() -> None:
    """With nothing live the engine thread waits on its condition: no loop turn runs until something arrives.
    (Its CPU time while idle is measured in tests/load/test_engine_idle_cpu.py.)"""
    engine, runner = make()
    core = engine.backend
    turns = [0]
    iterate = core._iterate

    def counting_iterate():
        turns[0] += 1
        return iterate()

    core._iterate = counting_iterate
    await engine.start()
    await engine.submit(SynthesisRequest("warm", [1], seed=1)).collect()
    await wait_for(lambda: core.live_count == 0 and len(core.pool) == 0)
    await asyncio.sleep(0.05)
    before = turns[0]
    await asyncio.sleep(0.5)
    assert turns[0] - before <= 1, f"{turns[0] - before} loop turns while idle: the engine polls"  # a spin: thousands
    # and a submission wakes it
    final = (await asyncio.wait_for(engine.submit(SynthesisRequest("wake", [1], seed=2)).collect(), 10))[2]
    assert final.reason is FinishReason.COMPLETED and turns[0] > before
    await engine.stop()


async def test_loop_death_fails_every_stream_and_reports_not_serving() -> None:
    runner = FakeRunner(frames_per_id=400)
    runner.delay_s["decode"] = 0.002
    engine, runner = make(runner, max_slots=2, max_waiting=4)
    await engine.start()
    assert engine.health() is Health.SERVING
    streams = [engine.submit(SynthesisRequest(f"s{i}", [1], seed=i)) for i in range(4)]  # 2 run, 2 wait
    await streams[0].__anext__()
    core = engine.backend

    def broken(*_a, **_k):
        raise MemoryError("scheduler blew up")

    core.scheduler.plan = broken
    for stream in streams:
        with pytest.raises(EngineDead):
            async for _ in stream:
                pass
    await wait_for(lambda: engine.health() is Health.NOT_SERVING)
    with pytest.raises(EngineDead):
        engine.submit(SynthesisRequest("late", [1]))


async def test_repeated_batch_failures_kill_the_loop() -> None:
    engine, runner = make(max_consecutive_failures=3)
    runner.fail["encode"] = lambda slots: True
    await engine.start()
    for i in range(3):
        with pytest.raises((RequestFailed, EngineDead)):
            await engine.submit(SynthesisRequest(f"x{i}", [1])).collect()
    await wait_for(lambda: engine.health() is Health.NOT_SERVING)
    assert engine.backend.dead


async def test_overload_is_refused_at_once() -> None:
    runner = FakeRunner(frames_per_id=400)
    runner.delay_s["decode"] = 0.002
    engine, runner = make(runner, max_slots=1, max_waiting=1)
    await engine.start()
    engine.submit(SynthesisRequest("a", [1]))
    b = engine.submit(SynthesisRequest("b", [1]))
    with pytest.raises(EngineOverloaded):
        engine.submit(SynthesisRequest("c", [1]))
    b.close()  # a waiting request leaves: room again
    await wait_for(lambda: engine.backend.live_count == 1)
    engine.submit(SynthesisRequest("c", [1]))
    with pytest.raises(EngineOverloaded):
        engine.submit(SynthesisRequest("d", [1]))
    await engine.stop()


async def test_invalid_requests_rejected_at_submit() -> None:
    engine, runner = make()
    await engine.start()
    for bad in (
        SynthesisRequest("v", [1], voice="nope"),
        SynthesisRequest("e", []),
        SynthesisRequest("r", [1, 100]),
        SynthesisRequest("l", [1] * 65),
        SynthesisRequest("o", [1], options=SynthesisOptions(first_chunk_frames=0)),
        SynthesisRequest("m", [1], options=SynthesisOptions(deadline_margin_ms=-1.0)),
        SynthesisRequest("M", [1], options=SynthesisOptions(deadline_margin_ms=5000.0)),
    ):
        with pytest.raises(InvalidRequest):
            engine.submit(bad)
    runner.delay_s["decode"] = 0.002
    engine.submit(SynthesisRequest("dup", [1] * 30))
    with pytest.raises(InvalidRequest):
        engine.submit(SynthesisRequest("dup", [1]))
    assert engine.backend.live_count == 1
    await engine.stop()


async def test_unread_audio_pauses_then_stalled_consumer_fails() -> None:
    runner = FakeRunner(frames_per_id=200, sample_rate_hz=1000)  # 1 frame = 4 ms of audio
    engine, runner = make(runner, max_unread_audio_ms=200.0, stalled_consumer_timeout_ms=300.0)
    await engine.start()
    stream = engine.submit(SynthesisRequest("slow", [1, 1], seed=1))  # 1.6 s of audio
    await wait_for(lambda: stream.unread_ms >= 200.0)
    await asyncio.sleep(0.05)
    frozen = stream.unread_ms
    await asyncio.sleep(0.1)
    assert stream.unread_ms == frozen  # paused: nothing more produced while unread
    assert frozen < 1600
    with pytest.raises(ConsumerStalled):
        await asyncio.sleep(0.4)
        async for _ in stream:
            pass
    await wait_for(lambda: engine.backend.live_count == 0)
    await engine.stop()


async def test_reading_resumes_a_paused_stream() -> None:
    runner = FakeRunner(frames_per_id=200, sample_rate_hz=1000)
    engine, runner = make(runner, max_unread_audio_ms=200.0, stalled_consumer_timeout_ms=5_000.0)
    await engine.start()
    stream = engine.submit(SynthesisRequest("slow", [1, 1], seed=1))
    await wait_for(lambda: stream.unread_ms >= 200.0)
    audio, _, final = await stream.collect()
    assert final.reason is FinishReason.COMPLETED
    np.testing.assert_array_equal(audio, expected_audio(1, 400))
    await engine.stop()


async def test_drain_finishes_live_requests_and_refuses_new_ones() -> None:
    runner = FakeRunner(frames_per_id=100)
    runner.delay_s["decode"] = 0.001
    engine, runner = make(runner)
    await engine.start()
    streams = [engine.submit(SynthesisRequest(f"d{i}", [1], seed=i)) for i in range(3)]
    collectors = [asyncio.ensure_future(s.collect()) for s in streams]
    drained = asyncio.ensure_future(engine.drain(10.0))
    await wait_for(lambda: engine.health() is Health.NOT_SERVING)
    with pytest.raises(EngineStopped):
        engine.submit(SynthesisRequest("late", [1]))
    assert await drained
    for i, fut in enumerate(collectors):
        audio, _, final = await fut
        assert final.reason is FinishReason.COMPLETED
        np.testing.assert_array_equal(audio, expected_audio(i, 100))


async def test_stop_ends_live_requests_with_engine_stopped() -> None:
    runner = FakeRunner(frames_per_id=1000)
    runner.delay_s["decode"] = 0.002
    engine, runner = make(runner)
    await engine.start()
    stream = engine.submit(SynthesisRequest("s", [1]))
    await stream.__anext__()
    await engine.stop()
    with pytest.raises(EngineStopped):
        async for _ in stream:
            pass


async def test_telemetry_reports_batches_and_urgency() -> None:
    observer = RecordingObserver()
    runner = FakeRunner()
    runner.delay_s.update(encode=0.001, decode=0.001, vocode=0.001)  # every module call sleeps at least 1 ms
    engine, runner = make(runner, observer=observer)
    await engine.start()
    await asyncio.gather(*(engine.submit(SynthesisRequest(f"t{i}", [1, 2], seed=i)).collect() for i in range(4)))
    await engine.stop()
    its = observer.iterations
    assert its and max(s.decode_batch for s in its) >= 2
    assert sum(s.encode_batch for s in its) == 4
    assert sum(s.vocode_batch for s in its) == engine.counters().vocoded_chunks
    assert any(s.urgent > 0 for s in its)
    assert all(s.pool_active <= 4 for s in its)
    for s in its:  # a module's time holds its calls' sleeps, and the three phases lie inside the iteration
        assert s.encode_s >= (0.001 if s.encode_batch else 0.0), s
        assert s.decode_s >= (0.001 if s.decode_batch else 0.0), s
        assert s.vocode_s >= (0.001 if s.vocode_batch else 0.0), s
        assert s.encode_s + s.decode_s + s.vocode_s <= s.duration_s + 1e-9, s
    done = {rid: reason for rid, reason, _ in observer.finished}
    assert done == {f"t{i}": FinishReason.COMPLETED for i in range(4)}


async def test_observer_errors_do_not_stop_the_engine() -> None:
    class Broken:
        def on_iteration(self, stats):
            raise ValueError("boom")

        def on_request_done(self, *a):
            raise ValueError("boom")

    runner = FakeRunner()
    core = EngineCore(EngineConfig(voices=("fake",)), {"fake": runner}, [Broken()])
    engine = AsyncEngine(core)
    await engine.start()
    audio, _, final = await engine.submit(SynthesisRequest("o", [1], seed=5)).collect()
    np.testing.assert_array_equal(audio, expected_audio(5, 8))
    assert engine.health() is Health.SERVING
    await engine.stop()


async def test_waiting_requests_get_slots_as_others_finish() -> None:
    engine, runner = make(max_slots=3, max_waiting=20)
    await engine.start()
    streams = [engine.submit(SynthesisRequest(f"q{i}", [1] * (1 + i % 4), seed=i)) for i in range(20)]
    results = await asyncio.gather(*(s.collect() for s in streams))
    for i, (audio, _, final) in enumerate(results):
        assert final.reason is FinishReason.COMPLETED
        np.testing.assert_array_equal(audio, expected_audio(i, 8 * (1 + i % 4)))
        assert final.timings.queue_ms is not None
    assert max(len(slots) for m, slots in runner.calls if m == "decode") == 3
    assert sorted(set(runner.released)) == [0, 1, 2]
    await engine.stop()


async def test_a_request_that_follows_another_is_put_on_that_calls_playback_clock() -> None:
    """`follows` links a segment to the one before it while that one lives; once it ended, its play end is kept;
    an unknown id leaves a chain head. Both segments' audio is exact, and the link never changes the audio."""
    engine, runner = make()
    await engine.start()
    core = engine.backend
    with runner.lock:  # the engine thread waits in its first module call: both stay live
        first = engine.submit(SynthesisRequest("c/1", [3] * 6, seed=1))
        second = engine.submit(SynthesisRequest("c/2", [3] * 4, seed=2, options=SynthesisOptions(follows="c/1",
                                                                                              gap_ms=250.0)))
        linked = core._live["c/2"]
        assert linked.after is core._live["c/1"] and linked.follows_audio
    (a1, _, f1), (a2, _, f2) = await asyncio.gather(first.collect(), second.collect())
    assert f1.reason is f2.reason is FinishReason.COMPLETED
    np.testing.assert_array_equal(a2, expected_audio(2, runner.frames_per_id * 4))
    play_end = core._play_ends["c/1"]
    assert play_end == pytest.approx(f1.timings.first_audio_s + len(a1) / runner.timing.sample_rate_hz)
    third = engine.submit(SynthesisRequest("c/3", [3] * 2, seed=3, options=SynthesisOptions(follows="c/1")))
    request = core._live.get("c/3")
    if request is not None:  # may have finished already: then its final event is checked below
        assert request.after is None and request.after_end_s == pytest.approx(play_end)
    lone = engine.submit(SynthesisRequest("c/4", [3] * 2, seed=4, options=SynthesisOptions(follows="nobody")))
    assert all(final.reason is FinishReason.COMPLETED for _, _, final in
               await asyncio.gather(third.collect(), lone.collect()))
    with pytest.raises(InvalidRequest, match="gap_ms"):
        engine.submit(SynthesisRequest("c/5", [3], options=SynthesisOptions(gap_ms=-1.0)))
    with pytest.raises(InvalidRequest, match="itself"):
        engine.submit(SynthesisRequest("c/6", [3], options=SynthesisOptions(follows="c/6")))
    await engine.stop()
