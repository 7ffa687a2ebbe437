"""Benchmark metrics on synthetic timelines with known answers: chunks, on-time rule, stalls, percentiles, goodput."""

import math

import pytest

from bench.metrics import (
    Chunk,
    MetricsError,
    TurnTimeline,
    bisect_goodput,
    describe,
    group_chunks,
    meets_goodput,
    on_time_flags,
    percentile,
    stall_seconds,
    summarize,
    turn_metrics,
)


def test_every_frame_is_a_chunk_without_burst_gap():
    frames = [(0.0, 0.02), (0.0, 0.02), (0.5, 0.02)]
    assert group_chunks(frames, None) == [Chunk(0.0, 0.02), Chunk(0.0, 0.02), Chunk(0.5, 0.02)]


def test_realtime_bursts_group_into_chunks():
    # lead burst of 3 frames at t=0, then one frame per 20 ms, then a burst of 2 after a stall
    frames = [(0.0, 0.02), (0.0005, 0.02), (0.001, 0.02), (0.021, 0.02), (0.041, 0.02), (0.300, 0.02), (0.3004, 0.02)]
    chunks = group_chunks(frames, 0.005)
    assert [c.t_s for c in chunks] == [0.0, 0.021, 0.041, 0.300]
    assert [round(c.duration_s, 6) for c in chunks] == [0.06, 0.02, 0.02, 0.04]


def test_group_chunks_rejects_unsorted_frames():
    with pytest.raises(MetricsError):
        group_chunks([(0.1, 0.02), (0.05, 0.02)], None)


def test_on_time_rule_known_answer():
    # chunks of 100 ms; chunk 2 arrives at 0.25 > 0 + 0.2 → late; chunk 3 at 0.29 ≤ 0.3 → on time
    chunks = [Chunk(0.0, 0.1), Chunk(0.05, 0.1), Chunk(0.25, 0.1), Chunk(0.29, 0.1)]
    assert on_time_flags(chunks) == [True, True, False, True]
    assert on_time_flags(chunks, tolerance_s=0.05) == [True, True, True, True]
    assert on_time_flags([]) == []


def test_on_time_boundary_is_inclusive():
    assert on_time_flags([Chunk(1.0, 0.2), Chunk(1.2, 0.1)]) == [True, True]


def test_stall_seconds_for_prebuffers():
    # 100 ms chunks; chunk 2 arrives at 0.35 although the player needs it at 0.2
    chunks = [Chunk(0.0, 0.1), Chunk(0.1, 0.1), Chunk(0.35, 0.1), Chunk(0.36, 0.1)]
    assert stall_seconds(chunks, 0.0) == pytest.approx(0.15)  # waits 0.2 → 0.35, then chunk 3 is ready at 0.45
    assert stall_seconds(chunks, 0.1) == pytest.approx(0.05)  # needs chunk 2 at 0.3
    assert stall_seconds(chunks, 0.2) == pytest.approx(0.0)   # needs chunk 2 at 0.4
    assert stall_seconds([], 0.1) == 0.0
    with pytest.raises(MetricsError):
        stall_seconds(chunks, -0.1)


def test_stall_accumulates_over_two_gaps():
    chunks = [Chunk(0.0, 0.1), Chunk(0.3, 0.1), Chunk(0.6, 0.1)]
    # needs 2nd at 0.1 (waits 0.2), plays till 0.4, needs 3rd at 0.4 (waits 0.2)
    assert stall_seconds(chunks, 0.0) == pytest.approx(0.4)
    # with 100 ms pre-buffer: start 0.1, need 2nd at 0.2 → wait 0.1, play 0.3-0.4, need 3rd at 0.4 → wait 0.2
    assert stall_seconds(chunks, 0.1) == pytest.approx(0.3)


def test_percentile_linear_interpolation():
    xs = [10, 20, 30, 40, 50]
    assert percentile(xs, 50) == 30
    assert percentile(xs, 90) == pytest.approx(46.0)
    assert percentile(xs, 95) == pytest.approx(48.0)
    assert percentile(xs, 99) == pytest.approx(49.6)
    assert percentile([7], 90) == 7
    assert math.isnan(percentile([], 50))
    with pytest.raises(MetricsError):
        percentile(xs, 101)
    d = describe([3, 1, 2, float("nan")])
    assert d["n"] == 3 and d["mean"] == 2 and d["min"] == 1 and d["max"] == 3 and d["p50"] == 2


def _timeline(frames, ref=0.0, flush=0.0):
    return TurnTimeline(ref_s=ref, flush_s=flush, frames=frames)


def test_turn_metrics_asap_known_answer():
    # ASAP, 20 ms frames: 5 frames at 0.15 s, 5 more at 0.30 s. Every frame is a chunk: frames 5, 6, 7 are due
    # at 0.25, 0.27, 0.29 (late), frames 8, 9 at 0.31, 0.33 (on time)
    frames = [(0.15, 0.02, False)] * 5 + [(0.30, 0.02, False)] * 5
    m = turn_metrics(_timeline(frames, ref=0.0, flush=0.01), burst_gap_s=None)
    assert m["chunks"] == 10 and m["chunks_on_time"] == 7 and not m["all_on_time"]
    assert m["on_time_fraction"] == pytest.approx(0.7)
    assert m["ttfa_ms"] == pytest.approx(150.0) and m["ttfa_flush_ms"] == pytest.approx(140.0)
    assert m["lcl_ms"] == pytest.approx(300.0)
    assert m["audio_s"] == pytest.approx(0.2) and m["rtf"] == pytest.approx(1.5)
    assert m["stall_s"]["0"] == pytest.approx(0.05)
    assert m["stall_s"]["100"] == pytest.approx(0.0)
    assert m["max_lateness_ms"] == pytest.approx(50.0)


