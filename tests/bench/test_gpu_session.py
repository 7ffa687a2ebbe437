"""bench/gpu_session.py end to end in its smoke mode (CPU, tiny random voice, levels 2 and 4, a server child
process for the gRPC part): the run a GPU session makes first must not fail for its own reasons."""

from __future__ import annotations

import json

from bench import gpu_session
from engine.config import EngineConfig

LOAD_KEYS = {"level", "errors", "chunks_on_time", "ttfa_ms_p50", "ttfa_ms_p90", "x_realtime", "wall_s",
             "cpu_s_per_wall_s"}


def test_smoke_run_fills_every_part_and_the_json(tmp_path, capsys) -> None:
    out = tmp_path / "gpu-check.json"
    rc = gpu_session.main(["--smoke", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    report = json.loads(out.read_text(encoding="utf-8"))
    assert {"command", "date", "facts", "levels", "duration_s", "busy_requests", "limits_raised", "engine_config",
            "seconds", *gpu_session.PARTS} <= set(report)
    assert report["levels"] == [2, 4] and report["facts"]["device"].startswith("cpu")
    exact = report["exactness"]
    assert exact["ok"] and exact["graphs"]["dtype"] == "float64" and exact["vocoder"]
    assert {"vocoder", "graphs", "graphs_fp32", "decode_timing"} <= set(exact)
    for part in ("always_busy", "paced_inprocess", "paced_grpc"):
        rows = report[part]
        assert [r["level"] for r in rows] == [2, 4], part
        for r in rows:
            assert LOAD_KEYS <= set(r), (part, LOAD_KEYS - set(r))
            assert r["errors"] == 0 and r["x_realtime"] > 0 and r["cpu_s_per_wall_s"] > 0, (part, r)
            assert r["ttfa_ms_p50"] > 0 and 0 <= r["chunks_on_time"] <= 1
    for r in report["paced_inprocess"] + report["paced_grpc"]:
        assert r["turns"] >= 1 and r["turns_with_fill"] is not None
    assert report["paced_grpc"][0]["server_env"]["VOXPOOL__ENGINE__DEVICE"] == "cpu"
    for part in gpu_session.PARTS:  # one table per part, printed
        assert f"== {part} (" in printed


def test_levels_above_the_shipped_slots_raise_them_and_say_so() -> None:
    shipped = EngineConfig().max_slots
    config, note = gpu_session.engine_config("cpu", "tiny", 4 * shipped, threads=1)
    assert config.max_slots == 4 * shipped and note and str(4 * shipped) in note
    config, note = gpu_session.engine_config("cpu", "tiny", 2, threads=1)
    assert config.max_slots == shipped and note is None
