"""ProgressWatch: stalled only when the engine owes progress past the bound, the watch itself saw no loop turn, and the
engine thread is blocked or spinning (a thread starved of CPU by a busy host is not stalled)."""

from __future__ import annotations

import threading

from service.liveness import CONFIRM_S, MAX_GAP_S, ProgressWatch, thread_cpu_s, thread_stack


class Heartbeat:
    """A backend's heartbeat as the watch reads it: loop turns and the time owed (set by the test)."""

    def __init__(self) -> None:
        self.loop_turns = 0
        self.owed_s = 0.0

    def stalled_for_s(self) -> float:
        return self.owed_s


class Host:
    """The watch's clock and the engine thread's CPU clock, moved by the test (None: no CPU clock)."""

    def __init__(self, cpu: float | None = 0.0) -> None:
        self.t = 100.0
        self.cpu = cpu

    def clock(self) -> float:
        return self.t

    def cpu_clock(self) -> float | None:
        return self.cpu

    def tick(self, beat: Heartbeat, wall_s: float = 0.5, cpu_share: float = 0.0) -> None:
        """`wall_s` pass with no loop turn; the engine thread gets `cpu_share` of them in CPU."""
        self.t += wall_s
        beat.owed_s += wall_s
        if self.cpu is not None:
            self.cpu += wall_s * cpu_share


def watch_of(beat: Heartbeat, host: Host, stall_s: float = 3.0) -> ProgressWatch:
    return ProgressWatch(beat, stall_s, clock=host.clock, cpu_clock=host.cpu_clock)


def ticks_until_stalled(watch: ProgressWatch, beat: Heartbeat, host: Host, cpu_share: float, limit: int = 200) -> float:
    """Owed seconds at the first reading that says stalled (inf when none in `limit` readings)."""
    for _ in range(limit):
        host.tick(beat, cpu_share=cpu_share)
        if watch.check():
            return beat.owed_s
    return float("inf")


def test_a_blocked_engine_thread_is_stalled_once_the_bound_passed() -> None:
    beat, host = Heartbeat(), Host()
    watch = watch_of(beat, host)
    assert not watch.check()  # owes nothing
    owed = ticks_until_stalled(watch, beat, host, cpu_share=0.0)
    assert 3.0 <= owed <= 3.5  # the first reading at or past the bound


def test_a_spinning_engine_thread_is_stalled_and_a_starved_one_is_not() -> None:
    beat, host = Heartbeat(), Host()
    assert ticks_until_stalled(watch_of(beat, host), beat, host, cpu_share=1.0) <= 4.0
    beat, host = Heartbeat(), Host()  # a busy host gives the engine thread a tenth of a core
    assert ticks_until_stalled(watch_of(beat, host), beat, host, cpu_share=0.1, limit=40) == float("inf")  # 20 s
    # until the turn itself has used SPIN_CPU_SHARE × stall_s of CPU (2.7 s: 27 s at that share)
    assert ticks_until_stalled(watch_of(beat, host), beat, host, cpu_share=0.1) >= 20.0 + 27.0


def test_turning_loop_or_nothing_owed_is_never_stalled() -> None:
    beat, host = Heartbeat(), Host()
    watch = watch_of(beat, host)
    for _ in range(40):  # each reading finds a new loop turn (long iterations, but iterations)
        beat.loop_turns += 1
        beat.owed_s = 2.9
        host.t += 0.5
        assert not watch.check()
    beat.owed_s = 0.0  # waiting for work: nothing owed, however long
    host.t += 3600
    assert not watch.check()


def test_a_process_frozen_as_a_whole_is_not_a_stalled_engine() -> None:
    beat, host = Heartbeat(), Host()
    watch = watch_of(beat, host)
    for _ in range(2):  # a turn in progress for a second, seen by the watch
        host.tick(beat, cpu_share=1.0)
        assert not watch.check()
    host.tick(beat, wall_s=10.0)  # SIGSTOP for 10 s: no CPU, and the watch did not run either
    assert MAX_GAP_S < 10.0 and beat.owed_s >= 10.0
    assert not watch.check()
    beat.loop_turns += 1  # the engine thread finishes its turn as soon as it runs again
    beat.owed_s = 0.1
    host.t += 0.5
    assert not watch.check()
    owed = ticks_until_stalled(watch, beat, host, cpu_share=0.0)  # a real stall afterwards is still caught
    assert owed <= 3.5


def test_without_a_cpu_clock_the_wall_rules_decide() -> None:
    beat, host = Heartbeat(), Host(cpu=None)
    owed = ticks_until_stalled(watch_of(beat, host), beat, host, cpu_share=0.0)
    assert 3.0 <= owed <= 3.0 + CONFIRM_S


def test_a_backend_without_a_heartbeat_and_a_zero_bound_are_never_stalled() -> None:
    assert not ProgressWatch(object(), stall_s=3.0).check()
    beat, host = Heartbeat(), Host()
    beat.owed_s = 1e6
    watch = watch_of(beat, host, stall_s=0.0)
    assert not watch.check() and not watch.check()


def test_thread_clocks_and_stack_of_a_parked_thread() -> None:
    go, parked = threading.Event(), threading.Event()

    def park_here() -> None:
        parked.set()
        go.wait()

    t = threading.Thread(target=park_here)
    t.start()
    parked.wait(5)
    try:
        assert "park_here" in thread_stack(t)
        cpu = thread_cpu_s(t)
        assert cpu is not None and cpu >= 0.0
    finally:
        go.set()
        t.join(5)
    assert thread_stack(t) == "" and thread_stack(None) == ""
    assert thread_cpu_s(t) is None and thread_cpu_s(None) is None
