"""The load generator: open-loop (Poisson / even) and closed-loop load over gRPC, goodput search, side-by-side targets.

    python -m bench.grpc_load --help
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import logging
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

from bench.metrics import (
    MetricsError,
    TurnTimeline,
    bisect_goodput,
    meets_goodput,
    summarize,
    turn_metrics,
)
from bench.report import comparison, json_safe, render
from bench.workload import (
    ARRIVALS,
    TextItem,
    WorkloadError,
    arrival_times,
    load_texts,
    pick_texts,
    select_texts,
)
from clients.client import (
    Audio,
    ClientConfigError,
    Conversation,
    ConversationClosed,
    TurnDone,
    TurnError,
    VoxpoolClient,
    VoxpoolError,
    session_config,
)
from clients.deltas import DeltaError, split_deltas, synthesizable_index
from protos.voxpool.v1 import tts_pb2 as pb

log = logging.getLogger(__name__)
SCHEMA = "voxpool-bench/1"


class BenchError(ValueError):
    """A bad command line (targets, rates, bounds) or an unreachable target."""


@dataclass(frozen=True)
class Settings:
    """What every turn of a run shares."""

    config: pb.SessionConfig
    stream_text: bool
    delta_chars: tuple[int, int]
    delta_interval_s: float
    turn_timeout_s: float
    burst_gap_s: float | None
    prebuffers_ms: tuple[int, ...]
    tolerance_s: float
    keep_frames: bool
    seed: int


@dataclass(frozen=True)
class TurnSpec:
    """One turn to run: its text, its deltas, and (open loop) its scheduled offset from the run's start."""

    index: int
    item: TextItem
    deltas: tuple[str, ...]
    scheduled_s: float | None = None
    worker: int | None = None


def make_spec(st: Settings, index: int, item: TextItem, *keys: float, scheduled_s: float | None = None,
              worker: int | None = None) -> TurnSpec:
    """A TurnSpec whose deltas (with --stream-text) are seeded by (seed, keys), so every target gets the same."""
    if st.stream_text:
        deltas = tuple(split_deltas(item.text, st.delta_chars[0], st.delta_chars[1], st.seed, *keys))
    else:
        deltas = (item.text,)
    return TurnSpec(index, item, deltas, scheduled_s, worker)


async def _read_turn(conv: Conversation, frames: list[tuple[float, float, bool]], inband: list[str]
                     ) -> TurnDone | None:
    done = None
    async for ev in conv:
        if type(ev) is Audio:
            frames.append((ev.received_s, ev.duration_ms * 1e-3, ev.silence))
        elif type(ev) is TurnDone:
            done = ev
        elif type(ev) is TurnError:
            inband.append(ev.code)
    return done


