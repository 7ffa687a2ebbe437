"""`voxpool bench` against a REALTIME-paced server: the median turn plays in real time (RTF 1 ± 0.5)."""

import asyncio
import json

from clients.bench import bench_main


async def test_bench_realtime_turns_play_in_real_time(tiny_server, tmp_path, capsys):
    out = tmp_path / "c.json"
    argv = ["--targets", f"127.0.0.1:{tiny_server.port}", "--concurrency", "2", "--duration-s", "2",
            "--text-class", "short", "--stream-text", "--delta-interval-ms", "5", "--warmup", "0",
            "--no-frames", "--out", str(out)]
    rc = await asyncio.to_thread(bench_main, argv)
    assert rc == 0, capsys.readouterr()
    run = json.loads(out.read_text())["runs"][0]
    assert all(t["status"] == "OK" for t in run["turns"])
    assert abs(run["summary"]["rtf"]["p50"] - 1.0) <= 0.5, run["summary"]["rtf"]
