"""Telemetry overhead on the engine benchmark: the same closed-loop load with tracing + metrics + logs off and on.

    python -m bench.telemetry_overhead --voice baker-zh --weights fp32 --concurrency 4 --rounds 4

"off" is bench.engine_load's load as is. "on" adds what a server with tracing and metrics does: the engine's
iteration observer (histograms), one CallTelemetry per request (server span with a turn and a segment child
span through the real SDK and a batch processor, per-chunk lateness histogram, TTFA/RTF histograms with
exemplars, the end-of-call JSON log line), and a /metrics scrape every second. Runs alternate off/on in
each round (order flipped every round) so drift on a shared machine hits both; prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.engine_load import (
    TEXTS,
    RequestRecord,
    load_texts,
    machine_info,
    make_engine,
    summarize,
)
from engine.config import EngineConfig
from engine.request import AudioChunk, SynthesisRequest
from service.config import TelemetryConfig
from service.telemetry.calls import CallTelemetry
from service.telemetry.core import Telemetry
from service.telemetry.logs import make_handler


def _drop_provider() -> Any:
    """An SDK tracer provider whose batch processor hands spans to an exporter that drops them."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    return provider


_SETTINGS = SimpleNamespace(voice=SimpleNamespace(name="bench"), encoding="PCMU", sample_rate_hz=8000, frame_ms=20,
                            pacing="ASAP")


async def _worker(engine: Any, tel: Telemetry | None, index: int, items: Sequence[tuple[str, list[int]]], count: int,
                  tag: str, voice: str, records: list[RequestRecord]) -> None:
    """bench.engine_load's stream worker, plus (when `tel`) the per-call telemetry a server would record."""
    for k in range(count):
        text_id, ids = items[(index + k * 7) % len(items)]
        rec = RequestRecord(text_id=text_id, submitted_s=time.perf_counter())
        records.append(rec)
        call = seg = turn = None
        if tel is not None:
            call = CallTelemetry("Converse", tel.tracing.tracer, tel.metrics, {}, "ipv4:127.0.0.1:1")
            call.bind(f"{tag}-{index}-{k}")
            call.configured(_SETTINGS)
            turn = SimpleNamespace(turn_id="t", trigger_s=time.monotonic(), first_audio_s=None, audio_frames=0,
                                   silence_frames=0, underruns=0, chunks=0, late_chunks=0, dropped_frames=0,
                                   text="x" * len(ids), released_pos=0, active=True)
            seg = call.segment_started(turn, SimpleNamespace(text=turn.text))
            seg.frontend_done(len(ids))
        try:
            stream = engine.submit(SynthesisRequest(f"{tag}-s{index}-r{k}", ids, voice=voice, seed=index * 1000 + k))
            if seg is not None:
                seg.submitted(f"{tag}-s{index}-r{k}")
            first = None
            received = 0.0
            async for event in stream:
                if isinstance(event, AudioChunk):
                    now = time.perf_counter()
                    rec.chunk_times_s.append(now)
                    rec.chunk_durations_s.append(event.duration_s)
                    if seg is not None:
                        first = now if first is None else first
                        seg.chunk(now - first - received, event.duration_s)
                        received += event.duration_s
                        turn.chunks += 1
                        if turn.first_audio_s is None:
                            turn.first_audio_s = time.monotonic()
                elif seg is not None:
                    seg.finished(event)
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            rec.error = f"{type(exc).__name__}: {exc}"
        if call is not None:
            turn.audio_frames = int(received * 1000) // 20
            seg.end()
            turn.active = False
            call.turn_done(turn)
            call.end("OK" if rec.error is None else "INTERNAL")


def _scraper(port: int, stop: threading.Event, period_s: float, done: list[int]) -> None:
    while not stop.wait(period_s):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            resp.read()
        done.append(1)


