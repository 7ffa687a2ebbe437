"""bench.paced: the in-process release model equals the call's pacer, and a tiny paced closed-loop run."""

from __future__ import annotations

import math
import random

import pytest

from bench.engine_load import make_engine
from bench.paced import PacedPlayout, paced_frames, paced_row, run_paced_closed_loop, segment_texts
from bench.workload import TextItem
from engine.config import EngineConfig
from service.pacing import ActionKind, Pacer, PacingMode, engine_deadline_margin_ms
from tests.engine.tiny_voice import make_tiny_voice


def _pacer_frames(chunks, playout):
    """Drive the service's Pacer on a simulated clock with the same chunk arrivals (the reference)."""
    now = chunks[0][0]
    pacer = Pacer(playout.frame_ms, playout.lead_ms, clock=lambda: now)
    total_s, pushed, i, out = 0.0, 0, 0, []
    while True:
        while i < len(chunks) and chunks[i][0] <= now + 1e-12:
            total_s += chunks[i][1]
            whole = int((total_s + 1e-6) // playout.frame_s)
            i += 1
            n = (math.ceil(total_s / playout.frame_s - 1e-6) if i == len(chunks) else whole) - pushed
            for _ in range(n):
                pacer.push(object())
            pushed += n
            if i == len(chunks):
                pacer.finish()
        action = pacer.next_action(now)
        if action.kind in (ActionKind.RELEASE, ActionKind.SILENCE):
            out.append((now, playout.frame_s, action.kind is ActionKind.SILENCE))
            continue
        if action.kind is ActionKind.IDLE and i == len(chunks):
            return out
        nxt = [action.at_s] if action.kind is ActionKind.WAIT else []
        if i < len(chunks):
            nxt.append(chunks[i][0])
        now = min(nxt)


@pytest.mark.parametrize("seed", range(40))
def test_release_model_equals_the_pacer(seed: int) -> None:
    rng = random.Random(seed)
    playout = PacedPlayout(frame_ms=rng.choice([10, 20, 30]), lead_ms=rng.choice([20, 60, 120]))
    t, chunks = 1.0, []
    for _ in range(rng.randint(1, 12)):
        t += rng.uniform(0.0, 0.6)  # sometimes faster than playback, sometimes late (underruns)
        chunks.append((t, rng.choice([0.2, 0.3, 0.4, rng.uniform(0.05, 1.0)])))
    got = paced_frames(chunks, playout)
    want = _pacer_frames(chunks, playout)
    assert [s for _, _, s in got] == [s for _, _, s in want]
    assert [r for r, _, _ in got] == pytest.approx([r for r, _, _ in want], abs=1e-6)


@pytest.mark.parametrize("frame_ms,lead_ms", [(10, 0), (20, 60), (20, 5), (30, 120), (60, 500)])
def test_in_process_requests_carry_the_edges_deadline_margin(frame_ms: int, lead_ms: int) -> None:
    """The paced in-process run tells the engine what the gRPC edge tells it (the two runs stay comparable)."""
    playout = PacedPlayout(frame_ms=frame_ms, lead_ms=lead_ms)
    assert playout.deadline_margin_ms == pytest.approx(engine_deadline_margin_ms(frame_ms, lead_ms, PacingMode.REALTIME))


def test_late_chunk_gives_fill_and_on_time_chunks_none() -> None:
    playout = PacedPlayout()
    on_time = paced_frames([(0.0, 0.4), (0.3, 0.4)], playout)
    assert not any(s for _, _, s in on_time) and len(on_time) == 40
    late = paced_frames([(0.0, 0.2), (0.5, 0.2)], playout)
    assert any(s for _, _, s in late)
    assert late[0][0] == 0.0 and all(b[0] >= a[0] for a, b in zip(late, late[1:]))


def test_segments_follow_the_segmenter() -> None:
    assert segment_texts("您好，这里是客服中心。请问有什么可以帮您？") == ["您好，", "这里是客服中心。", "请问有什么可以帮您？"]


async def test_tiny_paced_closed_loop() -> None:
    voice = make_tiny_voice()
    config = EngineConfig(voices=("tiny",), max_slots=4, first_chunk_frames=8, chunk_frames=12)
    engine = make_engine("engine", config, {"tiny": voice}, None)
    await engine.start()
    items = [TextItem("a", "short", "x"), TextItem("b", "short", "y")]
    ids = {"x": [[1, 2, 3, 4], [5, 6, 7]], "y": [[2, 3, 4, 5, 6]]}
    try:
        records, wall_s = await run_paced_closed_loop(engine, items, ids.__getitem__, 2, 0.3, voice="tiny",
                                                      playout=PacedPlayout())
    finally:
        await engine.stop()
    assert records and all(r["status"] == "OK" and r["chunks"] > 0 for r in records)
    assert {r["worker"] for r in records} == {0, 1}
    row = paced_row(records, wall_s)
    assert row["turns"] == len(records) and row["errors"] == 0 and row["ttfa_ms_p50"] > 0
    # a call's turns follow each other: the next one starts after the previous one's audio was released
    for w in (0, 1):
        turns = [r for r in records if r["worker"] == w]
        assert [r["i"] for r in turns] == list(range(len(turns)))


async def test_starts_bench_runs_every_variant_on_every_schedule() -> None:
    from bench.call_starts import format_row, run_variants

    voice = make_tiny_voice()
    base = {"voices": ["tiny"], "max_slots": 4, "first_chunk_frames": 8, "chunk_frames": 12}
    items = [TextItem("a", "short", "x"), TextItem("b", "short", "y")]
    ids = {"x": [[1, 2, 3, 4]], "y": [[2, 3, 4, 5, 6], [7, 8]]}
    variants = [{}, {"max_ramping_streams": 0}]
    rows = await run_variants(base, variants, {"tiny": voice}, "tiny", items, ids.__getitem__, [3], [(20.0, 0.2)],
                              1, 42)
    assert [(r["variant"], r["schedule"].split()[0]) for r in rows] == [
        ({}, "3"), ({"max_ramping_streams": 0}, "3"), ({}, "poisson"), ({"max_ramping_streams": 0}, "poisson")]
    assert all(r["errors"] == 0 for r in rows)
    assert len(rows[0]["ttfa_ms_sorted"]) == 3 and rows[0]["ttfa_ms_sorted"] == sorted(rows[0]["ttfa_ms_sorted"])
    assert "| {} | 3 at once |" in format_row(rows[0])
