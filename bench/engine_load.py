"""In-process engine benchmark: engine vs naive vs non-incremental, closed-loop concurrency, TTFA / RTF / on-time.

    python -m bench.engine_load --voice baker-zh --concurrency 1,4,8,16,32 --out bench-results/engine.json

Each of N concurrent streams sends call-center sentences one after another (the next when the previous one
finished) through the backend's OutputStream API, timing every chunk as the consumer receives it:

* TTFA: submit → first chunk received.  RTF: (last chunk received − submit) / audio duration.
* Chunk i of a request is on time iff t_i ≤ t_1 + Σ_{k<i} duration_k (playback starts with the first chunk).
* ×RT: audio seconds produced per wall second over the whole run.

Prints a table and writes JSON (per-run summaries, the engine's per-iteration batch sizes, machine info).

`--pacing realtime` reads the audio at playback speed instead (bench/paced.py): N calls for `--duration-s`,
each speaking turns of `--text-class` back to back, released frame by frame as the gRPC edge releases them, and
summarized with the gRPC bench's own metric code, so the figure stands beside
`python -m bench.grpc_load --pacing REALTIME --concurrency N --text-class mixed --duration-s D` at the same N:

    python -m bench.engine_load --pacing realtime --backends engine --concurrency 16,24 --duration-s 30
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import logging
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.request import AudioChunk, SynthesisRequest
from engine.telemetry import RecordingObserver

logger = logging.getLogger(__name__)

TEXTS = Path(__file__).resolve().parents[1] / "bench" / "texts" / "callcenter_zh.tsv"  # the repo's call-center texts
BACKENDS = ("engine", "naive", "non_incremental")


@dataclass
class RequestRecord:
    """What one request looked like from the consumer's side (perf_counter seconds)."""

    text_id: str
    submitted_s: float
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_durations_s: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def audio_s(self) -> float:
        return sum(self.chunk_durations_s)

    @property
    def ttfa_s(self) -> float | None:
        return self.chunk_times_s[0] - self.submitted_s if self.chunk_times_s else None

    @property
    def rtf(self) -> float | None:
        if not self.chunk_times_s or self.audio_s <= 0:
            return None
        return (self.chunk_times_s[-1] - self.submitted_s) / self.audio_s

    def on_time(self) -> list[bool]:
        """Per chunk: arrived no later than the playback of the earlier chunks ends."""
        if not self.chunk_times_s:
            return []
        t1 = self.chunk_times_s[0]
        out, played = [], 0.0
        for t, d in zip(self.chunk_times_s, self.chunk_durations_s):
            out.append(t <= t1 + played + 1e-9)
            played += d
        return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def load_texts(path: Path = TEXTS, classes: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """(id, text) rows of the call-center TSV, optionally only some length classes."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t"):
            if not row or row[0].startswith("#") or len(row) < 3:
                continue
            if classes and row[1] not in classes:
                continue
            rows.append((row[0], row[2]))
    return rows


async def _stream_worker(
    engine: AsyncEngine, stream_index: int, items: Sequence[tuple[str, list[int]]], count: int, run_tag: str,
    voice: str, records: list[RequestRecord],
) -> None:
    for k in range(count):
        text_id, ids = items[(stream_index + k * 7) % len(items)]
        rid = f"{run_tag}-s{stream_index}-r{k}"
        rec = RequestRecord(text_id=text_id, submitted_s=time.perf_counter())
        records.append(rec)
        try:
            stream = engine.submit(SynthesisRequest(rid, ids, voice=voice, seed=stream_index * 1000 + k))
            async for event in stream:
                if isinstance(event, AudioChunk):
                    rec.chunk_times_s.append(time.perf_counter())
                    rec.chunk_durations_s.append(event.duration_s)
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            rec.error = f"{type(exc).__name__}: {exc}"


async def run_load(
    engine: AsyncEngine, items: Sequence[tuple[str, list[int]]], concurrency: int, per_stream: int,
    voice: str = "", run_tag: str = "run",
) -> tuple[list[RequestRecord], float]:
    """Closed loop: `concurrency` streams × `per_stream` sequential requests; returns records and wall seconds."""
    records: list[RequestRecord] = []
    t0 = time.perf_counter()
    await asyncio.gather(
        *(_stream_worker(engine, i, items, per_stream, run_tag, voice, records) for i in range(concurrency))
    )
    return records, time.perf_counter() - t0


def summarize(records: Sequence[RequestRecord], wall_s: float) -> dict[str, Any]:
    """TTFA p50/p90, RTF p50/p90, on-time chunk fraction, fully on-time requests, ×RT."""
    ok = [r for r in records if r.error is None and r.chunk_times_s]
    ttfa = [r.ttfa_s * 1000.0 for r in ok]
    rtf = [r.rtf for r in ok if r.rtf is not None]
    flags = [r.on_time() for r in ok]
    chunks = sum(len(f) for f in flags)
    audio = sum(r.audio_s for r in ok)
    return {
        "requests": len(records),
        "errors": len(records) - len(ok),
        "error_examples": sorted({r.error for r in records if r.error})[:3],
        "ttfa_ms_p50": percentile(ttfa, 50),
        "ttfa_ms_p90": percentile(ttfa, 90),
        "ttfa_ms_max": max(ttfa) if ttfa else None,
        "rtf_p50": percentile(rtf, 50),
        "rtf_p90": percentile(rtf, 90),
        "chunks": chunks,
        "chunks_on_time": (sum(sum(f) for f in flags) / chunks) if chunks else None,
        "requests_all_on_time": (sum(all(f) for f in flags) / len(flags)) if flags else None,
        "audio_s": audio,
        "wall_s": wall_s,
        "x_realtime": audio / wall_s if wall_s > 0 else None,
    }


def iteration_summary(observer: RecordingObserver) -> dict[str, Any]:
    """Per-iteration telemetry of an engine run: iteration time and batch sizes."""
    its = observer.iterations
    if not its:
        return {}
    dec = [s.decode_batch for s in its if s.decode_batch]
    voc = [s.vocode_batch for s in its if s.vocode_batch]
    return {
        "iterations": len(its),
        "iteration_ms_mean": statistics.fmean(s.duration_s * 1000 for s in its),
        "iteration_ms_p50": percentile([s.duration_s * 1000 for s in its], 50),
        "iteration_ms_p90": percentile([s.duration_s * 1000 for s in its], 90),
        "iteration_ms_p99": percentile([s.duration_s * 1000 for s in its], 99),
        "decode_batch_mean": statistics.fmean(dec) if dec else 0.0,
        "decode_batch_max": max(dec) if dec else 0,
        "vocode_batch_mean": statistics.fmean(voc) if voc else 0.0,
        "vocode_batch_max": max(voc) if voc else 0,
        "urgent_mean": statistics.fmean(s.urgent for s in its),
        "deferred_chunks": sum(s.deferred_chunks for s in its),
        "decode_ms_per_call_mean": statistics.fmean([s.decode_s * 1000 for s in its if s.decode_batch]) if dec else 0.0,
        "vocode_ms_per_call_mean": statistics.fmean([s.vocode_s * 1000 for s in its if s.vocode_batch]) if voc else 0.0,
        # where the engine thread's time went, summed over the run (divide by the run's audio for per-audio-s costs)
        "encode_s": sum(s.encode_s for s in its),
        "decode_s": sum(s.decode_s for s in its),
        "vocode_s": sum(s.vocode_s for s in its),
        "decode_row_steps": sum(s.decode_batch * s.decode_steps for s in its),
        "vocode_frames": sum(s.vocode_frames for s in its),
        "vocode_calls": len(voc),
        "decode_calls": len(dec),
    }


def make_engine(backend: str, config: EngineConfig, voices: dict, observer: RecordingObserver | None,
                counter: Any = None) -> AsyncEngine:
    """An AsyncEngine over already loaded voices (fresh runners and state per run); `counter` (bench/op_count.py
    OpCounter): the engine thread counts the operations it dispatches into it."""
    from engine.runner import build_runners

    runners = build_runners(config, voices)
    if counter is not None:
        from bench.op_count import CountingRunner

        runners = {name: CountingRunner(runner, counter) for name, runner in runners.items()}
    observers = [observer] if observer is not None else []
    if backend == "engine":
        return AsyncEngine(EngineCore(config, runners, observers))
    from engine.baselines import make_baseline

    return AsyncEngine(make_baseline(backend, config, runners, observers))


async def _started(backend: str, streams: int, config: EngineConfig, voices: dict, counter: Any = None
                   ) -> tuple[AsyncEngine, RecordingObserver | None]:
    """A started backend with room for `streams` live requests (and the engine's iteration recorder)."""
    if streams > config.max_slots + config.max_waiting:
        config = EngineConfig.from_dict({**config.to_dict(), "max_waiting": streams})
    observer = RecordingObserver() if backend == "engine" else None
    engine = make_engine(backend, config, voices, observer, counter)
    await engine.start()
    return engine, observer


async def benchmark(
    config: EngineConfig, voices: dict, voice: str, items: Sequence[tuple[str, list[int]]],
    concurrency: Sequence[int], per_stream: int, backends: Sequence[str],
    progress: Callable[[dict[str, Any]], None] = lambda row: None, count_ops: bool = False,
) -> list[dict[str, Any]]:
    """Every backend at every concurrency; one result row each. `count_ops`: the row also holds the operations the
    engine thread dispatched (`ops`: per audio second, per iteration, the most frequent); counting slows the thread,
    so that run's times are not comparable with an uncounted one."""
    from bench.op_count import OpCounter

    rows = []
    for backend in backends:
        for n in concurrency:
            counter = OpCounter() if count_ops else None
            engine, observer = await _started(backend, n, config, voices, counter)
            cpu0 = time.process_time()
            records, wall = await run_load(engine, items, n, per_stream, voice, run_tag=f"{backend}-{n}")
            cpu_s = time.process_time() - cpu0
            await engine.stop()
            row = {"backend": backend, "concurrency": n, "per_stream": per_stream, **summarize(records, wall),
                   "cpu_s": cpu_s}
            row["cpu_s_per_audio_s"] = cpu_s / row["audio_s"] if row["audio_s"] else None
            if observer is not None:
                row["engine"] = iteration_summary(observer)
            if counter is not None:
                row["ops"] = op_summary(counter, row["audio_s"], row.get("engine", {}).get("iterations"))
            rows.append(row)
            progress(row)
    return rows


def op_summary(counter: Any, audio_s: float, iterations: int | None) -> dict[str, Any]:
    """Operations an engine thread dispatched while serving: in all, per audio second, per iteration, the top ones."""
    total = counter.total
    return {
        "total": total,
        "per_audio_s": total / audio_s if audio_s else None,
        "per_iteration": total / iterations if iterations else None,
        "top": counter.top(8),
    }


async def paced_benchmark(
    config: EngineConfig, voices: dict, voice: str, items: Sequence[Any], ids_of: Callable[[str], list],
    concurrency: Sequence[int], duration_s: float, backends: Sequence[str], seed: int = 42,
    playout: Any = None, progress: Callable[[dict[str, Any]], None] = lambda row: None,
) -> list[dict[str, Any]]:
    """Every backend at every call count, read at playback speed (bench/paced.py); one row each."""
    from bench.paced import PacedPlayout, paced_row, run_paced_closed_loop

    playout = playout or PacedPlayout()
    rows = []
    for backend in backends:
        for n in concurrency:
            engine, observer = await _started(backend, n, config, voices)
            load0, cpu0, idle_rss = os.getloadavg()[0], time.process_time(), _rss_mib()
            records, wall = await run_paced_closed_loop(engine, items, ids_of, n, duration_s, seed, voice, playout,
                                                        run_tag=f"{backend}-{n}")
            cpu_s, rss = time.process_time() - cpu0, _rss_mib()
            await engine.stop()
            row = {"backend": backend, "concurrency": n, "pacing": "realtime", "duration_s": duration_s,
                   **paced_row(records, wall), "cpu_s": cpu_s, "rss_mib": rss, "idle_rss_mib": idle_rss,
                   "load_before": load0, "turn_records": records}
            if observer is not None:
                row["engine"] = iteration_summary(observer)
            rows.append(row)
            progress(row)
    return rows


def _fmt(value: Any, scale: float = 1.0, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value * scale:.{digits}f}"


# (title, width, row key, scale, digits, suffix): one column of a printed table
_ASAP_COLUMNS = (("conc", 5, "concurrency", 0, -1, ""), ("reqs", 6, "requests", 0, -1, ""),
                 ("err", 5, "errors", 0, -1, ""), ("TTFA p50", 10, "ttfa_ms_p50", 1, 0, ""),
                 ("TTFA p90", 10, "ttfa_ms_p90", 1, 0, ""), ("RTF p50", 9, "rtf_p50", 1, 3, ""),
                 ("RTF p90", 9, "rtf_p90", 1, 3, ""), ("on-time", 9, "chunks_on_time", 100, 1, "%"),
                 ("all-ok", 8, "requests_all_on_time", 100, 0, "%"), ("xRT", 7, "x_realtime", 1, 1, ""),
                 ("CPU s/aud s", 12, "cpu_s_per_audio_s", 1, 4, ""))
_PACED_COLUMNS = (("calls", 6, "concurrency", 0, -1, ""), ("turns", 6, "turns", 0, -1, ""),
                  ("err", 5, "errors", 0, -1, ""), ("TTFA p50", 10, "ttfa_ms_p50", 1, 0, ""),
                  ("TTFA p90", 10, "ttfa_ms_p90", 1, 0, ""), ("chunks ok", 11, "chunks_on_time", 100, 1, "%"),
                  ("turns ok", 10, "turns_all_on_time", 100, 0, "%"), ("fill", 7, "turns_with_fill", 100, 0, "%"),
                  ("xRT", 7, "x_realtime", 1, 1, ""))


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple]) -> str:
    head = f"{'backend':<16}" + "".join(f"{title:>{width}}" for title, width, *_ in columns)
    lines = [head, "-" * len(head)]
    for r in rows:
        cells = []
        for _, width, key, scale, digits, suffix in columns:
            text = str(r[key]) if digits < 0 else _fmt(r[key], scale, digits) + suffix
            cells.append(f"{text:>{width}}")
        lines.append(f"{r['backend']:<16}" + "".join(cells))
    return "\n".join(lines)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Fixed-width table of the result rows (ASAP: TTFA, RTF, on-time chunks and requests, ×RT)."""
    return _table(rows, _ASAP_COLUMNS)


def format_ops_table(rows: Sequence[dict[str, Any]]) -> str:
    """The engine thread's host work per row: dispatched operations per audio second and per iteration, rows
    (decode batch) per iteration, host ms per iteration."""
    head = (f"{'backend':<16}{'conc':>5}{'ops/audio s':>13}{'ops/iter':>10}{'iters':>7}{'rows/iter':>10}"
            f"{'ms/iter mean':>13}{'ms/iter p90':>12}")
    lines = [head, "-" * len(head)]
    for r in rows:
        ops, eng = r.get("ops") or {}, r.get("engine") or {}
        lines.append(f"{r['backend']:<16}{r['concurrency']:>5}{_fmt(ops.get('per_audio_s')):>13}"
                     f"{_fmt(ops.get('per_iteration')):>10}{eng.get('iterations', '-'):>7}"
                     f"{_fmt(eng.get('decode_batch_mean'), digits=1):>10}{_fmt(eng.get('iteration_ms_mean'), digits=1):>13}"
                     f"{_fmt(eng.get('iteration_ms_p90'), digits=1):>12}")
    return "\n".join(lines)


def _rss_mib() -> float:
    """This process's resident memory in MiB (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def format_paced_table(rows: Sequence[dict[str, Any]]) -> str:
    """Fixed-width table of paced rows: the gRPC bench's figures (TTFA, on-time chunks and turns, fill, ×RT)."""
    return _table(rows, _PACED_COLUMNS)


