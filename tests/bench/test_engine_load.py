"""bench.engine_load: metric definitions and a tiny end-to-end run of all three backends."""

from __future__ import annotations

import pytest

from bench.engine_load import BACKENDS, RequestRecord, benchmark, format_table, load_texts, percentile, summarize
from engine.config import EngineConfig
from tests.engine.tiny_voice import make_tiny_voice


def test_on_time_rule_and_summary() -> None:
    rec = RequestRecord("x", submitted_s=0.0, chunk_times_s=[0.1, 0.25, 0.45, 0.9],
                        chunk_durations_s=[0.2, 0.2, 0.3, 0.3])
    # chunk i on time iff t_i <= t_1 + sum of earlier durations: 0.25<=0.3, 0.45<=0.5, 0.9>0.8
    assert rec.on_time() == [True, True, True, False]
    assert rec.ttfa_s == pytest.approx(0.1) and rec.rtf == pytest.approx(0.9 / 1.0)
    s = summarize([rec, RequestRecord("y", 0.0, error="EngineOverloaded: full")], wall_s=2.0)
    assert s["errors"] == 1 and s["chunks_on_time"] == pytest.approx(0.75) and s["requests_all_on_time"] == 0.0
    assert s["x_realtime"] == pytest.approx(0.5) and s["ttfa_ms_p50"] == pytest.approx(100.0)
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)


def test_texts_file_parses() -> None:
    rows = load_texts(classes=["short"])
    assert len(rows) >= 5 and all(tid.startswith("s") for tid, _ in rows)


async def test_tiny_run_of_every_backend() -> None:
    voice = make_tiny_voice()
    config = EngineConfig(voices=("tiny",), max_slots=4, first_chunk_frames=8, chunk_frames=12)
    items = [("a", [1, 2, 3, 4]), ("b", [5, 6, 7, 8, 9, 10]), ("c", [2, 3])]
    rows = await benchmark(config, {"tiny": voice}, "tiny", items, [1, 3], 2, BACKENDS)
    assert [(r["backend"], r["concurrency"]) for r in rows] == [(b, n) for b in BACKENDS for n in (1, 3)]
    for r in rows:
        assert r["errors"] == 0 and r["requests"] == r["concurrency"] * 2
        assert r["ttfa_ms_p50"] > 0 and r["audio_s"] > 0
        assert r["cpu_s"] > 0 and r["cpu_s_per_audio_s"] == pytest.approx(r["cpu_s"] / r["audio_s"])
    engine_rows = [r for r in rows if r["backend"] == "engine"]
    assert engine_rows[1]["engine"]["decode_batch_max"] >= 2
    for e in (r["engine"] for r in engine_rows):  # where the engine thread's time went: inside its iterations
        assert e["decode_row_steps"] >= e["decode_calls"] > 0 and e["vocode_frames"] >= e["vocode_calls"] > 0
        modules_s = e["encode_s"] + e["decode_s"] + e["vocode_s"]
        assert 0 < modules_s <= e["iterations"] * e["iteration_ms_mean"] / 1000.0 + 1e-6
    assert "TTFA p50" in format_table(rows) and "CPU s/aud s" in format_table(rows)


def test_an_engine_override_of_the_weights_loads_those_weights(monkeypatch) -> None:
    """`--engine '{"weights": ...}'` must reach the voice loaded, not only the config (an A/B of int8 and fp32
    through the override once compared int8 with int8)."""
    import models.voices.bundle as bundle
    from bench import engine_load as bench

    class Loaded(Exception):
        pass

    seen = {}

    def fake_load_voice(name, device="cpu", weights=None, **kw):
        seen.update(name=name, device=device, weights=weights)
        raise Loaded

    monkeypatch.setattr(bundle, "load_voice", fake_load_voice)
    with pytest.raises(Loaded):
        bench.main(["--voice", "baker-zh", "--engine", '{"weights": "fp32"}', "--concurrency", "1"])
    assert seen == {"name": "baker-zh", "device": "cpu", "weights": "fp32"}
    seen.clear()  # a device override picks that device's default weights (int8 is refused on CUDA)
    with pytest.raises(Loaded):
        bench.main(["--voice", "baker-zh", "--engine", '{"device": "cuda", "cuda_graphs": false}', "--concurrency", "1"])
    assert seen == {"name": "baker-zh", "device": "cuda", "weights": "fp32"}


async def test_count_ops_counts_what_the_engine_thread_dispatches_while_serving() -> None:
    """The counter sits on the engine thread (dispatch modes are per thread) and skips the warm-up: operations per
    audio second and per iteration are finite and positive, more streams dispatch more in all; off, nothing is
    counted."""
    from bench.engine_load import format_ops_table

    voice = make_tiny_voice()
    config = EngineConfig(voices=("tiny",), max_slots=4, first_chunk_frames=8, chunk_frames=12)
    items = [("a", [1, 2, 3, 4]), ("b", [5, 6, 7, 8, 9, 10]), ("c", [2, 3])]
    rows = await benchmark(config, {"tiny": voice}, "tiny", items, [1, 3], 2, ["engine"], count_ops=True)
    one, three = rows
    for r in rows:
        ops = r["ops"]
        assert ops["total"] > 0 and 0 < ops["per_audio_s"] < float("inf") and ops["per_iteration"] > 0
        assert ops["total"] == pytest.approx(ops["per_audio_s"] * r["audio_s"])
        assert ops["top"] and all(n > 0 for _, n in ops["top"])
        assert r["engine"]["iteration_ms_mean"] > 0
    assert three["ops"]["total"] > one["ops"]["total"]  # three streams, twice the requests each: more work in all
    assert "ops/audio s" in format_ops_table(rows)
    plain = await benchmark(config, {"tiny": voice}, "tiny", items, [1], 1, ["engine"])
    assert "ops" not in plain[0]


def test_the_op_counter_does_not_count_the_main_thread() -> None:
    import threading

    import torch

    from bench.op_count import OpCounter

    counter = OpCounter()
    seen = []

    def engine_thread() -> None:
        counter.__enter__()
        try:
            torch.ones(3).add(1)
            seen.append(counter.total)
        finally:
            counter.__exit__(None, None, None)

    t = threading.Thread(target=engine_thread)
    t.start()
    t.join()
    torch.ones(3).mul(2)  # on this thread: not counted
    assert seen[0] >= 2 and counter.total == seen[0]
