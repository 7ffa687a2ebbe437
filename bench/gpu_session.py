"""The one prepared run for a lent GPU: exactness, always-busy, paced in process and paced over gRPC, one JSON.

    make gpu-check            # python -m bench.gpu_session --out bench-results/gpu-check.json
    python -m bench.gpu_session --smoke --out /tmp/smoke.json   # CPU, tiny random voice, levels 2,4, ~2 s each

Four parts, each printed as a table as it finishes and all written to one JSON (rewritten after every part, so
a run cut short keeps what it measured):

1. exactness: bench.gpu_check's checks (streamed vs whole vocoding, decoder graphs vs eager in float64 and
   float32, one decode call's time graphs vs eager).
2. always busy in process (bench.engine_load.benchmark): N streams, `--busy-requests` sentences each, read as
   fast as they come: ×RT, chunks on time, host CPU seconds of this process per wall second.
3. paced in process (bench.engine_load.paced_benchmark): N calls read at playback speed for `--duration-s`:
   chunks on time, turns with underrun fill, TTFA p50/p90, host CPU per wall second.
4. paced over gRPC (bench.capacity.grpc_levels): `voxpool serve` in a child process on 127.0.0.1 (free port),
   the load generator in this process beside it; the same figures, CPU per wall second of the server process.

Levels above the engine's shipped `max_slots` (and the server's `max_calls`) are run with both raised to the
top level, through EngineConfig for parts 2–3 and VOXPOOL__ENGINE__MAX_SLOTS / VOXPOOL__SERVER__MAX_CALLS for
the server; the output says so.

Budget of the defaults (levels 64,128,256; 20 s per paced level; 2 sentences per busy stream), as allowances:
voice load and CUDA warm-up 30 s; exactness 60 s (graph capture twice, ≤ 2000 scripted calls each, timing);
always busy 20 s (448 streams × 2 sentences ≈ 3000 s of audio is 6 s at the 500 ×RT target, plus 3 engine
starts); paced in process 3 × (20 s + 10 s for the last turns to end) = 90 s; gRPC 140 s (server start with its
voice load 40 s, 2 warm-up turns, 3 × 30 s, stop 10 s). Sum: 30 + 60 + 20 + 90 + 140 = 340 s, under 6 minutes,
leaving 2 for a slower start. A paced level runs until its last turns end, so an overloaded level takes longer;
gRPC levels stop after two failing levels in a row (bench.capacity's rule).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from bench import gpu_check
from bench.capacity import Server, grpc_levels
from bench.engine_load import benchmark, load_texts, paced_benchmark
from bench.report import json_safe
from engine.config import EngineConfig

LEVELS = (64, 128, 256)
SMOKE_LEVELS = (2, 4)
PARTS = ("exactness", "always_busy", "paced_inprocess", "paced_grpc")
SMOKE_IDS = [[1, 2, 3], [4, 5, 6, 7, 8], [2, 2], [3, 1, 4, 1, 5, 9, 2]]  # ids the tiny voice reads


def own_cpu_s() -> float:
    """User + system CPU seconds of this process, all threads (the engine thread, the event loop, torch's)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def engine_config(device: str, voice: str, top_level: int, threads: int) -> tuple[EngineConfig, str | None]:
    """The engine's config for this run and, when the top level exceeds the shipped max_slots, a note saying so."""
    shipped = EngineConfig().max_slots
    slots = max(shipped, top_level)
    config = EngineConfig.from_dict({"device": device, "weights": "fp32" if device != "cpu" else "int8",
                                     "voices": [voice], "max_slots": slots, "num_threads": threads})
    note = (f"engine.max_slots raised {shipped} → {slots} (server.max_calls too) for levels up to {top_level}"
            if slots > shipped else None)
    return config, note


def _per_wall(cpu_s: float | None, wall_s: float | None) -> float | None:
    return cpu_s / wall_s if cpu_s is not None and wall_s else None


def _cell(value: Any, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def table(rows: Sequence[dict[str, Any]], paced: bool) -> str:
    """Markdown table of one load part's rows."""
    if paced:
        head = ("| level | turns | errors | chunks on time % | turns filled % | TTFA p50 / p90 ms | ×RT "
                "| host CPU s / wall s |")
    else:
        head = "| level | requests | errors | chunks on time % | ×RT | TTFA p50 / p90 ms | host CPU s / wall s |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if paced:
            lines.append(f"| {r['level']} | {r['turns']} | {r['errors']} | {_cell(r['chunks_on_time'], 100)} "
                         f"| {_cell(r['turns_with_fill'], 100)} | {_cell(r['ttfa_ms_p50'], 1, 0)} / "
                         f"{_cell(r['ttfa_ms_p90'], 1, 0)} | {_cell(r['x_realtime'])} "
                         f"| {_cell(r['cpu_s_per_wall_s'], 1, 2)} |")
        else:
            lines.append(f"| {r['level']} | {r['requests']} | {r['errors']} | {_cell(r['chunks_on_time'], 100)} "
                         f"| {_cell(r['x_realtime'])} | {_cell(r['ttfa_ms_p50'], 1, 0)} / "
                         f"{_cell(r['ttfa_ms_p90'], 1, 0)} | {_cell(r['cpu_s_per_wall_s'], 1, 2)} |")
    return "\n".join(lines)


def exactness(voice_name: str, voice: Any, device: torch.device, smoke: bool) -> dict[str, Any]:
    """bench.gpu_check's parts (fp32 with TF32 off, as it judges them), smaller in the smoke run; TF32 is put back
    as it was after, so the load parts run with the engine's own settings."""
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    gpu_check.strict_fp32()
    try:
        return _exactness(voice_name, voice, device, smoke)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def _exactness(voice_name: str, voice: Any, device: torch.device, smoke: bool) -> dict[str, Any]:
    ids = SMOKE_IDS if smoke else gpu_check.utterance_ids(gpu_check.TEXTS)
    steps, batches, repeats = (2, [1, 4], 2) if smoke else (8, [1, 4, 16, 64], 30)
    graphs = gpu_check.check_graphs(voice_name, voice, ids, device, steps, torch.float64)
    graphs_fp32 = gpu_check.check_graphs(voice_name, voice, ids, device, steps, torch.float32)
    timing = gpu_check.time_decode(voice_name, voice, ids, device, 2 if smoke else 4, batches, repeats)
    vocoder = gpu_check.check_vocoder(voice, ids, device)
    rows = [{"check": "vocoder streamed = whole", "ok": all(r["ok"] for r in vocoder),
             "max_abs_diff": max(r["max_abs_diff"] for r in vocoder)}]
    for g in (graphs, graphs_fp32):
        rows.append({"check": f"decoder graphs = eager ({g['dtype']})", "ok": g["ok"],
                     "max_abs_diff": max(r["max_abs_diff"] for r in g["rows"])})
    for t in timing[1:]:
        rows.append({"check": f"decode call, batch {t['batch']}: graphs {t['graphs_ms']} ms, eager {t['eager_ms']} ms",
                     "ok": True, "max_abs_diff": None})
    return {"rows": rows, "ok": all(r["ok"] for r in rows), "vocoder": vocoder, "graphs": graphs,
            "graphs_fp32": graphs_fp32, "decode_timing": timing}


def busy_rows(config: EngineConfig, voices: dict, voice: str, levels: Sequence[int], per_stream: int,
              texts: Path | None) -> list[dict[str, Any]]:
    """bench.engine_load.benchmark, engine backend, one level at a time with this process's CPU per wall second."""
    from models.frontend import MandarinFrontend

    frontend = MandarinFrontend()
    items = [(tid, frontend.to_ids(text).ids) for tid, text in load_texts(**({"path": texts} if texts else {}))]
    rows = []
    for n in levels:
        cpu0 = own_cpu_s()
        [r] = asyncio.run(benchmark(config, voices, voice, items, [n], per_stream, ["engine"]))
        r["host_cpu_s"] = own_cpu_s() - cpu0  # benchmark's cpu_s is the same clock; kept as read here
        rows.append({"level": n, **r, "cpu_s_per_wall_s": _per_wall(r["host_cpu_s"], r["wall_s"])})
    return rows


def paced_rows(config: EngineConfig, voices: dict, voice: str, levels: Sequence[int], duration_s: float
               ) -> list[dict[str, Any]]:
    """bench.engine_load.paced_benchmark, engine backend, with this process's CPU per wall second."""
    from bench.paced import segment_texts
    from bench.workload import load_texts as load_items, select_texts
    from models.frontend import MandarinFrontend

    frontend = MandarinFrontend()
    items = select_texts(load_items(None), "mixed")
    segment_ids = {t.text: [frontend.to_ids(s).ids for s in segment_texts(t.text)] for t in items}
    rows = []
    for n in levels:
        cpu0 = own_cpu_s()
        [r] = asyncio.run(paced_benchmark(config, voices, voice, items, segment_ids.__getitem__, [n], duration_s,
                                          ["engine"]))
        r.pop("turn_records", None)
        r["host_cpu_s"] = own_cpu_s() - cpu0
        rows.append({"level": n, **r, "cpu_s_per_wall_s": _per_wall(r["host_cpu_s"], r["wall_s"])})
    return rows


def grpc_rows(device: str, voice: str, levels: Sequence[int], duration_s: float, threads: int,
              ready_timeout_s: float) -> list[dict[str, Any]]:
    """bench.capacity.grpc_levels against `voxpool serve` in a child process, limits raised to the top level."""
    top = max(levels)
    env = {"VOXPOOL__VOICE__DEFAULT": voice, "VOXPOOL__VOICE__AUTO_INSTALL": "false",
           "VOXPOOL__ENGINE__DEVICE": device, "VOXPOOL__ENGINE__WEIGHTS": "fp32" if device != "cpu" else "int8",
           "VOXPOOL__ENGINE__MAX_SLOTS": str(max(EngineConfig().max_slots, top))}
    bench_args = ["--pacing", "REALTIME", "--encoding", "pcmu", "--sample-rate-hz", "8000", "--frame-ms", "20",
                  "--text-class", "mixed", "--turn-timeout-s", str(max(60.0, 4 * duration_s))]
    server = Server("engine", threads, max(64, top), env)
    try:
        rows = asyncio.run(grpc_levels(server, levels, duration_s, bench_args, ready_timeout_s))
    finally:
        server.stop()
    out = []
    for r in rows:
        cpu_per_wall = (r["cpu_s_per_audio_s"] * r["x_realtime"]
                        if r["cpu_s_per_audio_s"] is not None and r["x_realtime"] is not None else None)
        errors = r["errors"]  # bench.metrics counts them by status
        out.append({"level": r["calls"], **{k: v for k, v in r.items() if k != "summary"},
                    "errors": sum(errors.values()) if isinstance(errors, dict) else errors,
                    "requests": r["turns"], "cpu_s_per_wall_s": cpu_per_wall, "server_env": env})
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_session", description=__doc__.splitlines()[0])
    p.add_argument("--voice", default="baker-zh", help="installed voice name or folder")
    p.add_argument("--device", default="cuda")
    p.add_argument("--levels", default=",".join(map(str, LEVELS)), help="streams / calls per level")
    p.add_argument("--duration-s", type=float, default=20.0, help="seconds each paced level runs")
    p.add_argument("--busy-requests", type=int, default=2, help="sentences per always-busy stream")
    p.add_argument("--threads", type=int, default=4, help="torch threads of the engine (in process and server)")
    p.add_argument("--parts", default=",".join(PARTS), help="which parts to run")
    p.add_argument("--ready-timeout-s", type=float, default=180.0)
    p.add_argument("--smoke", action="store_true",
                   help="CPU, tiny random voice, levels 2,4, 2 s per level: proves the script runs end to end")
    p.add_argument("--out", type=Path, default=Path("bench-results/gpu-check.json"))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = None
    if args.smoke:
        from models.voices.bundle import save_voice_dir, tiny_voice

        tmp = tempfile.TemporaryDirectory(prefix="gpu-session-voice-")
        args.voice = str(save_voice_dir(tiny_voice(decoder_steps=40), Path(tmp.name) / "tiny"))
        args.device, args.levels, args.duration_s, args.busy_requests, args.threads = "cpu", "2,4", 2.0, 1, 1
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here (--smoke runs the script's logic on the CPU)", file=sys.stderr)
        return 2
    levels = [int(x) for x in args.levels.split(",") if x]
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise SystemExit(f"unknown parts {unknown}; choose from {PARTS}")
    from engine.threads import serial_torch
    from models.voices.bundle import load_voice

    serial_torch()
    config, note = engine_config(str(device), args.voice, max(levels), args.threads)
    report: dict[str, Any] = {
        "command": " ".join(["python -m bench.gpu_session", *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "facts": gpu_check.device_facts(device), "levels": levels,
        "duration_s": args.duration_s, "busy_requests": args.busy_requests, "limits_raised": note,
        "engine_config": config.to_dict(), "seconds": {}, **{p: None for p in PARTS}}
    print(json.dumps(report["facts"]), flush=True)
    if note:
        print(note, flush=True)
    t0 = time.perf_counter()
    voice = load_voice(args.voice, device=config.device, weights=config.weights)
    exact_voice = voice if config.weights == "fp32" else load_voice(args.voice, device=str(device), weights="fp32")
    report["seconds"]["voice_load"] = round(time.perf_counter() - t0, 1)
    voices = {args.voice: voice}
    runs: dict[str, Callable[[], Any]] = {
        "exactness": lambda: exactness(args.voice, exact_voice, device, args.smoke),
        "always_busy": lambda: busy_rows(config, voices, args.voice, levels, args.busy_requests, None),
        "paced_inprocess": lambda: paced_rows(config, voices, args.voice, levels, args.duration_s),
        "paced_grpc": lambda: grpc_rows(str(device), args.voice, levels, args.duration_s, args.threads,
                                        args.ready_timeout_s),
    }
    failed = False
    try:
        for part in parts:
            t0 = time.perf_counter()
            try:
                report[part] = runs[part]()
            except Exception:  # noqa: BLE001 -- one part's failure must not hide the others' results
                report[part] = {"error": traceback.format_exc()}
                print(f"\n== {part}: FAILED\n{report[part]['error']}", flush=True)
                failed = True
            else:
                report["seconds"][part] = round(time.perf_counter() - t0, 1)
                print(f"\n== {part} ({report['seconds'][part]} s)", flush=True)
                if part == "exactness":
                    print(gpu_check._table(report[part]["rows"], ["check", "ok", "max_abs_diff"]))
                    failed |= not report[part]["ok"]
                else:
                    print(table(report[part], paced=part != "always_busy"))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(json_safe(report), indent=1, ensure_ascii=False), encoding="utf-8")
    finally:
        if tmp is not None:
            tmp.cleanup()
    print(f"\nwrote {args.out}; {'FAILED' if failed else 'all parts ran, exactness checks passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