async def run_turn(client: VoxpoolClient, spec: TurnSpec, st: Settings, t0: float) -> dict[str, Any]:
    """One Converse call: config, the text (one delta or many), flush, end; returns the raw record + metrics."""
    rec: dict[str, Any] = {"i": spec.index, "text_id": spec.item.id, "class": spec.item.cls,
                           "chars": len(spec.item.text), "deltas": len(spec.deltas), "status": "OK"}
    if spec.worker is not None:
        rec["worker"] = spec.worker
    t_open = time.perf_counter()
    rec["open_s"] = t_open - t0
    if spec.scheduled_s is not None:
        rec["scheduled_s"] = spec.scheduled_s
        rec["lag_ms"] = (rec["open_s"] - spec.scheduled_s) * 1e3
    frames: list[tuple[float, float, bool]] = []
    inband: list[str] = []
    ref_s = flush_s = math.nan
    done: TurnDone | None = None
    mark_idx = synthesizable_index(spec.deltas)
    try:
        async with asyncio.timeout(st.turn_timeout_s):
            conv = await client.converse(config=st.config)
            rec["setup_ms"] = (conv.started.received_s - t_open) * 1e3
            reader = asyncio.create_task(_read_turn(conv, frames, inband))
            try:
                try:
                    for k, delta in enumerate(spec.deltas):
                        if k and st.delta_interval_s > 0:
                            await asyncio.sleep(st.delta_interval_s)
                        t = time.perf_counter()
                        await conv.send_text(delta)
                        if k == mark_idx:
                            ref_s = t
                    flush_s = time.perf_counter()
                    await conv.flush()
                    await conv.end()
                except (VoxpoolError, ConversationClosed):
                    pass  # the reader raises the call's status
                done = await reader
            finally:
                if not reader.done():
                    reader.cancel()
                    conv.cancel()
    except VoxpoolError as err:
        rec["status"] = err.code.name
        rec["error"] = err.details
    except TimeoutError:
        rec["status"] = "CLIENT_TIMEOUT"
        rec["error"] = f"turn not finished within {st.turn_timeout_s:g} s"
    except Exception as exc:  # one broken turn must not end a long run: record it and go on
        log.exception("turn %d failed in the client", spec.index)
        rec["status"] = "CLIENT_ERROR"
        rec["error"] = f"{type(exc).__name__}: {exc}"
    rec["end_s"] = time.perf_counter() - t0
    if inband:
        rec["inband_errors"] = inband
        if rec["status"] == "OK":
            rec["status"] = f"inband:{inband[0]}"
    if done is not None:
        rec["server"] = {"ttfa_ms": done.ttfa_ms, "audio_ms": done.audio_ms, "underruns": done.underruns,
                         "late_chunks": done.late_chunks, "chunks": done.chunks, "ttfs_ms": done.ttfs_ms}
    ref = min(ref_s, flush_s) if not math.isnan(ref_s) else flush_s
    rec.update(turn_metrics(TurnTimeline(ref, flush_s, frames), burst_gap_s=st.burst_gap_s,
                            prebuffers_ms=st.prebuffers_ms, tolerance_s=st.tolerance_s))
    if st.keep_frames:
        rec["frames_ms"] = [[round((t - t_open) * 1e3, 3), round(d * 1e3, 3), int(s)] for t, d, s in frames]
        rec["ref_ms"] = round((ref - t_open) * 1e3, 3) if not math.isnan(ref) else None
    return rec


async def run_open_loop(client: VoxpoolClient, items: Sequence[TextItem], rate_per_s: float, duration_s: float,
                        st: Settings, process: str = "poisson", burstiness: float = 1.0
                        ) -> tuple[list[dict[str, Any]], float]:
    """Start one turn per scheduled arrival, never waiting for earlier turns; returns (records, wall_s)."""
    arrivals = arrival_times(rate_per_s, duration_s, st.seed, process, burstiness)
    texts = pick_texts(items, len(arrivals), st.seed, rate_per_s)
    specs = [make_spec(st, i, item, rate_per_s, i, scheduled_s=a) for i, (a, item) in enumerate(zip(arrivals, texts))]
    t0 = time.perf_counter() + 0.01
    tasks = []
    for spec in specs:
        delay = t0 + (spec.scheduled_s or 0.0) - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(run_turn(client, spec, st, t0)))
    records = list(await asyncio.gather(*tasks))
    wall_s = max([duration_s] + [r["end_s"] for r in records])
    return records, wall_s


async def run_closed_loop(client: VoxpoolClient, items: Sequence[TextItem], concurrency: int, duration_s: float,
                          st: Settings) -> tuple[list[dict[str, Any]], float]:
    """`concurrency` streams, each starting its next turn when the previous one ends, until duration_s passed."""
    t0 = time.perf_counter()

    async def worker(w: int) -> list[dict[str, Any]]:
        out = []
        k = 0
        while time.perf_counter() - t0 < duration_s:
            item = pick_texts(items, 1, st.seed, concurrency, w, k)[0]
            spec = make_spec(st, k, item, concurrency, w, k, worker=w)
            out.append(await run_turn(client, spec, st, t0))
            k += 1
        return out

    per_worker = await asyncio.gather(*(worker(w) for w in range(concurrency)))
    records = [r for recs in per_worker for r in recs]
    wall_s = time.perf_counter() - t0
    return records, wall_s


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def _floats(text: str, what: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"{what}: expected comma-separated numbers, got {text!r}") from None
    if any(v <= 0 for v in vals):
        raise BenchError(f"{what}: every value must be > 0, got {text!r}")
    return vals


