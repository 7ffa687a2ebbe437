"""ProgressWatch: stalled only when the engine owes progress past the bound and the watch itself saw no loop turn."""

from __future__ import annotations

import threading

from service.liveness import CONFIRM_S, ProgressWatch, thread_stack


class Heartbeat:
    """A backend's heartbeat as the watch reads it: loop turns and the time owed (set by the test)."""

    def __init__(self) -> None:
        self.loop_turns = 0
        self.owed_s = 0.0

    def stalled_for_s(self) -> float:
        return self.owed_s


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_stalled_once_the_bound_passed_and_the_watch_saw_the_same_turn_long_enough() -> None:
    beat, clock = Heartbeat(), Clock()
    watch = ProgressWatch(beat, stall_s=3.0, clock=clock)
    assert not watch.check()  # owes nothing
    for owed in (0.5, 1.0, 1.5, 2.0, 2.5):
        beat.owed_s = owed
        clock.t += 0.5
        assert not watch.check()
    beat.owed_s, clock.t = 3.0, clock.t + 0.5
    assert watch.check()


def test_turning_loop_or_nothing_owed_is_never_stalled() -> None:
    beat, clock = Heartbeat(), Clock()
    watch = ProgressWatch(beat, stall_s=3.0, clock=clock)
    for _ in range(40):  # each reading finds a new loop turn (long iterations, but iterations)
        beat.loop_turns += 1
        beat.owed_s = 2.9
        clock.t += 0.5
        assert not watch.check()
    beat.owed_s = 0.0  # waiting for work: nothing owed, however long
    clock.t += 3600
    assert not watch.check()


def test_a_process_frozen_as_a_whole_is_not_a_stalled_engine() -> None:
    beat, clock = Heartbeat(), Clock()
    watch = ProgressWatch(beat, stall_s=3.0, clock=clock)
    beat.owed_s = 0.1
    assert not watch.check()
    beat.owed_s, clock.t = 10.1, clock.t + 10.0  # SIGSTOP for 10 s: the first reading after it finds 10 s owed
    assert not watch.check()
    beat.loop_turns += 1  # the engine thread finished its turn as soon as it ran again
    beat.owed_s, clock.t = 0.2, clock.t + 0.5
    assert not watch.check()
    beat.owed_s, clock.t = 10.0 + CONFIRM_S, clock.t + CONFIRM_S  # a real stall afterwards is still caught
    assert not watch.check()
    clock.t += CONFIRM_S
    beat.owed_s += CONFIRM_S
    assert watch.check()


def test_a_backend_without_a_heartbeat_and_a_zero_bound_are_never_stalled() -> None:
    assert not ProgressWatch(object(), stall_s=3.0).check()
    beat = Heartbeat()
    beat.owed_s = 1e6
    assert not ProgressWatch(beat, stall_s=0.0).check()


def test_thread_stack_shows_where_a_thread_waits() -> None:
    go, parked = threading.Event(), threading.Event()

    def park_here() -> None:
        parked.set()
        go.wait()

    t = threading.Thread(target=park_here)
    t.start()
    parked.wait(5)
    try:
        assert "park_here" in thread_stack(t)
    finally:
        go.set()
        t.join(5)
    assert thread_stack(t) == "" and thread_stack(None) == ""