def test_turn_metrics_leave_silence_out():
    # REALTIME: pre-roll silence, 3-frame lead burst, steady frames, underrun fill, then speech again
    frames = [(0.00, 0.02, True), (0.10, 0.02, False), (0.1002, 0.02, False), (0.1004, 0.02, False),
              (0.12, 0.02, False), (0.14, 0.02, True), (0.16, 0.02, True), (0.18, 0.02, True), (0.20, 0.02, False),
              (0.22, 0.02, False)]
    m = turn_metrics(_timeline(frames), burst_gap_s=0.005)
    assert m["silence_frames"] == 4 and m["fill_frames"] == 3 and m["frames"] == 10
    assert m["ttfa_ms"] == pytest.approx(100.0)  # first non-silence frame
    # chunks [0.10: 60 ms], [0.12: 20 ms], [0.20], [0.22]: due at 0.10, 0.16, 0.18, 0.20 → the last two are late
    assert m["chunks"] == 4 and m["chunks_on_time"] == 2
    # the player (no pre-buffer) waits 0.18 → 0.20 once; having slipped, it needs the last chunk only at 0.22
    assert m["stall_s"]["0"] == pytest.approx(0.02)
    assert m["stall_s"]["200"] == 0.0


def test_turn_metrics_without_audio():
    m = turn_metrics(_timeline([(0.1, 0.02, True)]), burst_gap_s=None)
    assert m["chunks"] == 0 and not m["all_on_time"] and math.isnan(m["ttfa_ms"])


def _ok_turn(ttfa, all_on_time=True, fill_frames=0):
    return {"status": "OK", "chunks": 3, "fill_frames": fill_frames, "audio_s": 1.0, "ttfa_ms": ttfa,
            "ttfa_flush_ms": ttfa, "lcl_ms": ttfa + 900,
            "rtf": 0.9, "on_time_fraction": 1.0 if all_on_time else 0.5, "all_on_time": all_on_time,
            "stall_s": {"0": 0.0 if all_on_time else 0.1, "100": 0.0}, "setup_ms": 2.0, "lag_ms": 0.5}


def test_summarize_counts_failed_turns_against_on_time():
    turns = [_ok_turn(100), _ok_turn(200, fill_frames=2), _ok_turn(300, all_on_time=False),
             {"status": "RESOURCE_EXHAUSTED"}, {"status": "inband:SYNTHESIS_FAILED", "chunks": 0}]
    s = summarize(turns, wall_s=10.0, prebuffers_ms=(0, 100))
    assert s["turns"] == 5 and s["ok"] == 3
    assert s["errors"] == {"RESOURCE_EXHAUSTED": 1, "inband:SYNTHESIS_FAILED": 1}
    assert s["ttfa_ms"]["p50"] == 200 and s["ttfa_ms"]["p90"] == pytest.approx(280.0)
    assert s["all_on_time_fraction"] == pytest.approx(2 / 5)
    assert s["chunk_on_time_fraction"] == pytest.approx(2.5 / 3)
    assert s["turns_with_fill_fraction"] == pytest.approx(1 / 3)
    assert s["stall_s"]["0"]["turns_stalled_fraction"] == pytest.approx(1 / 3)
    assert s["audio_s"] == 3.0 and s["rtfx"] == pytest.approx(0.3)
    assert not meets_goodput(s, ttfa_target_ms=300)
    good = summarize([_ok_turn(100)] * 100, wall_s=1.0, prebuffers_ms=(0, 100))
    assert meets_goodput(good, 300) and not meets_goodput(good, 99)


async def test_goodput_bisection_on_monotone_model():
    capacity = 3.3  # a synthetic server: passes iff rate ≤ capacity

    async def passes(rate):
        return rate <= capacity

    res = await bisect_goodput(passes, 1.0, 9.0, 6)
    assert res.bracket == "inside"
    assert capacity - 8 / 2**6 <= res.goodput_per_s <= capacity
    assert len(res.probes) == 8 and res.probes[:2] == [(1.0, True), (9.0, False)]
    assert (await bisect_goodput(passes, 4.0, 8.0, 3)).bracket == "below_lo"
    top = await bisect_goodput(passes, 0.5, 2.0, 3)
    assert top.bracket == "at_or_above_hi" and top.goodput_per_s == 2.0
    with pytest.raises(MetricsError):
        await bisect_goodput(passes, 2.0, 1.0, 3)


def test_summarize_reports_time_to_first_speech_beside_ttfa():
    a, b, old = _ok_turn(100), _ok_turn(200), _ok_turn(300)
    a["server"] = {"ttfa_ms": 90, "ttfs_ms": 120}  # speech 30 ms of media time after the first audio frame
    b["server"] = {"ttfa_ms": 180, "ttfs_ms": 200}
    old["server"] = {"ttfa_ms": 280}  # a server that does not report it
    s = summarize([a, b, old], wall_s=10.0, prebuffers_ms=(0,))
    assert s["ttfs_ms"]["n"] == 2 and s["ttfs_ms"]["min"] == pytest.approx(130.0) and s["ttfs_ms"]["max"] == 220.0
    assert s["server_ttfs_ms"]["p50"] == pytest.approx(160.0)
    assert s["ttfa_ms"]["n"] == 3