def _ints(text: str, what: str) -> list[int]:
    vals = _floats(text, what)
    if any(v != int(v) for v in vals):
        raise BenchError(f"{what}: expected whole numbers, got {text!r}")
    return [int(v) for v in vals]


def parse_targets(text: str) -> dict[str, str]:
    """'engine=localhost:50051,naive=localhost:50052' (or one bare 'host:port', named 'server') → {name: target}."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, target = part.partition("=")
        if not sep:
            name, target = ("server" if not out else f"server{len(out) + 1}"), part
        name, target = name.strip(), target.strip()
        if not name or not target:
            raise BenchError(f"--targets: bad entry {part!r}; use NAME=HOST:PORT")
        if name in out:
            raise BenchError(f"--targets: name {name!r} given twice")
        out[name] = target
    if not out:
        raise BenchError("--targets: no target given")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.grpc_load",
        description="Load generator for voxpool: open-loop request rates (Poisson or even arrivals), closed-loop "
                    "concurrency, goodput search; each turn is one Converse call. Prints a markdown table; "
                    "--out writes every raw measurement as JSON, --plot PNG charts.",
    )
    g = p.add_argument_group("targets")
    g.add_argument("--targets", default="localhost:50051",
                   help="NAME=HOST:PORT,... run the same schedule against each (first = baseline of the ratios)")
    g.add_argument("--tls", action="store_true", help="TLS with the system roots")
    g.add_argument("--token", default=None, help="bearer token sent as `authorization` metadata")
    g.add_argument("--wait-ready-s", type=float, default=10.0, help="how long to wait for each target to be ready")
    g = p.add_argument_group("load")
    g.add_argument("--rates", default=None, help="open-loop request rates per second, e.g. 0.5,1,2,4 "
                                                  "(default when no --concurrency / --goodput: 0.5,1,2,4)")
    g.add_argument("--concurrency", default=None, help="closed-loop stream counts, e.g. 1,4,8")
    g.add_argument("--duration-s", type=float, default=10.0, help="duration of each rate / concurrency level")
    g.add_argument("--arrivals", choices=ARRIVALS, default="poisson")
    g.add_argument("--burstiness", type=float, default=1.0, help="Gamma shape of the gaps (1 = Poisson, <1 burstier)")
    g.add_argument("--seed", type=int, default=42)
    g.add_argument("--warmup", type=int, default=2, help="unmeasured turns per target before measuring")
    g.add_argument("--turn-timeout-s", type=float, default=120.0)
    g = p.add_argument_group("goodput")
    g.add_argument("--goodput", default=None, metavar="LO:HI", help="bisect the highest passing rate in [LO, HI]")
    g.add_argument("--goodput-steps", type=int, default=4)
    g.add_argument("--ttfa-target-ms", type=float, default=300.0, help="goodput: p90 TTFA at most this")
    g.add_argument("--on-time-target", type=float, default=0.99, help="goodput: fraction of turns fully on time")
    g = p.add_argument_group("text")
    g.add_argument("--texts", default=None, help="TSV id<TAB>class<TAB>text (default: packaged callcenter_zh.tsv)")
    g.add_argument("--text-class", default="mixed", help="short | medium | long | numbers | a,b | mixed")
    g.add_argument("--stream-text", action="store_true", help="send the text in small deltas, as an LLM would")
    g.add_argument("--delta-chars", default="2:4", metavar="MIN:MAX", help="characters per delta (--stream-text)")
    g.add_argument("--delta-interval-ms", type=float, default=40.0, help="pause between deltas (--stream-text)")
    g = p.add_argument_group("audio")
    g.add_argument("--pacing", choices=["REALTIME", "ASAP", "realtime", "asap"], default="REALTIME")
    g.add_argument("--lead-ms", type=int, default=None, help="REALTIME lead (server default 60)")
    g.add_argument("--word-timestamps", action="store_true",
                   help="ask for word timestamps (the server holds a word's audio until the word is timed)")
    g.add_argument("--encoding", choices=["pcmu", "pcma", "l16", "PCMU", "PCMA", "L16"], default="pcmu")
    g.add_argument("--sample-rate-hz", type=int, default=8000)
    g.add_argument("--frame-ms", type=int, default=20)
    g.add_argument("--frames-per-event", type=int, default=1,
                   help="audio frames per server event (REALTIME: needs --lead-ms of at least this × frame-ms)")
    g.add_argument("--voice", default="")
    g = p.add_argument_group("metrics and output")
    g.add_argument("--prebuffer-ms", default="0,100,200", help="client pre-buffers for the stall simulation")
    g.add_argument("--burst-gap-ms", type=float, default=None,
                   help="frames closer than this form one chunk (default: frame_ms/4 under REALTIME; "
                        "under ASAP every frame is a chunk)")
    g.add_argument("--late-tolerance-ms", type=float, default=0.0, help="slack in the on-time rule (default 0)")
    g.add_argument("--out", default=None, help="write the JSON report (every raw measurement) here")
    g.add_argument("--no-frames", action="store_true", help="leave the per-frame arrival times out of the JSON")
    g.add_argument("--plot", default=None, metavar="DIR", help="write PNG plots here (needs matplotlib)")
    return p


def settings_from_args(args: argparse.Namespace) -> Settings:
    pacing = args.pacing.upper()
    lo, sep, hi = args.delta_chars.partition(":")
    try:
        delta_chars = (int(lo), int(hi if sep else lo))
    except ValueError:
        raise BenchError(f"--delta-chars: expected MIN:MAX, got {args.delta_chars!r}") from None
    if args.burst_gap_ms is not None:
        burst_gap_s: float | None = args.burst_gap_ms / 1e3
    else:
        burst_gap_s = args.frame_ms / 4e3 if pacing == "REALTIME" else None
    try:
        prebuffers = tuple(int(x) for x in args.prebuffer_ms.split(",") if x.strip())
    except ValueError:
        raise BenchError(f"--prebuffer-ms: expected integers, got {args.prebuffer_ms!r}") from None
    try:
        config = session_config(args.voice, args.encoding, args.sample_rate_hz, args.frame_ms, pacing,
                                lead_ms=args.lead_ms, seed=args.seed, word_timestamps=args.word_timestamps,
                                frames_per_event=args.frames_per_event)
    except ClientConfigError as exc:
        raise BenchError(str(exc)) from None
    return Settings(config=config, stream_text=args.stream_text, delta_chars=delta_chars,
                    delta_interval_s=args.delta_interval_ms / 1e3, turn_timeout_s=args.turn_timeout_s,
                    burst_gap_s=burst_gap_s, prebuffers_ms=prebuffers, tolerance_s=args.late_tolerance_ms / 1e3,
                    keep_frames=not args.no_frames, seed=args.seed)


def _run_entry(target: str, mode: str, duration_s: float, records: list, wall_s: float, st: Settings,
               **load: Any) -> dict[str, Any]:
    return {"target": target, "mode": mode, **load, "duration_s": duration_s,
            "summary": summarize(records, wall_s=wall_s, prebuffers_ms=st.prebuffers_ms), "turns": records}


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Run everything the arguments ask for against every target; returns the report (see `--out`)."""
    targets = parse_targets(args.targets)
    st = settings_from_args(args)
    rates = _floats(args.rates, "--rates") if args.rates else []
    concurrency = _ints(args.concurrency, "--concurrency") if args.concurrency else []
    goodput_bounds = None
    if args.goodput:
        lo, _, hi = args.goodput.partition(":")
        try:
            goodput_bounds = (float(lo), float(hi))
        except ValueError:
            raise BenchError(f"--goodput: expected LO:HI, got {args.goodput!r}") from None
        if not 0 < goodput_bounds[0] < goodput_bounds[1]:
            raise BenchError(f"--goodput: need 0 < LO < HI, got {args.goodput!r}")
    if not (rates or concurrency or goodput_bounds):
        rates = [0.5, 1.0, 2.0, 4.0]
    items = select_texts(load_texts(args.texts), args.text_class)

    report: dict[str, Any] = {
        "schema": SCHEMA,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "argv": list(getattr(args, "argv", [])),
        "targets": targets,
        "settings": {
            "pacing": args.pacing.upper(), "encoding": args.encoding.upper(), "sample_rate_hz": args.sample_rate_hz,
            "frame_ms": args.frame_ms, "lead_ms": args.lead_ms, "voice": args.voice, "seed": args.seed,
            "arrivals": args.arrivals, "burstiness": args.burstiness, "duration_s": args.duration_s,
            "text_class": args.text_class, "texts": args.texts or "bench/texts/callcenter_zh.tsv",
            "stream_text": st.stream_text, "delta_chars": list(st.delta_chars),
            "delta_interval_ms": args.delta_interval_ms, "prebuffers_ms": list(st.prebuffers_ms),
            "burst_gap_ms": None if st.burst_gap_s is None else st.burst_gap_s * 1e3,
            "late_tolerance_ms": args.late_tolerance_ms, "ttfa_target_ms": args.ttfa_target_ms,
            "on_time_target": args.on_time_target, "warmup": args.warmup, "rates": rates,
            "concurrency": concurrency, "goodput": list(goodput_bounds) if goodput_bounds else None,
            "goodput_steps": args.goodput_steps,
        },
        "runs": [],
        "goodput": {},
    }
    for name, target in targets.items():
        # the benchmark measures the server: no client failover (it would ask for word timestamps, which hold audio)
        client = VoxpoolClient(target, tls=args.tls or None, token=args.token, failover=False)
        try:
            try:
                await client.wait_ready(args.wait_ready_s)
            except VoxpoolError as exc:
                raise BenchError(f"target {name} ({target}): {exc.details}; start one with `make serve` or "
                                 f"`voxpool serve --port PORT`") from None
            for k in range(max(0, args.warmup)):
                await run_turn(client, make_spec(st, k, items[k % len(items)], 999, k), st, time.perf_counter())
            for rate in rates:
                log.info("%s: open loop at %g/s for %g s", name, rate, args.duration_s)
                records, wall_s = await run_open_loop(client, items, rate, args.duration_s, st, args.arrivals,
                                                      args.burstiness)
                report["runs"].append(_run_entry(name, "open", args.duration_s, records, wall_s, st, rate_per_s=rate))
            for n in concurrency:
                log.info("%s: closed loop with %d streams for %g s", name, n, args.duration_s)
                records, wall_s = await run_closed_loop(client, items, n, args.duration_s, st)
                report["runs"].append(_run_entry(name, "closed", args.duration_s, records, wall_s, st, concurrency=n))
            if goodput_bounds:
                async def passes(rate: float) -> bool:
                    log.info("%s: goodput probe at %g/s", name, rate)
                    recs, wall = await run_open_loop(client, items, rate, args.duration_s, st, args.arrivals,
                                                     args.burstiness)
                    entry = _run_entry(name, "goodput_probe", args.duration_s, recs, wall, st, rate_per_s=rate)
                    ok = meets_goodput(entry["summary"], args.ttfa_target_ms, args.on_time_target)
                    entry["passes"] = ok
                    report["runs"].append(entry)
                    return ok

                res = await bisect_goodput(passes, goodput_bounds[0], goodput_bounds[1], args.goodput_steps)
                report["goodput"][name] = {"goodput_per_s": res.goodput_per_s, "bracket": res.bracket,
                                           "probes": [list(p) for p in res.probes]}
        finally:
            await client.close()
    report["comparison"] = comparison(report["runs"], list(targets)) if len(targets) > 1 else []
    return report


def bench_main(argv: Sequence[str]) -> int:
    """Entry point of `python -m bench.grpc_load ARGS...`; returns the exit status (2 on bad arguments or no server)."""
    argv = list(argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        report = asyncio.run(bench(args))
    except (BenchError, WorkloadError, MetricsError, DeltaError) as exc:
        print(f"python -m bench.grpc_load: {exc}", file=sys.stderr)
        return 2
    print(render(report))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(json_safe(report), f, ensure_ascii=False)
        print(f"wrote {args.out}")
    if args.plot:
        from bench.plot import PlotError, plot_report

        try:
            for path in plot_report(report, args.plot):
                print(f"wrote {path}")
        except PlotError as exc:
            print(f"python -m bench.grpc_load: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(bench_main(sys.argv[1:]))
