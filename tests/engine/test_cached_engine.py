"""CachingEngine: a hit replays the synthesis exactly without the engine; identical misses synthesize once."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine.async_engine import AsyncEngine
from engine.audio_cache import AudioCache
from engine.cached_engine import CachingEngine, warming
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.errors import InvalidRequest, RequestFailed
from engine.request import AudioChunk, Finished, FinishReason, SynthesisRequest
from tests.engine.fakes import FakeRunner, expected_audio


async def make(runner: FakeRunner | None = None, admit_after: int = 2, **cfg) -> tuple[CachingEngine, FakeRunner]:
    runner = runner or FakeRunner()
    base = dict(voices=("fake",), max_slots=4, max_waiting=4)
    base.update(cfg)
    engine = AsyncEngine(EngineCore(EngineConfig(**base), {"fake": runner}))
    cached = CachingEngine(engine, AudioCache(max_bytes=10**7, admit_after_sightings=admit_after), "fake",
                           model_versions={"fake": "m1"})
    await cached.start()
    return cached, runner


def req(rid: str, ids=(3, 4, 5), **kw) -> SynthesisRequest:
    return SynthesisRequest(rid, ids, **kw)


async def events_of(stream) -> list:
    return [e async for e in stream]


def same_chunks(a: list, b: list) -> None:
    ca = [e for e in a if isinstance(e, AudioChunk)]
    cb = [e for e in b if isinstance(e, AudioChunk)]
    assert len(ca) == len(cb) > 0
    for x, y in zip(ca, cb):
        assert x.samples.tobytes() == y.samples.tobytes()
        assert (x.start_sample, x.first, x.sample_rate_hz) == (y.start_sample, y.first, y.sample_rate_hz)
        np.testing.assert_array_equal(x.input_positions, y.input_positions)


async def test_hit_replays_the_synthesis_without_the_engine() -> None:
    engine, runner = await make()
    fresh = await events_of(engine.submit(req("a", seed=7)))
    await events_of(engine.submit(req("b", seed=7)))  # second sighting: stored
    assert engine.cache.stats().entries == 1
    submitted = engine.counters().requests_submitted
    hit = await events_of(engine.submit(req("c", seed=7, voice="fake")))  # "" and the default name are one voice
    assert engine.counters().requests_submitted == submitted  # never entered the engine
    same_chunks(fresh, hit)
    audio = np.concatenate([e.samples for e in hit if isinstance(e, AudioChunk)])
    np.testing.assert_array_equal(audio, expected_audio(7, runner.frames_per_id * 3))
    final = hit[-1]
    assert isinstance(final, Finished) and final.reason is FinishReason.COMPLETED and final.error is None
    assert final.timings.audio_samples == len(audio) and final.timings.ttfa_ms is not None
    assert engine.cache.stats().hits == 1
    assert await engine.drain(5.0)


async def test_other_seed_voice_ids_or_options_never_hit() -> None:
    engine, _ = await make(admit_after=1)
    await events_of(engine.submit(req("a", seed=1)))
    before = engine.counters().requests_submitted
    for i, r in enumerate([req("s", seed=2), req("i", ids=(3, 4, 6), seed=1), req("r", seed=1, speaking_rate=2.0)]):
        stream = engine.submit(r)
        await events_of(stream)
        assert engine.counters().requests_submitted == before + i + 1
    assert engine.cache.stats().hits == 0
    with pytest.raises(InvalidRequest, match="unknown voice"):
        engine.submit(req("v", voice="other", seed=1))
    assert await engine.drain(5.0)


async def test_concurrent_identical_misses_synthesize_once() -> None:
    engine, runner = await make(FakeRunner(frames_per_id=60))
    streams = [engine.submit(req(f"r{i}", seed=5)) for i in range(3)]
    results = await asyncio.gather(*(events_of(s) for s in streams))
    assert engine.counters().requests_submitted == 1
    for r in results[1:]:
        same_chunks(results[0], r)
    assert all(r[-1].reason is FinishReason.COMPLETED for r in results)
    s = engine.cache.stats()
    assert s.coalesced == 2 and s.entries == 1  # joining is a second sighting: stored
    assert await engine.drain(5.0)


async def test_a_lone_subscribers_dropped_lead_and_held_audio_reach_the_engine_clock_a_shared_ones_do_not() -> None:
    engine, runner = await make(FakeRunner(frames_per_id=60))
    alone = engine.submit(req("a", seed=1))
    alone.skip_leading(120)
    flight = engine._live["a"]
    assert alone.skipped_samples == 120 and flight.engine_stream.skipped_samples == 120
    first, second = engine.submit(req("b", seed=2)), engine.submit(req("c", seed=2))
    first.skip_leading(50)  # the synthesis plays in two calls: its audio stays counted as made
    assert first.skipped_samples == 50 and engine._live["b"].engine_stream.skipped_samples == 0
    alone.hold(70)  # so do samples a consumer holds before its playback queue
    first.hold(30)
    assert flight.engine_stream.held_samples == 70 and engine._live["b"].engine_stream.held_samples == 0
    await asyncio.gather(*(events_of(s) for s in (alone, first, second)))
    assert await engine.drain(5.0)


async def test_late_joiner_gets_every_chunk_from_the_start() -> None:
    runner = FakeRunner(frames_per_id=200)
    runner.delay_s["decode"] = 0.002
    engine, _ = await make(runner)
    first = engine.submit(req("first", seed=3))
    got: list = []
    async for e in first:
        got.append(e)
        if isinstance(e, AudioChunk) and len(got) == 2:
            late = engine.submit(req("late", seed=3))
            break
    rest = await events_of(first)
    late_events = await events_of(late)
    same_chunks(got + rest, late_events)
    assert engine.counters().requests_submitted == 1
    assert await engine.drain(5.0)


async def test_one_subscriber_cancelling_does_not_cut_the_others() -> None:
    runner = FakeRunner(frames_per_id=200)
    runner.delay_s["decode"] = 0.002
    engine, _ = await make(runner)
    a, b = engine.submit(req("a", seed=4)), engine.submit(req("b", seed=4))
    async for e in a:
        if isinstance(e, AudioChunk):
            break
    a.close()
    assert a.finished is not None and a.finished.reason is FinishReason.CANCELLED
    rest = await events_of(b)
    audio = np.concatenate([e.samples for e in rest if isinstance(e, AudioChunk)])
    np.testing.assert_array_equal(audio, expected_audio(4, 200 * 3))
    assert rest[-1].reason is FinishReason.COMPLETED
    c = engine.counters()
    assert c.requests_submitted == 1 and c.requests_cancelled == 0
    assert await engine.drain(5.0)


async def test_synthesis_stops_only_when_every_subscriber_left() -> None:
    runner = FakeRunner(frames_per_id=400)
    runner.delay_s["decode"] = 0.002
    engine, _ = await make(runner)
    a, b = engine.submit(req("a", seed=4)), engine.submit(req("b", seed=4))
    await asyncio.sleep(0.02)
    a.close()
    await asyncio.sleep(0.02)
    assert engine.counters().requests_cancelled == 0 and engine.in_flight == 1
    assert engine.cancel("b")  # the wrapper's cancel-by-id, as AsyncEngine.cancel
    assert b.finished is not None and b.finished.reason is FinishReason.CANCELLED
    assert engine.in_flight == 0
    for _ in range(200):
        if engine.counters().requests_cancelled == 1:
            break
        await asyncio.sleep(0.01)
    assert engine.counters().requests_cancelled == 1
    assert engine.cache.stats().entries == 0  # a cancelled synthesis is never stored
    again = await events_of(engine.submit(req("c", seed=4)))  # a new flight, not the cancelled one
    assert again[-1].reason is FinishReason.COMPLETED and engine.counters().requests_submitted == 2
    assert not engine.cancel("c") and not engine.cancel("unknown")
    assert await engine.drain(5.0)


async def test_failed_synthesis_fails_every_subscriber_and_is_not_stored() -> None:
    runner = FakeRunner(frames_per_id=60)
    runner.fail["decode"] = lambda slots: True
    engine, _ = await make(runner, max_consecutive_failures=100)
    streams = [engine.submit(req(f"r{i}", seed=9)) for i in range(2)]
    errors = []
    for s in streams:
        with pytest.raises(RequestFailed) as info:
            await events_of(s)
        errors.append(info.value)
    assert errors[0] is errors[1]
    assert engine.cache.stats().entries == 0
    runner.fail.clear()
    ok = await events_of(engine.submit(req("r2", seed=9)))
    assert ok[-1].reason is FinishReason.COMPLETED and engine.cache.stats().hits == 0
    assert await engine.drain(5.0)


async def test_warming_stores_on_first_sighting_and_ids_are_unique() -> None:
    engine, _ = await make()
    with warming():
        await events_of(engine.submit(req("w", seed=1)))
    assert engine.cache.stats().entries == 1
    await events_of(engine.submit(req("h", seed=1)))
    assert engine.cache.stats().hits == 1
    pending = engine.submit(req("p", seed=2))
    with pytest.raises(InvalidRequest, match="duplicate"):
        engine.submit(req("p", seed=2))
    await events_of(pending)
    assert await engine.drain(5.0)


def test_the_engine_and_the_caching_engine_both_are_engine_clients() -> None:
    """The edge types its engine as EngineClient: both implementations have every member, with the same kinds."""
    import inspect

    from engine.async_engine import AsyncEngine, EngineClient
    from engine.cached_engine import CachingEngine

    members = [n for n in vars(EngineClient) if not n.startswith("_")]
    assert {"submit", "cancel", "start", "stop", "drain", "health", "counters", "backend"} <= set(members)
    for cls in (AsyncEngine, CachingEngine):
        for name in members:
            want = getattr(EngineClient, name)
            if isinstance(want, property):
                assert hasattr(cls, name) or name in inspect.signature(cls.__init__).parameters, (cls.__name__, name)
                continue
            got = getattr(cls, name)
            assert inspect.iscoroutinefunction(got) == inspect.iscoroutinefunction(want), (cls.__name__, name)
            assert list(inspect.signature(got).parameters) == list(inspect.signature(want).parameters), (cls, name)
