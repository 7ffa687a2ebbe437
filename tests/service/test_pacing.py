"""Pacer and PacedSender on fake clocks (the driver on a virtual-time loop): lead bound, cadence, silence, no bursts."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from service.errors import InvalidArgument
from service.paced_sender import PacedSender
from service.pacing import (
    Action,
    ActionKind,
    Pacer,
    PacerClosed,
    PacingConfigError,
    PacingMode,
    engine_deadline_margin_ms,
)
from tests.service.virtual_time import run_virtual

EPS = 1e-6


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def simulate(
    pacer: Pacer,
    clock: FakeClock,
    pushes: list[tuple[float, int]],
    finish_at: float | None = None,
    end_s: float = 5.0,
    blackout: tuple[float, float] | None = None,
) -> list[Action]:
    """Drive `pacer` like the async sender would: push (time, n_frames) batches, act on every decision.

    `blackout=(a, b)`: the caller does not run between a and b (event-loop stall), then resumes at b.
    Pushed items are consecutive integers.
    """
    events = sorted(pushes)
    next_item = 0
    sent: list[Action] = []
    finished = False
    while clock.t <= end_s:
        while events and events[0][0] <= clock.t + 1e-12:
            _, n = events.pop(0)
            for _ in range(n):
                pacer.push(next_item)
                next_item += 1
        if finish_at is not None and not finished and clock.t + 1e-12 >= finish_at and not events:
            pacer.finish()
            finished = True
        if blackout and blackout[0] <= clock.t < blackout[1]:
            clock.t = blackout[1]
            continue
        action = pacer.next_action(clock.t)
        if action.kind in (ActionKind.RELEASE, ActionKind.SILENCE):
            sent.append(action)
            continue
        wake = [e[0] for e in events[:1]]
        if finish_at is not None and not finished:
            wake.append(finish_at)
        if action.kind is ActionKind.WAIT:
            wake.append(action.at_s)
        if blackout and clock.t < blackout[0]:
            wake.append(blackout[0])
        if not wake:
            break
        clock.t = max(clock.t, min(wake))
    return sent


def _pacer(frame_ms: int = 20, lead_ms: int = 60, **kw) -> tuple[Pacer, FakeClock]:
    clock = FakeClock()
    return Pacer(frame_ms, lead_ms, clock=clock, **kw), clock


def _check_never_early(sent: list[Action], lead_ms: float, t0: float, pts0: int = 0) -> None:
    for a in sent:
        play_s = t0 + (a.pts_ms - pts0) / 1000.0
        assert a.at_s >= play_s - lead_ms / 1000.0 - EPS, f"pts {a.pts_ms} released {play_s - a.at_s:.4f}s early"
        assert a.at_s <= play_s + EPS, f"pts {a.pts_ms} released after its play time"


def test_no_frame_released_earlier_than_lead_and_steady_cadence() -> None:
    pacer, clock = _pacer(20, 60)
    sent = simulate(pacer, clock, [(0.0, 50)], finish_at=0.0)
    assert [a.kind for a in sent] == [ActionKind.RELEASE] * 50
    assert [a.item for a in sent] == list(range(50))
    assert [a.seq for a in sent] == list(range(50))
    assert [a.pts_ms for a in sent] == [20 * k for k in range(50)]
    _check_never_early(sent, 60, t0=0.0)
    times = np.array([a.at_s for a in sent])
    assert np.all(times[:4] == 0.0)  # the lead: pts 0, 20, 40, 60 go at once
    assert np.allclose(np.diff(times[3:]), 0.020, atol=1e-9)  # then exactly one frame per 20 ms
    assert all(a.at_s >= a.pts_ms / 1000 - 0.060 - EPS for a in sent)
    assert pacer.stats.underruns == 0 and pacer.stats.silence_frames == 0
    assert pacer.next_action(clock.t).kind is ActionKind.IDLE


def test_cadence_holds_with_a_bursty_producer() -> None:
    pacer, clock = _pacer(20, 60)
    # the engine delivers 200 ms of audio every 100 ms (twice real time), in bursts
    pushes = [(0.1 * i, 10) for i in range(12)]
    sent = simulate(pacer, clock, pushes, finish_at=0.1 * 11)
    assert len(sent) == 120 and all(a.kind is ActionKind.RELEASE for a in sent)
    times = np.array([a.at_s for a in sent])
    assert np.allclose(np.diff(times[3:]), 0.020, atol=1e-9)
    _check_never_early(sent, 60, t0=0.0)


def test_stall_sends_flagged_silence_then_resumes_without_a_burst() -> None:
    pacer, clock = _pacer(20, 60)
    # 400 ms of audio, then nothing until 545 ms (synthesis fell behind), then 400 ms more
    sent = simulate(pacer, clock, [(0.0, 20), (0.545, 20)], finish_at=0.545)
    kinds = [a.kind for a in sent]
    assert kinds[:20] == [ActionKind.RELEASE] * 20
    n_silence = kinds.count(ActionKind.SILENCE)
    assert n_silence == 10 and kinds[20:30] == [ActionKind.SILENCE] * 10
    assert pacer.stats.underruns == 1 and pacer.stats.silence_frames == 10
    # silence took the slots: pts stay contiguous, the first audio after the stall plays at 600 ms
    assert [a.pts_ms for a in sent] == [20 * k for k in range(50)]
    assert [a.item for a in sent if a.kind is ActionKind.RELEASE] == list(range(40))
    first_back = sent[30]
    assert first_back.kind is ActionKind.RELEASE and first_back.pts_ms == 600 and first_back.at_s == 0.545
    # no catch-up: after the stall, one frame per 20 ms (never two in a frame period)
    after = np.array([a.at_s for a in sent[30:]])
    assert np.allclose(np.diff(after[1:]), 0.020, atol=1e-9)
    assert after[1] - after[0] == pytest.approx(0.015)
    # silence frames are sent at their slot's release time + grace, keeping the 60 ms lead
    for a in sent[20:30]:
        assert a.at_s == pytest.approx(a.pts_ms / 1000 - 0.060 + 0.010)
    _check_never_early(sent, 60, t0=0.0)


def test_two_stalls_count_two_underruns() -> None:
    pacer, clock = _pacer(20, 40)
    simulate(pacer, clock, [(0.0, 5), (0.2, 5), (0.5, 5)], finish_at=0.5)
    assert pacer.stats.underruns == 2
    assert pacer.stats.released_frames == 15


def test_short_first_chunk_does_not_trigger_silence_while_lead_fills() -> None:
    pacer, clock = _pacer(20, 200)  # a 200 ms lead: 11 slots are due at once
    sent = simulate(pacer, clock, [(0.0, 2), (0.025, 30)], finish_at=0.025)
    assert all(a.kind is ActionKind.RELEASE for a in sent) and len(sent) == 32
    assert pacer.stats.underruns == 0
    _check_never_early(sent, 200, t0=0.0)


def test_a_turn_waits_for_its_start_buffer_instead_of_starting_thin() -> None:
    """The first chunk after a turn's cut leading silence can be a few frames: started on them, the gateway runs dry
    before the next chunk; with a start buffer the turn starts once 160 ms is queued and never fills."""
    pacer, clock = _pacer(20, 60)
    simulate(pacer, clock, [(0.0, 3), (0.1, 10)], finish_at=0.1)
    assert pacer.stats.underruns == 1  # no start buffer: three frames, then a gap
    pacer, clock = _pacer(20, 60, start_ms=160, start_wait_ms=200)
    sent = simulate(pacer, clock, [(0.0, 3), (0.1, 10)], finish_at=0.1)
    assert sent[0].at_s == pytest.approx(0.1) and sent[0].pts_ms == 0  # held until 8 frames were queued
    assert pacer.stats.underruns == 0 and len(sent) == 13
    _check_never_early(sent, 60, t0=0.1)


def test_the_start_hold_is_bounded_and_ends_with_the_audio() -> None:
    pacer, clock = _pacer(20, 60, start_ms=160, start_wait_ms=200)
    sent = simulate(pacer, clock, [(0.0, 3), (0.5, 10)], finish_at=0.5)
    assert sent[0].at_s == pytest.approx(0.2)  # waited start_wait_ms for more, then started
    pacer, clock = _pacer(20, 60, start_ms=160, start_wait_ms=200)
    sent = simulate(pacer, clock, [(0.0, 3)], finish_at=0.0)
    assert [a.at_s for a in sent[:1]] == [0.0] and len(sent) == 3  # a turn shorter than the buffer: at once


def test_a_turn_behind_one_still_playing_is_not_held() -> None:
    pacer, clock = _pacer(20, 60, start_ms=160, start_wait_ms=200)
    sent = simulate(pacer, clock, [(0.0, 10)], finish_at=0.0)  # plays until 0.2
    clock.t = 0.15
    sent += simulate(pacer, clock, [(0.15, 2), (0.3, 10)], finish_at=0.3)
    nxt = [a for a in sent if a.pts_ms >= 200]
    assert nxt[0].pts_ms == 200 and nxt[0].at_s == pytest.approx(0.15)  # right behind, no wait for a buffer


@pytest.mark.parametrize("kw", [{"start_ms": -1}, {"start_wait_ms": 5000}, {"start_ms": True}])
def test_start_buffer_values_are_checked(kw) -> None:
    with pytest.raises(PacingConfigError, match="start"):
        Pacer(20, 60, **kw)


def test_asap_releases_everything_immediately() -> None:
    clock = FakeClock()
    pacer = Pacer(20, 60, mode="asap", clock=clock)
    sent = simulate(pacer, clock, [(0.0, 30), (1.0, 5)], finish_at=1.0)
    assert len(sent) == 35 and all(a.kind is ActionKind.RELEASE for a in sent)
    assert [a.at_s for a in sent] == [0.0] * 30 + [1.0] * 5
    assert [a.pts_ms for a in sent] == [20 * k for k in range(35)]  # contiguous, no silence in the gap
    assert pacer.stats.silence_frames == 0


def test_idle_gap_restarts_the_play_clock_and_pts_tracks_time() -> None:
    pacer, clock = _pacer(20, 60)
    sent = simulate(pacer, clock, [(0.0, 5)], finish_at=0.0)
    assert pacer.next_action(0.5).kind is ActionKind.IDLE  # no silence while idle
    clock.t = 1.0
    sent += simulate(pacer, clock, [(1.0, 5)], finish_at=1.0)
    assert [a.pts_ms for a in sent] == [0, 20, 40, 60, 80, 1000, 1020, 1040, 1060, 1080]
    assert sent[5].at_s == 1.0  # the new run starts at once
    assert pacer.stats.silence_frames == 0


def test_next_turn_is_scheduled_behind_audio_still_playing() -> None:
    pacer, clock = _pacer(20, 60)
    sent = simulate(pacer, clock, [(0.0, 3)], finish_at=0.0)  # pts 0-59 released at t=0
    clock.t = 0.03
    sent += simulate(pacer, clock, [(0.03, 10)], finish_at=0.03)
    assert [a.pts_ms for a in sent] == [20 * k for k in range(13)]  # no gap, no jump
    _check_never_early(sent, 60, t0=0.0)


def test_late_caller_skips_slots_instead_of_bursting() -> None:
    pacer, clock = _pacer(20, 60)
    sent = simulate(pacer, clock, [(0.0, 50)], finish_at=0.0, blackout=(0.1, 0.4))
    assert pacer.stats.skipped_frames > 0
    at_resume = [a for a in sent if a.at_s == pytest.approx(0.4)]
    assert len(at_resume) <= 60 // 20 + 1  # at most a lead's worth, not the 15 frames missed
    pts = [a.pts_ms for a in sent]
    assert pts == sorted(pts) and len(set(pts)) == len(pts)
    assert pts[-1] - pts[0] == 20 * (49 + pacer.stats.skipped_frames)
    resumed = [a for a in sent if a.at_s >= 0.4]
    assert resumed[0].pts_ms >= 400  # playback time shifted to "now"
    assert all(a.at_s >= a.pts_ms / 1000 - 0.060 - EPS for a in sent)
    assert [a.item for a in sent] == list(range(50))


def test_clear_drops_unreleased_frames_and_goes_idle() -> None:
    pacer, clock = _pacer(20, 60)
    for i in range(10):
        pacer.push(i)
    released = []
    while (a := pacer.next_action(0.0)).kind is ActionKind.RELEASE:
        released.append(a.item)
    assert released == [0, 1, 2, 3]
    assert pacer.clear() == [4, 5, 6, 7, 8, 9]
    assert pacer.queued_frames == 0
    assert pacer.next_action(0.05).kind is ActionKind.IDLE
    assert pacer.stats.silence_frames == 0


def test_look_ahead_bound() -> None:
    pacer, clock = _pacer(20, 60, max_ahead_ms=200)
    for i in range(10):
        pacer.push(i)
    assert pacer.ahead_ms(0.0) == 200 and not pacer.wants_more(0.0)
    while pacer.next_action(0.0).kind is ActionKind.RELEASE:
        pass
    # 6 frames queued (120 ms) + 80 ms released but not yet played
    assert pacer.buffered_ms(0.0) == pytest.approx(80.0)
    assert not pacer.wants_more(0.0)
    assert pacer.next_action(0.02).kind is ActionKind.RELEASE
    assert pacer.ahead_ms(0.02) == pytest.approx(180.0) and pacer.wants_more(0.02)
    assert pacer.playback_pts_ms(0.02) == pytest.approx(20.0)


def test_close() -> None:
    pacer, _ = _pacer()
    pacer.push(1)
    pacer.close()
    assert pacer.next_action(0.0).kind is ActionKind.CLOSED
    with pytest.raises(PacerClosed):
        pacer.push(2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"frame_ms": 20, "lead_ms": 501},
        {"frame_ms": 20, "lead_ms": -1},
        {"frame_ms": 5, "lead_ms": 60},
        {"frame_ms": 61, "lead_ms": 60},
        {"frame_ms": 20, "lead_ms": 60, "mode": "turbo"},
        {"frame_ms": 20, "lead_ms": 60, "grace_ms": 15},
        {"frame_ms": 20, "lead_ms": 60, "max_ahead_ms": 70},
    ],
)
def test_invalid_settings_raise_typed_errors(kwargs) -> None:
    with pytest.raises(PacingConfigError) as info:
        Pacer(**kwargs)
    assert isinstance(info.value, InvalidArgument) and isinstance(info.value, ValueError)


def test_lead_500_is_accepted_and_mode_parses() -> None:
    assert Pacer(20, 500).lead_ms == 500
    assert PacingMode.parse("realtime") is PacingMode.REALTIME


# ---------------------------------------------------------------------------------------------------
# asyncio driver on a virtual-time event loop: the pacer's clock is the loop's, so every release time is exact
# ---------------------------------------------------------------------------------------------------


def _sender(frame_ms: int, lead_ms: int, sent: list[Action], **kw) -> PacedSender:
    async def send(action: Action) -> None:
        sent.append(action)

    return PacedSender(Pacer(frame_ms, lead_ms, clock=asyncio.get_running_loop().time, **kw), send)


async def _until(predicate, step_s: float = 0.001) -> None:
    while not predicate():
        await asyncio.sleep(step_s)


def test_paced_sender_releases_frame_k_at_its_time_minus_the_lead() -> None:
    async def main() -> tuple[list[Action], float]:
        sent: list[Action] = []
        sender = _sender(10, 20, sent)
        task = asyncio.create_task(sender.run())
        for i in range(12):
            sender.push(i)
        sender.finish()
        await _until(lambda: len(sent) == 12)
        done_s = asyncio.get_running_loop().time()
        sender.close()
        await task
        return sent, done_s

    sent, done_s = run_virtual(main())
    assert [a.kind for a in sent] == [ActionKind.RELEASE] * 12
    assert [a.item for a in sent] == list(range(12)) and [a.seq for a in sent] == list(range(12))
    assert [a.pts_ms for a in sent] == [10 * k for k in range(12)]
    # frame k plays at k·10 ms and goes out exactly at max(0, its play time − the 20 ms lead): never earlier
    for a in sent:
        assert a.at_s == pytest.approx(max(0.0, a.pts_ms / 1000 - 0.020), abs=1e-9), a
    assert done_s == pytest.approx(0.090, abs=0.0011)  # the last frame waited for its release time


def test_paced_sender_is_idle_without_audio_fills_a_stall_with_silence_and_never_bursts() -> None:
    async def main() -> tuple[list[Action], PacedSender]:
        sent: list[Action] = []
        sender = _sender(10, 20, sent)  # grace = min(lead, frame/2) = 5 ms
        task = asyncio.create_task(sender.run())
        await asyncio.sleep(0.02)
        assert sent == []  # idle: nothing is sent before audio exists
        for i in range(3):
            sender.push(i)  # t = 20 ms: the play clock starts here
        await asyncio.sleep(0.085)  # stall: the next audio comes at 105 ms
        for i in range(3, 6):
            sender.push(i)
        sender.finish()
        await _until(lambda: sum(a.kind is ActionKind.RELEASE for a in sent) == 6)
        sender.close()
        await task
        return sent, sender

    sent, sender = run_virtual(main())
    t0 = 0.020
    kinds = [a.kind for a in sent]
    # slots pts 30-90 ran dry: each got a silence frame at its release time + 5 ms grace (before 105 ms)
    assert kinds == [ActionKind.RELEASE] * 3 + [ActionKind.SILENCE] * 7 + [ActionKind.RELEASE] * 3
    assert [a.item for a in sent if a.kind is ActionKind.RELEASE] == list(range(6))
    assert [a.seq for a in sent] == list(range(13)) and [a.pts_ms for a in sent] == [10 * k for k in range(13)]
    for a in sent:
        play_s = t0 + a.pts_ms / 1000
        assert a.at_s >= play_s - 0.020 - EPS, f"pts {a.pts_ms} released before its time minus the lead"
        assert a.at_s <= play_s + EPS, f"pts {a.pts_ms} released after its play time"
    for a in sent[3:10]:
        assert a.at_s == pytest.approx(t0 + a.pts_ms / 1000 - 0.020 + 0.005, abs=1e-9)
    # after the stall, one frame per frame period (the first at once, it is already due): no catch-up burst
    assert [a.at_s for a in sent[10:]] == pytest.approx([0.105, 0.110, 0.120], abs=1e-9)
    assert sender.pacer.stats.underruns == 1 and sender.pacer.stats.silence_frames == 7


def test_wait_for_room_returns_only_once_playback_made_room() -> None:
    async def main() -> tuple[float, list[tuple[float, bool]]]:
        sent: list[Action] = []
        sender = _sender(10, 20, sent, max_ahead_ms=60)
        loop = asyncio.get_running_loop()
        for i in range(8):
            sender.push(i)
        assert not sender.pacer.wants_more()
        task = asyncio.create_task(sender.run())
        await sender.wait_for_room()
        returned_s = loop.time()
        assert sender.pacer.wants_more()
        sender.close()
        await task
        return returned_s, [(a.at_s, a.pts_ms) for a in sent]

    returned_s, released = run_virtual(main())
    # 80 ms queued at t = 0, 60 ms allowed ahead of playback: room exists once more than 20 ms has played
    pacer = Pacer(10, 20, clock=lambda: 0.0, max_ahead_ms=60)
    for i in range(8):
        pacer.push(i)
    for at_s, _ in released:
        assert pacer.next_action(at_s).kind is ActionKind.RELEASE
    assert not pacer.wants_more(returned_s - 0.0101)  # no room a frame period earlier
    assert pacer.wants_more(returned_s)
    assert 0.020 < returned_s <= 0.040


def test_engine_deadline_margin_is_where_the_pacer_fills() -> None:
    """The margin the engine is told (lead − grace + one frame under REALTIME, 0 under ASAP) is exactly how early a
    frame must be queued: queued at its play time minus (lead − grace) it goes out as audio, a moment later its
    slot is filled with silence (virtual clock)."""
    assert engine_deadline_margin_ms(20, 60, "REALTIME") == 70.0  # 60 − 10 + 20
    assert engine_deadline_margin_ms(20, 5, "realtime") == 20.0  # grace = lead: 0 + 20
    assert engine_deadline_margin_ms(20, 60, PacingMode.ASAP) == 0.0
    for late_ms, silence in ((-1.0, False), (1.0, True)):
        clock = FakeClock()
        pacer = Pacer(20, 60, clock=clock)
        for i in range(10):  # 200 ms of audio from t0 = 0: the lead fills, then one frame per 20 ms
            pacer.push(i)
        released = 0
        while released < 10:
            action = pacer.next_action()
            if action.kind is ActionKind.WAIT:
                clock.t = action.at_s
            else:
                assert action.kind is ActionKind.RELEASE
                released += 1
        # frame 10 plays at 0.2 s; it arrives (lead − grace) before that, give or take a millisecond
        clock.t = 0.2 - (60 - 10 - late_ms) / 1000.0
        action = pacer.next_action()
        if action.kind is ActionKind.WAIT:
            pacer.push(10)
            action = pacer.next_action()
        assert action.kind is (ActionKind.SILENCE if silence else ActionKind.RELEASE)