def machine_info() -> dict[str, Any]:
    """Where the numbers were taken."""
    import torch

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.engine_load", description=__doc__.splitlines()[0])
    p.add_argument("--voice", default="baker-zh", help="installed voice name or folder; tiny: tiny random models")
    p.add_argument("--concurrency", default="1,4,8,16,32", help="comma-separated stream counts")
    p.add_argument("--backends", default=",".join(BACKENDS), help="engine,naive,non_incremental")
    p.add_argument("--requests-per-stream", type=int, default=3)
    p.add_argument("--classes", default="short,medium,long", help="text classes of the TSV to use")
    p.add_argument("--texts", type=Path, default=TEXTS)
    p.add_argument("--device", default="cpu")
    p.add_argument("--weights", default=None, help="fp32 | int8 | bf16 (default: int8 on CPU, fp32 on CUDA)")
    p.add_argument("--max-slots", type=int, default=32)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("--engine", default="", help="extra EngineConfig keys as JSON, e.g. '{\"chunk_frames\": 32}'")
    p.add_argument("--pacing", choices=["asap", "realtime"], default="asap",
                   help="asap: read chunks as they come, N always-busy streams (default); realtime: N calls read "
                        "at playback speed, turns back to back, gRPC bench metrics (bench/paced.py)")
    p.add_argument("--duration-s", type=float, default=30.0, help="realtime: seconds each call level runs")
    p.add_argument("--text-class", default="mixed", help="realtime: text class of bench/texts/callcenter_zh.tsv")
    p.add_argument("--seed", type=int, default=42, help="realtime: text draw seed (the gRPC bench's default)")
    p.add_argument("--frame-ms", type=int, default=20, help="realtime: frame length of the release")
    p.add_argument("--lead-ms", type=int, default=60, help="realtime: REALTIME lead")
    p.add_argument("--count-ops", action="store_true",
                   help="asap: count the operations the engine thread dispatches (per audio second, per iteration; "
                        "bench/op_count.py) and print host ms per iteration; counting slows the engine")
    p.add_argument("--out", type=Path, default=Path("bench-results/engine.json"))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    args = parse_args(argv)
    overrides = json.loads(args.engine) if args.engine else {}
    device = str(overrides.get("device", args.device))
    if args.weights is None:  # int8 is the CPU fast path; EngineConfig refuses it on CUDA
        args.weights = "int8" if device == "cpu" else "fp32"
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from engine.threads import serial_torch
    from models.frontend import MandarinFrontend
    from models.voices.bundle import load_voice

    serial_torch()  # the engine thread alone runs parallel torch work (engine/threads.py)

    config = EngineConfig.from_dict({
        "device": args.device, "weights": args.weights, "voices": [args.voice], "max_slots": args.max_slots,
        "num_threads": args.threads, **overrides,
    })
    frontend = MandarinFrontend()
    # the voice as the config says (an --engine override of device or weights applies to the weights loaded too)
    if args.voice == "tiny":  # tiny random models with the real interfaces (host work without the arithmetic)
        from models.voices.bundle import tiny_voice

        voice = tiny_voice(device=config.device)
    else:
        voice = load_voice(args.voice, device=config.device, weights=config.weights)
    voices = {args.voice: voice}
    concurrency = [int(x) for x in args.concurrency.split(",") if x]
    backends = [b for b in args.backends.split(",") if b]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        raise SystemExit(f"unknown backends {unknown}; choose from {BACKENDS}")
    paced = args.pacing == "realtime"
    table = format_paced_table if paced else format_table

    def progress(row: dict[str, Any]) -> None:
        print(table([row]).splitlines()[-1], flush=True)

    print(table([]).splitlines()[0], flush=True)
    if paced:
        from bench.workload import load_texts as load_items, select_texts
        from bench.paced import PacedPlayout, segment_texts

        text_items = select_texts(load_items(None), args.text_class)
        segment_ids = {t.text: [frontend.to_ids(seg).ids for seg in segment_texts(t.text)] for t in text_items}
        items: Sequence[Any] = [(t.id, t.text) for t in text_items]
        rows = asyncio.run(paced_benchmark(
            config, voices, args.voice, text_items, segment_ids.__getitem__, concurrency, args.duration_s, backends,
            args.seed, PacedPlayout(frame_ms=args.frame_ms, lead_ms=args.lead_ms), progress))
    else:
        texts = load_texts(args.texts, [c for c in args.classes.split(",") if c])
        items = [(tid, frontend.to_ids(text).ids) for tid, text in texts]
        rows = asyncio.run(benchmark(config, voices, args.voice, items, concurrency, args.requests_per_stream,
                                     backends, progress, count_ops=args.count_ops))
    print()
    print(table(rows))
    if args.count_ops:
        print()
        print(format_ops_table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "command": " ".join(["python -m bench.engine_load", *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_info(),
        "engine_config": config.to_dict(),
        "texts": [tid for tid, _ in items],
        "results": rows,
    }
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
