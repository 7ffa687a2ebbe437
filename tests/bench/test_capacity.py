"""bench.capacity: /proc readings, the sustainable-calls rule and the table (no server started here)."""

from __future__ import annotations

import os
import threading

from bench.capacity import (busy_row, capacity_summary, format_rows, format_summary, host_info, proc_cpu_s, proc_rss_mib,
                            search_done, sustainable, thread_cpu_s, thread_shares)


def _row(calls: int, on_time: float, fill: float, errors: int = 0, backend: str = "engine") -> dict:
    return {"backend": backend, "path": "grpc", "calls": calls, "chunks_on_time": on_time, "turns_with_fill": fill,
            "errors": errors, "turns_all_on_time": 1.0, "ttfa_ms_p50": 50.0, "ttfa_ms_p90": None, "x_realtime": 8.0,
            "cpu_s_per_audio_s": 0.1, "client_cpu_s_per_audio_s": None, "rss_mib": 700.0, "rss_mib_per_call": 1.5,
            "load_before": 1.0, "load_after": 1.2}


def test_sustainable_is_the_most_calls_meeting_both_bounds() -> None:
    rows = [_row(1, 1.0, 0.0), _row(8, 0.995, 0.0), _row(16, 0.999, 0.02), _row(24, 0.98, 0.0), _row(32, 1.0, 0.0, 1)]
    assert sustainable(rows) == 8  # 16: too many turns with fill; 24: late chunks; 32: errors
    assert sustainable([_row(1, 0.5, 0.0)]) == 0
    table = format_rows(rows[:1])
    assert "| engine | grpc | 1 | 50 / - | 100.0 % |" in table and table.count("\n") == 2


def test_search_stops_after_two_failing_levels_in_a_row() -> None:
    ok, bad = (1.0, 0.0), (0.8, 0.3)
    assert not search_done([_row(1, *ok)])
    assert not search_done([_row(1, *ok), _row(4, *bad)])  # one failure may be noise: go on
    assert not search_done([_row(1, *ok), _row(4, *bad), _row(8, *ok)])  # a pass resets the count
    assert search_done([_row(1, *ok), _row(4, *bad), _row(8, *bad)])
    assert search_done([_row(1, *bad), _row(4, *bad)])
    assert not search_done([_row(1, *ok), _row(4, *bad)], stop_after=3)


def test_summary_ratios_come_from_the_sustainable_levels() -> None:
    rows = [_row(1, 1.0, 0.0), _row(8, 1.0, 0.0), _row(12, 0.9, 0.1),
            _row(1, 1.0, 0.0, backend="naive"), _row(2, 1.0, 0.0, backend="naive"), _row(4, 0.5, 0.5, backend="naive"),
            {**_row(16, 1.0, 0.0), "path": "in-process"}]  # the in-process paced rows never size the pod
    rows[1]["ttfa_ms_p90"], rows[1]["cpu_s_per_audio_s"] = 240.0, 0.12
    result = {"backend": "engine", "concurrency": 16, "x_realtime": 16.0, "cpu_s_per_audio_s": 0.1,
              "chunks_on_time": 0.9, "ttfa_ms_p90": 900.0, "audio_s": 150.0}  # a bench.engine_load result row
    busy = busy_row(result, "python -m bench.engine_load --concurrency 16")
    assert busy["streams"] == 16 and busy["chunks_on_time"] == 0.9
    s = capacity_summary(rows, busy)
    assert s["backends"]["engine"] == {"sustainable_calls": 8, "levels_run": [1, 8, 12], "ttfa_ms_p90": 240.0,
                                       "cpu_s_per_audio_s": 0.12}
    assert s["backends"]["naive"]["sustainable_calls"] == 2
    assert s["calls_over_always_busy_x_realtime"] == 0.5
    assert s["engine_over_naive_calls"] == 4.0
    assert abs(s["paced_over_always_busy_cpu"] - 1.2) < 1e-9
    text = format_summary(s, {"cpu_model": "X", "cores": 2, "flags": ["avx2"], "commit": "abc1234"})
    assert "| 0.50 | ≥ 0.75 |" in text and "| 4.0 | ≥ 4 |" in text and "commit abc1234" in text
    # no naive run, no always-busy run, nothing sustainable: the ratios are missing, not zero or infinite
    s = capacity_summary([_row(1, 0.5, 0.5)], None)
    assert s["backends"]["engine"]["sustainable_calls"] == 0 and s["backends"]["engine"]["ttfa_ms_p90"] is None
    assert s["calls_over_always_busy_x_realtime"] is None and s["engine_over_naive_calls"] is None
    assert "| - |" in format_summary(s, host_info())


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
