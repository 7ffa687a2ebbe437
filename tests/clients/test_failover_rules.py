"""The client failover's rules on virtual time, without a server: when a REALTIME stream counts as lost (frames
owed mid-turn, nothing owed between turns), the media time a late-noticed break skips, resent text cut within the
server's limits, the bound on the server's buffered text, and the jittered backoff."""

from __future__ import annotations

import random

import pytest

from clients.failover import backoff_pause_s
from clients.stall import FrameWatch, skipped_slots_ms
from clients.text_budget import TextBudget, delta_pieces

BOUND_S = 1.0
FIRST_S = 10.0


def watch() -> FrameWatch:
    w = FrameWatch(BOUND_S, FIRST_S)
    w.reset(0.0)
    return w


def test_nothing_is_owed_before_any_text_nor_between_turns():
    w = watch()
    assert w.deadline_s(0.0) is None
    w.text_sent("t1", 1.0)
    w.frame("t1", 1.2)
    w.turn_ended("t1")  # turn_done: the pacer goes idle, no frame is missing from here on
    assert w.deadline_s(1.3) is None
    assert not w.lost(1000.0, 1.3)


def test_a_playing_turn_owes_a_frame_within_the_bound_and_silence_frames_count():
    w = watch()
    w.text_sent("t1", 0.0)
    w.frame("t1", 0.5)  # first frame: the turn plays
    assert w.deadline_s(0.5) == pytest.approx(0.5 + BOUND_S)
    t = 0.5
    for _ in range(100):  # underrun fill (flagged silence) every 20 ms keeps the stream alive
        t += 0.02
        w.frame("t1", t)
        assert not w.lost(t, t)
    assert not w.lost(t + BOUND_S - 0.001, t)
    assert w.lost(t + BOUND_S, t)


def test_before_the_first_frame_only_the_long_bound_applies():
    w = watch()
    w.text_sent("t1", 2.0)
    assert w.deadline_s(2.0) == pytest.approx(2.0 + FIRST_S)  # time to first audio is no stall
    assert not w.lost(2.0 + BOUND_S * 3, 2.0)
    assert w.lost(2.0 + FIRST_S, 2.0)
    w.frame("t1", 3.0)
    assert w.deadline_s(3.0) == pytest.approx(3.0 + BOUND_S)


def test_fill_between_turns_and_a_queued_turn():
    w = watch()
    w.text_sent("a", 0.0)
    w.text_sent("b", 0.0)
    w.frame("a", 0.1)
    w.turn_ended("a")
    w.frame("", 0.2)  # the pacer fills between a and b (turn id empty): b still waits for its first frame
    assert w.bound_s() == FIRST_S and w.deadline_s(0.2) == pytest.approx(0.2 + FIRST_S)
    w.frame("b", 0.3)
    assert w.bound_s() == BOUND_S


def test_a_clear_stops_what_was_owed():
    w = watch()
    w.text_sent("a", 0.0)
    w.frame("a", 0.1)
    w.text_sent("b", 0.1)
    w.clear_sent("a")
    assert w.bound_s() == FIRST_S  # b is still owed
    w.clear_sent("")
    assert w.deadline_s(0.1) is None


def test_time_the_application_spent_away_is_not_the_servers():
    w = watch()
    w.text_sent("t1", 0.0)
    w.frame("t1", 0.1)
    # the application comes back to read after 5 s: the server gets the whole bound from then
    assert w.deadline_s(5.1) == pytest.approx(5.1 + BOUND_S)
    assert not w.lost(5.5, 5.1)


def test_text_sent_keeps_a_waiting_turn_alive_and_a_new_stream_forgets_everything():
    w = watch()
    w.text_sent("t1", 0.0)
    w.frame("t1", 0.1)
    w.text_sent("t1", 0.5)  # more text to a playing turn: it still plays
    assert w.bound_s() == BOUND_S and w.activity_s == 0.5
    w.reset(2.0)
    assert w.deadline_s(2.0) is None


def test_bounds_can_be_turned_off():
    w = FrameWatch(None, None)
    w.reset(0.0)
    w.text_sent("t1", 0.0)
    w.frame("t1", 0.1)
    assert w.deadline_s(0.1) is None


@pytest.mark.parametrize("late_ms, skipped", [(None, 0), (0, 0), (9, 0), (10, 0), (11, 20), (20, 20), (21, 40),
                                              (980, 980), (990, 1000)])
def test_a_break_noticed_late_skips_the_missed_slots(late_ms, skipped):
    last = None if late_ms is None else 100.0
    now = 100.0 + 0.020 + (late_ms or 0) / 1000.0  # the next frame was due one frame (20 ms) after the last
    assert skipped_slots_ms(last, now, 20) == skipped


def test_resent_text_is_cut_within_the_delta_limit_never_inside_a_span():
    text = "请拨打" + "1" * 10 + "，" + "您好" * 30 + "。再见"
    spans = [(3, 13)]  # the phone number (a span lies inside one delta the application sent: never over the limit)
    pieces = delta_pieces(0, len(text), text, 10, spans)
    assert "".join(text[a:b] for a, b in pieces) == text
    assert all(0 < b - a <= 10 for a, b in pieces)
    assert all(not (a < c < b) for c, _ in pieces[1:] for a, b in spans)  # no cut inside the span
    assert pieces[:2] == [(0, 3), (3, 13)]  # the cut that would have split the number moved before it


def test_pieces_prefer_to_end_after_punctuation():
    text = "您好，这里是客户服务中心。您的业务正在办理中，请不要挂机。"
    pieces = delta_pieces(0, len(text), text, 8)
    assert "".join(text[a:b] for a, b in pieces) == text
    assert all(b - a <= 8 for a, b in pieces)
    assert all(text[b - 1] in "，。" for a, b in pieces[:-1] if any(ch in "，。" for ch in text[a + 4:b]))
    assert delta_pieces(5, 5, text, 8) == [] and delta_pieces(0, 6, text, 0) == [(0, 6)]


def test_the_buffer_bound_counts_written_text_until_timed_or_ended():
    b = TextBudget()
    b.reset(100)
    assert b.fits(100) and not b.fits(101)
    b.written("a", 60)
    b.written("b", 30)
    assert b.queued == 90 and b.fits(10) and not b.fits(11) and not b.fits(5, waiting=6)
    assert b.timed("a", 25) and b.queued == 65
    assert not b.timed("a", 20)  # words come in order: an earlier word frees nothing more
    assert not b.timed("zz", 5)  # a turn not written here
    assert b.timed("a", 500) and b.queued == 30  # never more than was written
    assert b.turn_ended("b") and b.queued == 0 and not b.turn_ended("b")
    b.reset(0)
    b.written("c", 10**6)
    assert b.fits(10**6)  # no limit announced


def test_backoff_pauses_are_jittered_within_their_share():
    rng = random.Random(7)
    pauses = [backoff_pause_s(0.4, 0.5, rng.random()) for _ in range(200)]
    assert all(0.2 <= p <= 0.4 for p in pauses)
    assert len({round(p, 6) for p in pauses}) > 150  # spread, not one value
    assert backoff_pause_s(0.4, 0.0, 0.9) == 0.4
    assert backoff_pause_s(0.4, 1.0, 0.5) == pytest.approx(0.2)
