"""The load generator (`python -m bench.grpc_load`) against a real server on loopback (tiny voice)."""

import asyncio
import json

from bench.grpc_load import bench_main
from tests.service.conftest import tiny_server  # noqa: F401  (a fixture)


async def test_bench_two_rates_json_and_plots(tiny_server, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "r.json"
    argv = ["--targets", f"a=127.0.0.1:{tiny_server.port},b=127.0.0.1:{tiny_server.port}",
            "--rates", "1,2", "--duration-s", "2", "--pacing", "ASAP", "--text-class", "short",
            "--warmup", "1", "--out", str(out), "--plot", str(tmp_path / "plots")]
    rc = await asyncio.to_thread(bench_main, argv)
    printed = capsys.readouterr().out
    assert rc == 0, printed
    report = json.loads(out.read_text())
    assert report["schema"] == "voxpool-bench/1"
    runs = report["runs"]
    assert [(r["target"], r["rate_per_s"]) for r in runs] == [("a", 1.0), ("a", 2.0), ("b", 1.0), ("b", 2.0)]
    # the same seeded schedule and texts for both targets
    assert [t["text_id"] for t in runs[0]["turns"]] == [t["text_id"] for t in runs[2]["turns"]]
    assert [t["scheduled_s"] for t in runs[1]["turns"]] == [t["scheduled_s"] for t in runs[3]["turns"]]
    for r in runs:
        s = r["summary"]
        assert s["turns"] >= 1 and s["ok"] == s["turns"] and s["errors"] == {}
        assert s["ttfa_ms"]["p50"] > 0 and s["audio_s"] > 0
        assert set(s["stall_s"]) == {"0", "100", "200"}
        for t in r["turns"]:
            assert t["status"] == "OK" and t["chunks"] > 0 and t["frames_ms"]
            # the server's count agrees with the frames received (within one frame: see the lead's report)
            assert abs(t["server"]["audio_ms"] - t["audio_s"] * 1e3) <= 20.5
    assert len(report["comparison"]) == 2 and report["comparison"][0]["baseline"] == "a"
    assert "| a | 1/s |" in printed and "Side by side" in printed
    assert (tmp_path / "plots" / "ttfa_vs_rate.png").stat().st_size > 1000
    assert (tmp_path / "plots" / "on_time_vs_rate.png").exists()


async def closed_loop_bench(port: int, out, duration_s: float) -> dict:
    """`python -m bench.grpc_load`: 2 closed-loop workers streaming short texts for `duration_s`; the run's JSON (None on rc ≠ 0)."""
    argv = ["--targets", f"127.0.0.1:{port}", "--concurrency", "2", "--duration-s", str(duration_s),
            "--text-class", "short", "--stream-text", "--delta-interval-ms", "5", "--warmup", "0",
            "--no-frames", "--out", str(out)]
    rc = await asyncio.to_thread(bench_main, argv)
    return json.loads(out.read_text())["runs"][0] if rc == 0 else None


async def test_bench_closed_loop_streamed_text(tiny_server, tmp_path, capsys):  # noqa: F811
    run = await closed_loop_bench(tiny_server.port, tmp_path / "c.json", 1)
    assert run is not None, capsys.readouterr()
    assert run["mode"] == "closed" and run["concurrency"] == 2
    assert {t["worker"] for t in run["turns"]} == {0, 1}
    assert all(t["status"] == "OK" and t["deltas"] > 1 and "frames_ms" not in t for t in run["turns"])
    assert run["summary"]["rtf"]["p50"] > 0
