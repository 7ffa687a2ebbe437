"""In-process engine benchmark: engine vs naive vs non-incremental, closed-loop concurrency, TTFA / RTF / on-time.

    python -m engine.bench --voice baker-zh --concurrency 1,4,8,16,32 --out bench-results/engine.json

Each of N concurrent streams sends call-center sentences one after another (the next when the previous one
finished) through the backend's OutputStream API, timing every chunk as the consumer receives it:

* TTFA: submit → first chunk received.  RTF: (last chunk received − submit) / audio duration.
* Chunk i of a request is on time iff t_i ≤ t_1 + Σ_{k<i} duration_k (playback starts with the first chunk).
* ×RT: audio seconds produced per wall second over the whole run.

Prints a table and writes JSON (per-run summaries, the engine's per-iteration batch sizes, machine info).
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

TEXTS = Path("/work/shared/texts/callcenter_zh.tsv")
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
        "iteration_ms_p50": percentile([s.duration_s * 1000 for s in its], 50),
        "iteration_ms_p99": percentile([s.duration_s * 1000 for s in its], 99),
        "decode_batch_mean": statistics.fmean(dec) if dec else 0.0,
        "decode_batch_max": max(dec) if dec else 0,
        "vocode_batch_mean": statistics.fmean(voc) if voc else 0.0,
        "vocode_batch_max": max(voc) if voc else 0,
        "urgent_mean": statistics.fmean(s.urgent for s in its),
        "deferred_chunks": sum(s.deferred_chunks for s in its),
        "decode_ms_per_call_mean": statistics.fmean([s.decode_s * 1000 for s in its if s.decode_batch]) if dec else 0.0,
        "vocode_ms_per_call_mean": statistics.fmean([s.vocode_s * 1000 for s in its if s.vocode_batch]) if voc else 0.0,
    }


def make_engine(backend: str, config: EngineConfig, voices: dict, observer: RecordingObserver | None) -> AsyncEngine:
    """An AsyncEngine over already loaded voices (fresh runners and state per run)."""
    from engine.runner import build_runners

    runners = build_runners(config, voices)
    observers = [observer] if observer is not None else []
    if backend == "engine":
        return AsyncEngine(EngineCore(config, runners, observers))
    from engine.baselines import make_baseline

    return AsyncEngine(make_baseline(backend, config, runners, observers))


async def benchmark(
    config: EngineConfig, voices: dict, voice: str, items: Sequence[tuple[str, list[int]]],
    concurrency: Sequence[int], per_stream: int, backends: Sequence[str],
    progress: Callable[[dict[str, Any]], None] = lambda row: None,
) -> list[dict[str, Any]]:
    """Every backend at every concurrency; one result row each."""
    rows = []
    for backend in backends:
        for n in concurrency:
            cfg = config
            if n > config.max_slots + config.max_waiting:
                cfg = EngineConfig.from_dict({**config.to_dict(), "max_waiting": n})
            observer = RecordingObserver() if backend == "engine" else None
            engine = make_engine(backend, cfg, voices, observer)
            await engine.start()
            records, wall = await run_load(engine, items, n, per_stream, voice, run_tag=f"{backend}-{n}")
            await engine.stop()
            row = {"backend": backend, "concurrency": n, "per_stream": per_stream, **summarize(records, wall)}
            if observer is not None:
                row["engine"] = iteration_summary(observer)
            rows.append(row)
            progress(row)
    return rows


def _fmt(value: Any, scale: float = 1.0, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value * scale:.{digits}f}"


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Fixed-width table of the result rows."""
    head = f"{'backend':<16}{'conc':>5}{'reqs':>6}{'err':>5}{'TTFA p50':>10}{'TTFA p90':>10}{'RTF p50':>9}" \
           f"{'RTF p90':>9}{'on-time':>9}{'all-ok':>8}{'xRT':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['backend']:<16}{r['concurrency']:>5}{r['requests']:>6}{r['errors']:>5}"
            f"{_fmt(r['ttfa_ms_p50']):>10}{_fmt(r['ttfa_ms_p90']):>10}{_fmt(r['rtf_p50'], digits=3):>9}"
            f"{_fmt(r['rtf_p90'], digits=3):>9}{_fmt(r['chunks_on_time'], 100, 1):>8}%"
            f"{_fmt(r['requests_all_on_time'], 100, 0):>7}%{_fmt(r['x_realtime'], digits=1):>7}"
        )
    return "\n".join(lines)


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
    p = argparse.ArgumentParser(prog="python -m engine.bench", description=__doc__.splitlines()[0])
    p.add_argument("--voice", default="baker-zh", help="installed voice name or folder")
    p.add_argument("--concurrency", default="1,4,8,16,32", help="comma-separated stream counts")
    p.add_argument("--backends", default=",".join(BACKENDS), help="engine,naive,non_incremental")
    p.add_argument("--requests-per-stream", type=int, default=3)
    p.add_argument("--classes", default="short,medium,long", help="text classes of the TSV to use")
    p.add_argument("--texts", type=Path, default=TEXTS)
    p.add_argument("--device", default="cpu")
    p.add_argument("--weights", default="int8", help="fp32 | int8 | bf16")
    p.add_argument("--max-slots", type=int, default=32)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("--engine", default="", help="extra EngineConfig keys as JSON, e.g. '{\"chunk_frames\": 32}'")
    p.add_argument("--out", type=Path, default=Path("bench-results/engine.json"))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from engine.threads import serial_torch
    from models.frontend import MandarinFrontend
    from models.voices.bundle import load_voice

    serial_torch()  # the engine thread alone runs parallel torch work (engine/threads.py)

    overrides = json.loads(args.engine) if args.engine else {}
    config = EngineConfig.from_dict({
        "device": args.device, "weights": args.weights, "voices": [args.voice], "max_slots": args.max_slots,
        "num_threads": args.threads, **overrides,
    })
    frontend = MandarinFrontend()
    texts = load_texts(args.texts, [c for c in args.classes.split(",") if c])
    items = [(tid, frontend.to_ids(text).ids) for tid, text in texts]
    voice = load_voice(args.voice, device=args.device, weights=args.weights)
    voices = {args.voice: voice}
    concurrency = [int(x) for x in args.concurrency.split(",") if x]
    backends = [b for b in args.backends.split(",") if b]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        raise SystemExit(f"unknown backends {unknown}; choose from {BACKENDS}")

    def progress(row: dict[str, Any]) -> None:
        print(format_table([row]).splitlines()[-1], flush=True)

    print(format_table([]).splitlines()[0], flush=True)
    rows = asyncio.run(
        benchmark(config, voices, args.voice, items, concurrency, args.requests_per_stream, backends, progress)
    )
    print()
    print(format_table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "command": " ".join(["python -m engine.bench", *(argv if argv is not None else sys.argv[1:])]),
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
