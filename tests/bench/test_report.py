"""`python -m bench.grpc_load` without a server: argument handling, the side-by-side comparison, tables, strict JSON."""

import json
import math

import pytest

from bench.grpc_load import BenchError, bench_main, build_parser, parse_targets, settings_from_args
from bench.plot import plot_report
from bench.report import comparison, comparison_table, json_safe, render


def test_parse_targets():
    assert parse_targets("engine=localhost:50051,naive=localhost:50052") == {
        "engine": "localhost:50051", "naive": "localhost:50052"}
    assert parse_targets("localhost:50051") == {"server": "localhost:50051"}
    with pytest.raises(BenchError, match="twice"):
        parse_targets("a=h:1,a=h:2")
    with pytest.raises(BenchError):
        parse_targets(" , ")


def test_settings_burst_gap_follows_pacing():
    rt = settings_from_args(build_parser().parse_args(["--frame-ms", "20"]))
    assert rt.burst_gap_s == pytest.approx(0.005) and rt.config.pacing.mode == 1
    asap = settings_from_args(build_parser().parse_args(["--pacing", "asap"]))
    assert asap.burst_gap_s is None and asap.prebuffers_ms == (0, 100, 200)
    st = settings_from_args(build_parser().parse_args(["--stream-text", "--delta-chars", "1:3", "--encoding", "l16"]))
    assert st.delta_chars == (1, 3) and st.config.audio.encoding == 3 and st.config.seed == 42


@pytest.mark.parametrize("argv, needle", [
    (["--rates", "1,-2"], "> 0"),
    (["--concurrency", "1.5"], "whole numbers"),
    (["--goodput", "4:2"], "LO < HI"),
    (["--text-class", "huge", "--rates", "1"], "unknown text class"),
])
def test_bad_arguments_exit_2_before_any_connection(argv, needle, capsys):
    assert bench_main(argv + ["--targets", "127.0.0.1:1"]) == 2
    assert needle in capsys.readouterr().err


def _summary(p50, p90, on_time):
    nan = math.nan
    return {"turns": 10, "ok": 10, "errors": {}, "ttfa_ms": {"p50": p50, "p90": p90, "p99": p90},
            "lcl_ms": {"p50": 900.0}, "rtf": {"p50": 0.5}, "chunk_on_time_fraction": on_time,
            "all_on_time_fraction": on_time, "schedule_lag_ms": {"p99": 1.0},
            "stall_s": {"0": {"mean": 0.0, "turns_stalled_fraction": nan}}}


def _report():
    runs = []
    for target, scale, on in (("engine", 1.0, 1.0), ("naive", 3.0, 0.8)):
        for rate in (1.0, 2.0):
            runs.append({"target": target, "mode": "open", "rate_per_s": rate,
                         "summary": _summary(100 * rate * scale, 150 * rate * scale, on)})
    return {"targets": {"engine": "h:1", "naive": "h:2"}, "runs": runs,
            "settings": {"pacing": "ASAP", "encoding": "PCMU", "sample_rate_hz": 8000, "frame_ms": 20,
                         "text_class": "mixed", "stream_text": False, "arrivals": "poisson", "seed": 42,
                         "duration_s": 10.0, "prebuffers_ms": [0], "ttfa_target_ms": 300, "on_time_target": 0.99},
            "goodput": {"engine": {"goodput_per_s": 6.0, "bracket": "inside", "probes": [[1, True], [8, False]]},
                        "naive": {"goodput_per_s": 1.5, "bracket": "inside", "probes": [[1, True], [8, False]]}}}


def test_comparison_ratios_against_the_first_target():
    rep = _report()
    rows = comparison(rep["runs"], ["engine", "naive"])
    assert [(r["mode"], r["load"]) for r in rows] == [("open", 1.0), ("open", 2.0)]
    naive = rows[1]["targets"]["naive"]
    assert naive["ttfa_p50_ratio"] == pytest.approx(3.0) and naive["ttfa_p90_ratio"] == pytest.approx(3.0)
    assert rows[0]["targets"]["engine"]["ttfa_p50_ratio"] == pytest.approx(1.0)
    table = comparison_table(rows, ["engine", "naive"])
    assert "600 / 900 ms (×3.00 / ×3.00) / 80.0%" in table
    rep["comparison"] = rows
    text = render(rep)
    assert "| engine | 2/s | 10 | 10 | 0 | 200 | 300 |" in text
    assert "| naive | 1.5 | inside | 0.25 |" in text


def test_json_safe_is_strict_json():
    out = json.dumps(json_safe({"a": math.nan, "b": (1.0, math.inf), "c": {"d": 2}}), allow_nan=False)
    assert json.loads(out) == {"a": None, "b": [1.0, None], "c": {"d": 2}}


def test_plots_from_a_report(tmp_path):
    paths = plot_report(json_safe(_report()), tmp_path)
    assert sorted(p.name for p in paths) == ["on_time_vs_rate.png", "ttfa_vs_rate.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
