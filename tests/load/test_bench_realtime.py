"""`python -m bench.grpc_load` against a REALTIME-paced server: the median turn plays in real time (RTF 1 ± 0.5)."""

from tests.bench.test_grpc_load import closed_loop_bench


async def test_bench_realtime_turns_play_in_real_time(tiny_server, tmp_path, capsys):
    run = await closed_loop_bench(tiny_server.port, tmp_path / "c.json", 2)
    assert run is not None, capsys.readouterr()
    assert all(t["status"] == "OK" for t in run["turns"])
    assert abs(run["summary"]["rtf"]["p50"] - 1.0) <= 0.5, run["summary"]["rtf"]
