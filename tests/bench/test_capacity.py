"""bench.capacity: /proc readings, the sustainable-calls rule and the table (no server started here)."""

from __future__ import annotations

import os
import threading

from bench.capacity import format_rows, proc_cpu_s, proc_rss_mib, sustainable, thread_cpu_s, thread_shares


def _row(calls: int, on_time: float, fill: float, errors: int = 0) -> dict:
    return {"backend": "engine", "path": "grpc", "calls": calls, "chunks_on_time": on_time, "turns_with_fill": fill,
            "errors": errors, "turns_all_on_time": 1.0, "ttfa_ms_p50": 50.0, "ttfa_ms_p90": None, "x_realtime": 8.0,
            "cpu_s_per_audio_s": 0.1, "client_cpu_s_per_audio_s": None, "rss_mib": 700.0, "rss_mib_per_call": 1.5,
            "load_before": 1.0, "load_after": 1.2}


def test_sustainable_is_the_most_calls_meeting_both_bounds() -> None:
    rows = [_row(1, 1.0, 0.0), _row(8, 0.995, 0.0), _row(16, 0.999, 0.02), _row(24, 0.98, 0.0), _row(32, 1.0, 0.0, 1)]
    assert sustainable(rows) == 8  # 16: too many turns with fill; 24: late chunks; 32: errors
    assert sustainable([_row(1, 0.5, 0.0)]) == 0
    table = format_rows(rows[:1])
    assert "| engine | grpc | 1 | 50 / - | 100.0 % |" in table and table.count("\n") == 2


def test_proc_readings_see_this_process_and_its_threads() -> None:
    pid = os.getpid()
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    before = thread_cpu_s(pid)
    t = threading.Thread(target=spin)
    t.start()
    while proc_cpu_s(pid, t.native_id) < 0.05:
        pass
    after = thread_cpu_s(pid)
    stop.set()
    t.join()
    shares = thread_shares(pid, before, after, audio_s=1.0)
    assert t.native_id in [s["tid"] for s in shares]
    assert any(s["main"] for s in thread_shares(pid, before, after, audio_s=1.0, top=100))
    assert proc_cpu_s(pid) > 0 and proc_rss_mib(pid) > 1