async def run_once(mode: str, config: EngineConfig, voices: dict, voice: str, items: Sequence[tuple[str, list[int]]],
                   concurrency: int, per_stream: int, tag: str, scrape_s: float) -> dict[str, Any]:
    """One closed-loop run with telemetry `off` or `on`; the summary row of bench.engine_load plus the mode."""
    engine = make_engine("engine", config, voices, None)
    tel = stop = scraper = None
    scrapes: list[int] = []
    if mode == "on":
        tel = Telemetry(TelemetryConfig(metrics_port=1), tracer_provider=_drop_provider(), environ={})
        tel.bind_server(lambda: concurrency, max(concurrency, 1))
        tel.attach_engine(engine)
        port = tel.metrics.serve("127.0.0.1", 0)
        stop = threading.Event()
        scraper = threading.Thread(target=_scraper, args=(port, stop, scrape_s, scrapes), daemon=True)
        scraper.start()
    await engine.start()
    records: list[RequestRecord] = []
    before = engine.counters()
    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(_worker(engine, tel, i, items, per_stream, tag, voice, records) for i in range(concurrency)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    after = engine.counters()
    await engine.stop()
    if tel is not None:
        stop.set()
        scraper.join()
        tel.metrics.stop()
        tel.tracing.shutdown()
    row = {"mode": mode, "concurrency": concurrency, **summarize(records, wall)}
    row.update(cpu_s=cpu, iterations=after.iterations - before.iterations, engine_busy_s=after.busy_s - before.busy_s,
               calls=len(records), scrapes=len(scrapes))
    row["cpu_s_per_audio_s"] = cpu / row["audio_s"] if row["audio_s"] else None
    return row


def _one_call(tel: Telemetry, i: int, chunks: int) -> None:
    call = CallTelemetry("Converse", tel.tracing.tracer, tel.metrics, {}, "ipv4:127.0.0.1:1")
    call.bind(str(i))
    call.configured(_SETTINGS)
    turn = SimpleNamespace(turn_id="t", trigger_s=time.monotonic(), first_audio_s=time.monotonic(), audio_frames=50,
                           silence_frames=0, underruns=0, chunks=chunks, late_chunks=0, dropped_frames=0, text="x",
                           released_pos=0, active=True)
    seg = call.segment_started(turn, SimpleNamespace(text="x"))
    seg.frontend_done(10)
    seg.submitted("r")
    for c in range(chunks):
        seg.chunk(0.002 if c % 10 == 9 else 0.0, 0.05)
    seg.end("completed")
    call.turn_done(turn)
    call.end("OK")


def micro_costs(n: int = 2000) -> dict[str, float]:
    """µs per telemetry operation in isolation: on_iteration, a call's fixed part, a chunk, a /metrics scrape."""
    tel = Telemetry(TelemetryConfig(metrics_port=1), tracer_provider=_drop_provider(), environ={})
    stats = SimpleNamespace(duration_s=0.01, pool_active=4, pool_waiting=0, encode_batch=1, encode_s=0.001,
                            decode_batch=4, decode_s=0.005, vocode_batch=2, vocode_s=0.004)
    observer = tel.metrics.engine_observer
    t0 = time.perf_counter()
    for _ in range(n):
        observer.on_iteration(stats)
    iteration_us = (time.perf_counter() - t0) / n * 1e6
    m = n // 4
    t0 = time.perf_counter()
    for i in range(m):
        _one_call(tel, i, 0)
    call_us = (time.perf_counter() - t0) / m * 1e6
    call = CallTelemetry("Converse", tel.tracing.tracer, tel.metrics, {}, "ipv4:127.0.0.1:1")
    turn = SimpleNamespace(turn_id="t", trigger_s=time.monotonic(), text="x")
    seg = call.segment_started(turn, SimpleNamespace(text="x"))
    k = n * 10
    t0 = time.perf_counter()
    for c in range(k):
        seg.chunk(0.002 if c % 10 == 9 else 0.0, 0.05)  # every tenth chunk late: observed with an exemplar
    chunk_us = (time.perf_counter() - t0) / k * 1e6
    t0 = time.perf_counter()
    for _ in range(50):
        tel.metrics.exposition(openmetrics=True)
    scrape_us = (time.perf_counter() - t0) / 50 * 1e6
    tel.tracing.shutdown()
    return {"on_iteration_us": iteration_us, "call_fixed_us": call_us, "chunk_us": chunk_us, "scrape_us": scrape_us}


def accounted_overhead_pct(row: dict[str, Any], micro: dict[str, float]) -> dict[str, float]:
    """Telemetry CPU time of an 'on' run from its operation counts × the micro costs, as % of its wall time and
    (engine-thread part) of the engine's busy time."""
    engine_s = row["iterations"] * micro["on_iteration_us"] * 1e-6
    loop_s = (row["calls"] * micro["call_fixed_us"] + row["chunks"] * micro["chunk_us"]
              + row["scrapes"] * micro["scrape_us"]) * 1e-6
    return {"engine_thread_pct_of_busy": 100.0 * engine_s / row["engine_busy_s"] if row["engine_busy_s"] else 0.0,
            "total_pct_of_wall": 100.0 * (engine_s + loop_s) / row["wall_s"]}


def _spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values),
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    p = argparse.ArgumentParser(prog="python -m bench.telemetry_overhead", description=__doc__.splitlines()[0])
    p.add_argument("--voice", default="baker-zh")
    p.add_argument("--weights", default="fp32", help="fp32 | int8 | bf16")
    p.add_argument("--device", default="cpu")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--requests-per-stream", type=int, default=2)
    p.add_argument("--classes", default="short,medium")
    p.add_argument("--texts", type=Path, default=TEXTS)
    p.add_argument("--rounds", type=int, default=4, help="off/on pairs")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--scrape-s", type=float, default=1.0, help="seconds between /metrics scrapes in 'on' runs")
    p.add_argument("--out", type=Path, default=Path("bench-results/telemetry_overhead.json"))
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # the end-of-call line is written (JSON, to memory) as a server with INFO logs would
    calls_log = logging.getLogger("service.telemetry.calls")
    calls_log.setLevel(logging.INFO)
    calls_log.propagate = False
    calls_log.addHandler(make_handler(True, io.StringIO()))

    from engine.threads import serial_torch
    from models.frontend import MandarinFrontend
    from models.voices.bundle import load_voice

    serial_torch()  # the engine thread alone runs parallel torch work (engine/threads.py)
    config = EngineConfig.from_dict({"device": args.device, "weights": args.weights, "voices": [args.voice],
                                     "max_slots": max(8, args.concurrency), "num_threads": args.threads})
    frontend = MandarinFrontend()
    items = [(tid, frontend.to_ids(text).ids) for tid, text in load_texts(args.texts, args.classes.split(","))]
    voices = {args.voice: load_voice(args.voice, device=args.device, weights=args.weights)}
    rows = []
    print(f"{'round':>5} {'mode':>4} {'xRT':>7} {'TTFA p50 ms':>12} {'chunks':>7} {'CPU s/audio s':>14}", flush=True)
    for r in range(args.rounds):
        for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
            row = asyncio.run(run_once(mode, config, voices, args.voice, items, args.concurrency,
                                       args.requests_per_stream, f"r{r}{mode}", args.scrape_s))
            row["round"] = r
            rows.append(row)
            print(f"{r:>5} {mode:>4} {row['x_realtime']:>7.3f} {row['ttfa_ms_p50']:>12.1f} {row['chunks']:>7} "
                  f"{row['cpu_s_per_audio_s']:>14.3f}", flush=True)
    off = [x["x_realtime"] for x in rows if x["mode"] == "off"]
    on = [x["x_realtime"] for x in rows if x["mode"] == "on"]
    paired = [(b["x_realtime"] / a["x_realtime"] - 1.0) * 100.0
              for a, b in zip([x for x in rows if x["mode"] == "off"], [x for x in rows if x["mode"] == "on"])]
    micro = micro_costs()
    accounted = [accounted_overhead_pct(x, micro) for x in rows if x["mode"] == "on"]
    cpu_off = [x["cpu_s_per_audio_s"] for x in rows if x["mode"] == "off"]
    cpu_on = [x["cpu_s_per_audio_s"] for x in rows if x["mode"] == "on"]
    result = {"accounted_overhead": accounted,
              "cpu_s_per_audio_s_off": _spread(cpu_off), "cpu_s_per_audio_s_on": _spread(cpu_on),
        "throughput_xrt_off": _spread(off), "throughput_xrt_on": _spread(on),
        "throughput_change_pct_mean": (statistics.fmean(on) / statistics.fmean(off) - 1.0) * 100.0,
        "throughput_change_pct_per_round": paired, "micro_us": micro,
    }
    print(f"\nxRT off {result['throughput_xrt_off']['mean']:.3f} (min {min(off):.3f}, max {max(off):.3f}); "
          f"on {result['throughput_xrt_on']['mean']:.3f} (min {min(on):.3f}, max {max(on):.3f}); "
          f"change {result['throughput_change_pct_mean']:+.2f} % (per round: "
          + ", ".join(f"{x:+.1f}" for x in paired) + ")")
    print(f"CPU s per audio s: off {statistics.fmean(cpu_off):.3f} (min {min(cpu_off):.3f}, max {max(cpu_off):.3f}); "
          f"on {statistics.fmean(cpu_on):.3f} (min {min(cpu_on):.3f}, max {max(cpu_on):.3f})")
    print(f"micro: on_iteration {micro['on_iteration_us']:.1f} µs; call (span tree, log line) {micro['call_fixed_us']:.0f} µs;"
          f" chunk {micro['chunk_us']:.2f} µs; scrape {micro['scrape_us']:.0f} µs")
    print("accounted telemetry time per 'on' run: engine thread "
          + ", ".join(f"{a['engine_thread_pct_of_busy']:.3f}" for a in accounted) + " % of busy; all "
          + ", ".join(f"{a['total_pct_of_wall']:.3f}" for a in accounted) + " % of wall")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {"command": " ".join(["python -m bench.telemetry_overhead", *(argv if argv is not None else sys.argv[1:])]),
              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine_info(),
              "engine_config": config.to_dict(), "runs": rows, "summary": result}
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
