"""How calls start: TTFA p50/p90 for calls started at the same instant and for Poisson arrivals, per engine setting.

    python -m bench.call_starts --simultaneous 6,16 --poisson 2:30 \\
        --variants '[{}, {"max_ramping_streams": 6}, {"first_chunk_frames": 12, "max_ramping_streams": 6}]'

Every variant (EngineConfig overrides on top of the defaults) runs the same schedule in one process, one after the
other and round-robin over `--repeats`, so before / after stand side by side on the same machine state:

* simultaneous N: N calls each submit one turn (text drawn as the gRPC bench draws, segments one after another)
  at the same instant; reported: every TTFA sorted, p50 / p90, and the paced on-time figures of those turns;
* poisson R:D: turns arrive as a Poisson process of R per second for D seconds (bench.workload's seeded
  schedule, as `python -m bench.grpc_load --rates R`), each one a call of one turn.

Turns are read at playback speed and scored exactly as bench/paced.py does (the gRPC bench's metric code).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.paced import PacedPlayout, paced_turn, paced_row
from bench.workload import TextItem, arrival_times, pick_texts


async def simultaneous(engine: Any, items: Sequence[TextItem], ids_of: Callable[[str], list], calls: int,
                       seed: int, voice: str, playout: PacedPlayout, tag: str) -> list[dict[str, Any]]:
    """`calls` turns submitted at the same instant (one per call); their records."""
    texts = pick_texts(items, calls, seed, calls, 0)
    return list(await asyncio.gather(*(
        paced_turn(engine, ids_of(t.text), f"{tag}-c{i}", voice, seed, playout) for i, t in enumerate(texts))))


async def poisson(engine: Any, items: Sequence[TextItem], ids_of: Callable[[str], list], rate_per_s: float,
                  duration_s: float, seed: int, voice: str, playout: PacedPlayout, tag: str) -> list[dict[str, Any]]:
    """One-turn calls arriving as a seeded Poisson process; their records."""
    arrivals = arrival_times(rate_per_s, duration_s, seed, "poisson")
    texts = pick_texts(items, len(arrivals), seed, rate_per_s)
    t0 = time.perf_counter()
    tasks = []
    for i, (at_s, t) in enumerate(zip(arrivals, texts)):
        delay = t0 + at_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(paced_turn(engine, ids_of(t.text), f"{tag}-a{i}", voice, seed, playout)))
    return list(await asyncio.gather(*tasks))


def _ttfa_row(records: Sequence[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    row = paced_row(records, wall_s)
    row["ttfa_ms_sorted"] = sorted(round(r["ttfa_ms"]) for r in records if r.get("chunks"))
    del row["summary"]
    return row


async def run_variants(config_base: dict[str, Any], variants: Sequence[dict[str, Any]], voices: dict, voice: str,
                       items: Sequence[TextItem], ids_of: Callable[[str], list], simultaneous_calls: Sequence[int],
                       poisson_loads: Sequence[tuple[float, float]], repeats: int, seed: int,
                       progress: Callable[[dict[str, Any]], None] = lambda row: None) -> list[dict[str, Any]]:
    """Every variant on every schedule, variants round-robin within each repeat; one row each."""
    from bench.engine_load import make_engine
    from engine.config import EngineConfig

    playout = PacedPlayout()
    rows = []
    schedules: list[tuple[str, Any]] = [("simultaneous", n) for n in simultaneous_calls]
    schedules += [("poisson", load) for load in poisson_loads]
    for rep in range(repeats):
        for kind, arg in schedules:
            for k, overrides in enumerate(variants):
                config = EngineConfig.from_dict({**config_base, **overrides})
                engine = make_engine("engine", config, voices, None)
                await engine.start()
                tag = f"r{rep}-v{k}-{kind}"
                t0 = time.perf_counter()
                load0 = os.getloadavg()[0]
                if kind == "simultaneous":
                    records = await simultaneous(engine, items, ids_of, arg, seed + rep, voice, playout, tag)
                    label = f"{arg} at once"
                else:
                    records = await poisson(engine, items, ids_of, arg[0], arg[1], seed + rep, voice, playout, tag)
                    label = f"poisson {arg[0]:g}/s × {arg[1]:g} s"
                wall = time.perf_counter() - t0
                await engine.stop()
                row = {"repeat": rep, "variant": overrides, "schedule": label, "load_before": load0,
                       "load_after": os.getloadavg()[0], **_ttfa_row(records, wall)}
                rows.append(row)
                progress(row)
    return rows


def format_row(r: dict[str, Any]) -> str:
    def f(v: Any, scale: float = 1.0, d: int = 0) -> str:
        return "-" if v is None else f"{v * scale:.{d}f}"

    return (f"| {json.dumps(r['variant'])} | {r['schedule']} | {f(r['ttfa_ms_p50'])} / {f(r['ttfa_ms_p90'])} "
            f"| {f(r['chunks_on_time'], 100, 1)} % | {f(r['turns_with_fill'], 100, 0)} % "
            f"| {' '.join(map(str, r['ttfa_ms_sorted'][:16]))} | {r['load_before']:.1f}→{r['load_after']:.1f} |")


HEADER = ("| variant | schedule | TTFA p50 / p90 ms | chunks on time | turns with fill | TTFA ms sorted | load |\n"
          "|---|---|---|---|---|---|---|")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.call_starts", description=__doc__.splitlines()[0])
    p.add_argument("--voice", default="baker-zh")
    p.add_argument("--weights", default="int8")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--simultaneous", default="6,16", help="call counts started at the same instant")
    p.add_argument("--poisson", default="2:30", help="RATE:SECONDS,... Poisson arrivals of one-turn calls")
    p.add_argument("--variants", default="[{}]", help="JSON list of EngineConfig overrides ({} = the defaults)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", type=Path, default=Path("bench-results/starts.json"))
    args = p.parse_args(argv)

    from bench.workload import load_texts, select_texts
    from bench.paced import segment_texts
    from engine.threads import serial_torch
    from models.frontend import MandarinFrontend
    from models.voices.bundle import load_voice

    serial_torch()
    base = {"weights": args.weights, "voices": [args.voice], "num_threads": args.threads, "max_waiting": 256}
    frontend = MandarinFrontend()
    items = select_texts(load_texts(None), "mixed")
    ids = {t.text: [frontend.to_ids(seg).ids for seg in segment_texts(t.text)] for t in items}
    voices = {args.voice: load_voice(args.voice, weights=args.weights)}
    loads = []
    for part in (x for x in args.poisson.split(",") if x):
        rate, _, seconds = part.partition(":")
        loads.append((float(rate), float(seconds or 30)))
    sim = [int(x) for x in args.simultaneous.split(",") if x]
    print(HEADER, flush=True)
    rows = asyncio.run(run_variants(base, json.loads(args.variants), voices, args.voice, items, ids.__getitem__, sim,
                                    loads, args.repeats, args.seed, lambda r: print(format_row(r), flush=True)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": " ".join(["python -m bench.call_starts", *(argv or sys.argv[1:])]),
                                    "rows": rows}, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
