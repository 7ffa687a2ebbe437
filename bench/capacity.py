"""The capacity run: gRPC calls paced for playback beside the in-process paced engine, one fixed command.

    python -m bench.capacity --json bench-results/capacity.json

For each backend (engine, naive): start `voxpool serve --backend B` on a free port (2 torch threads, calls admitted
above the top level, audio cache off), then closed loop over gRPC at 1, 4, 8, 12, 16, 20, 24, 32 calls (REALTIME,
PCMU 8 kHz, 20 ms frames, mixed texts, `--duration-s` per level; bench.grpc_load's own loop and metrics), reading the
server's CPU seconds and resident memory from /proc around and during every level, and stopping that backend once two
levels in a row failed; stop the server; then the levels reached in process (`python -m bench.engine_load --pacing
realtime`, the same texts, the same release rule and metric code) and the always-busy in-process run at 16 streams,
each in a fresh process. Prints the level table and a summary table (sustainable calls per backend, sustainable calls
÷ always-busy ×RT, engine ÷ naive, paced ÷ always-busy CPU s per audio s, TTFA p90 at the sustainable level, the
host and the commit) and writes JSON with every run's summary and the `server.max_calls` to ship for this host.

Columns: TTFA p50/p90 (ms), chunks on time, turns fully on time, turns with underrun fill, ×RT (audio seconds per
wall second), server CPU seconds per audio second (the load generator's own CPU apart: it shares the 2 cores),
resident memory at the level's peak and per call above the idle server. "Sustainable" is the most calls with
≥ 99 % of chunks on time and ≤ 1 % of turns with fill.

The load generator runs in this process, the server in another: on a 2-core machine they compete; the report
records the machine's load average before and after every level so a busy host can be told from a slow server.
This module only runs subprocesses and reads /proc: it imports neither the engine nor the service.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from bench.grpc_load import build_parser, make_spec, run_closed_loop, run_turn, settings_from_args
from bench.metrics import summarize
from bench.report import json_safe
from bench.workload import load_texts, select_texts
from clients.client import VoxpoolClient

LEVELS = (1, 4, 8, 12, 16, 20, 24, 32)
STOP_AFTER_FAILS = 2  # a backend's search stops after this many failing levels in a row
BUSY_STREAMS = 16  # the always-busy in-process run the paced calls are compared with
RATIO_TARGET = 0.75  # sustainable paced calls ÷ always-busy ×RT
ENGINE_OVER_NAIVE_TARGET = 4.0  # engine ÷ naive sustainable calls
CPU_RATIO_TARGET = 1.2  # paced CPU s per audio s ÷ the always-busy one
BACKENDS = ("engine", "naive")
ON_TIME_TARGET = 0.99  # chunks on time for a level to count as sustainable
FILL_TARGET = 0.01  # at most this share of turns with underrun fill
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def proc_cpu_s(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of a process (all its threads; or one thread) from /proc/PID[/task/TID]/stat."""
    with open(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat", encoding="utf-8") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime (fields 14, 15 of stat)


def thread_cpu_s(pid: int) -> dict[int, tuple[str, float]]:
    """CPU seconds of each thread of a process: {tid: (name, user + system s)} (/proc/PID/task)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8") as f:
                name = f.read().strip()
            out[int(tid)] = (name, proc_cpu_s(pid, int(tid)))
        except OSError:  # the thread ended meanwhile
            continue
    return out


def thread_shares(pid: int, before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                  audio_s: float, top: int = 6) -> list[dict[str, Any]]:
    """The threads that used most CPU between two snapshots, CPU s per audio s each (the main thread runs the
    event loop: gRPC aio, the call handlers, pacing and encoding)."""
    rows = []
    for tid, (name, cpu) in after.items():
        used = cpu - before.get(tid, (name, 0.0))[1]
        rows.append({"tid": tid, "name": name, "main": tid == pid, "cpu_s": used,
                     "cpu_s_per_audio_s": used / audio_s if audio_s > 0 else None})
    rows.sort(key=lambda r: -r["cpu_s"])
    return rows[:top]


def proc_rss_mib(pid: int) -> float:
    """Resident memory of a process in MiB (/proc/PID/statm)."""
    with open(f"/proc/{pid}/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


def load_average() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`voxpool serve --backend B` in a child process, its log in a temp file."""

    def __init__(self, backend: str, threads: int, max_calls: int, extra_env: dict[str, str]):
        self.backend = backend
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix=f"capacity-{backend}-", suffix=".log", delete=False)
        env = {**os.environ, "VOXPOOL__ENGINE__NUM_THREADS": str(threads),
               "VOXPOOL__SERVER__MAX_CALLS": str(max_calls), "VOXPOOL__CACHE__ENABLED": "false", **extra_env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "voxpool_cli", "serve", "--port", str(self.port), "--backend", backend],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


async def _sample_rss(pid: int, peak: list[float], every_s: float = 0.5) -> None:
    while True:
        peak[0] = max(peak[0], proc_rss_mib(pid))
        await asyncio.sleep(every_s)


async def grpc_levels(server: Server, levels: Sequence[int], duration_s: float, bench_args: list[str],
                      ready_timeout_s: float) -> list[dict[str, Any]]:
    """The levels over gRPC against one server, in order, until `search_done`; one row each (summary, CPU, memory,
    load)."""
    st = settings_from_args(build_parser().parse_args(bench_args))
    items = select_texts(load_texts(None), "mixed")
    # the run measures the server: no client failover (it would ask for word timestamps); --word-timestamps asks
    # for them on purpose (the in-process rows never time words)
    client = VoxpoolClient(server.target, failover=False)
    rows = []
    try:
        await client.wait_ready(ready_timeout_s)
        for k in range(2):  # warm-up turns: the engine's first shapes, the channel
            await run_turn(client, make_spec(st, k, items[k % len(items)], 999, k), st, time.perf_counter())
        idle_rss = proc_rss_mib(server.proc.pid)
        for n in levels:
            load0, cpu0, own0 = load_average(), proc_cpu_s(server.proc.pid), time.process_time()
            threads0 = thread_cpu_s(server.proc.pid)
            peak = [proc_rss_mib(server.proc.pid)]
            sampler = asyncio.create_task(_sample_rss(server.proc.pid, peak))
            try:
                records, wall_s = await run_closed_loop(client, items, n, duration_s, st)
            finally:
                sampler.cancel()
            cpu_s, own_s = proc_cpu_s(server.proc.pid) - cpu0, time.process_time() - own0
            s = summarize(records, wall_s=wall_s, prebuffers_ms=st.prebuffers_ms)
            rows.append(_row(server.backend, "grpc", n, s, cpu_s, own_s, peak[0], idle_rss, load0))
            rows[-1]["server_threads"] = thread_shares(server.proc.pid, threads0, thread_cpu_s(server.proc.pid),
                                                       s["audio_s"] or 0.0)
            print(format_rows(rows[-1:], header=False), flush=True)
            if search_done(rows):
                break
    finally:
        await client.close()
    return rows


def _row(backend: str, path: str, calls: int, s: dict[str, Any], server_cpu_s: float | None,
         client_cpu_s: float | None, rss_mib: float | None, idle_rss_mib: float | None, load0: float | None
         ) -> dict[str, Any]:
    audio_s = s["audio_s"] or 0.0
    return {
        "backend": backend, "path": path, "calls": calls, "turns": s["turns"], "errors": s["errors"],
        "ttfa_ms_p50": s["ttfa_ms"]["p50"], "ttfa_ms_p90": s["ttfa_ms"]["p90"],
        "chunks_on_time": s["chunk_on_time_fraction"], "turns_all_on_time": s["all_on_time_fraction"],
        "turns_with_fill": s["turns_with_fill_fraction"], "x_realtime": s["rtfx"], "audio_s": audio_s,
        "wall_s": s["wall_s"],
        "cpu_s_per_audio_s": (server_cpu_s / audio_s) if server_cpu_s is not None and audio_s > 0 else None,
        "client_cpu_s_per_audio_s": (client_cpu_s / audio_s) if client_cpu_s is not None and audio_s > 0 else None,
        "rss_mib": rss_mib,
        "rss_mib_per_call": ((rss_mib - idle_rss_mib) / calls) if rss_mib is not None and idle_rss_mib is not None
        else None,
        "load_before": load0, "load_after": load_average(),
        "summary": s,
    }


def inprocess_levels(backends: Sequence[str], levels: Sequence[int], duration_s: float, threads: int,
                     out_dir: Path) -> list[dict[str, Any]]:
    """`python -m bench.engine_load --pacing realtime` in a fresh process; its rows in this table's shape."""
    out = out_dir / "capacity-inprocess.json"
    cmd = [sys.executable, "-m", "bench.engine_load", "--pacing", "realtime", "--backends", ",".join(backends),
           "--concurrency", ",".join(map(str, levels)), "--duration-s", str(duration_s), "--threads", str(threads),
           "--out", str(out)]
    print("$ " + " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)
    report = json.loads(out.read_text(encoding="utf-8"))
    rows = []
    for r in report["results"]:
        rows.append(_row(r["backend"], "in-process", r["concurrency"], r["summary"], r.get("cpu_s"), None,
                         r.get("rss_mib"), r.get("idle_rss_mib"), r.get("load_before")))
    return rows


def always_busy(threads: int, out_dir: Path, streams: int = BUSY_STREAMS) -> dict[str, Any]:
    """`python -m bench.engine_load` always busy at `streams` streams (2 requests each) in a fresh process: its row."""
    out = out_dir / "capacity-always-busy.json"
    cmd = [sys.executable, "-m", "bench.engine_load", "--voice", "baker-zh", "--backends", "engine", "--concurrency",
           str(streams), "--requests-per-stream", "2", "--threads", str(threads), "--out", str(out)]
    print("$ " + " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)
    return busy_row(json.loads(out.read_text(encoding="utf-8"))["results"][0], "python -m " + " ".join(cmd[2:]))


def busy_row(result: dict[str, Any], command: str) -> dict[str, Any]:
    """The figures of one always-busy `bench.engine_load` result row that the summary compares against."""
    return {"streams": result["concurrency"], "x_realtime": result["x_realtime"],
            "cpu_s_per_audio_s": result["cpu_s_per_audio_s"], "chunks_on_time": result["chunks_on_time"],
            "ttfa_ms_p90": result["ttfa_ms_p90"], "command": command}


def level_ok(row: dict[str, Any]) -> bool:
    """A level is sustainable: ≥ 99 % of chunks on time, ≤ 1 % of turns with fill, no errors."""
    return ((row["chunks_on_time"] or 0) >= ON_TIME_TARGET - 1e-12 and row["turns_with_fill"] is not None
            and row["turns_with_fill"] <= FILL_TARGET + 1e-12 and not row["errors"])


def sustainable(rows: Sequence[dict[str, Any]]) -> int:
    """Most calls of a level that kept ≥ 99 % of chunks on time and ≤ 1 % of turns with fill (0: none did)."""
    return max((r["calls"] for r in rows if level_ok(r)), default=0)


def search_done(rows: Sequence[dict[str, Any]], stop_after: int = STOP_AFTER_FAILS) -> bool:
    """The rows so far (ascending levels of one backend) end in `stop_after` failing levels: higher ones would fail
    too, so the search stops there."""
    return len(rows) >= stop_after and not any(level_ok(r) for r in rows[-stop_after:])


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def capacity_summary(rows: Sequence[dict[str, Any]], busy: dict[str, Any] | None) -> dict[str, Any]:
    """The figures that size a pod, from the gRPC rows and the always-busy run: per backend the sustainable calls, the
    paced CPU s per audio s and TTFA p90 at that level; sustainable ÷ always-busy ×RT, engine ÷ naive, paced ÷
    always-busy CPU s per audio s. A ratio is None where a side is missing or zero."""
    grpc = [r for r in rows if r["path"] == "grpc"]
    per_backend: dict[str, Any] = {}
    for backend in dict.fromkeys(r["backend"] for r in grpc):
        mine = [r for r in grpc if r["backend"] == backend]
        n = sustainable(mine)
        at = next((r for r in mine if r["calls"] == n), None)
        per_backend[backend] = {"sustainable_calls": n, "levels_run": [r["calls"] for r in mine],
                                "ttfa_ms_p90": at["ttfa_ms_p90"] if at else None,
                                "cpu_s_per_audio_s": at["cpu_s_per_audio_s"] if at else None}
    engine = per_backend.get("engine", {})
    naive = per_backend.get("naive", {})
    busy_xrt = busy["x_realtime"] if busy else None
    busy_cpu = busy["cpu_s_per_audio_s"] if busy else None
    return {
        "backends": per_backend,
        "always_busy_x_realtime": busy_xrt, "always_busy_cpu_s_per_audio_s": busy_cpu,
        "calls_over_always_busy_x_realtime": _ratio(engine.get("sustainable_calls"), busy_xrt),
        "engine_over_naive_calls": _ratio(engine.get("sustainable_calls"), naive.get("sustainable_calls")),
        "paced_over_always_busy_cpu": _ratio(engine.get("cpu_s_per_audio_s"), busy_cpu),
        "targets": {"calls_over_always_busy_x_realtime": RATIO_TARGET, "engine_over_naive_calls":
                    ENGINE_OVER_NAIVE_TARGET, "paced_over_always_busy_cpu_max": CPU_RATIO_TARGET},
    }


def host_info() -> dict[str, Any]:
    """CPU model, the SIMD flags that pick the fast paths, logical cores, and the commit measured."""
    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, check=False).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    return {"cpu_model": model, "cores": os.cpu_count(), "commit": commit,
            "flags": [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]}


def format_summary(summary: dict[str, Any], host: dict[str, Any]) -> str:
    """The short markdown table of the sizing figures, each row with its target, then the host line."""
    b = summary["backends"]
    lines = ["| figure | value | target |", "|---|---|---|"]
    for backend, s in b.items():
        lines.append(f"| {backend}: sustainable paced calls over gRPC (TTFA p90 ms there; CPU s / audio s) "
                     f"| {s['sustainable_calls']} ({_cell(s['ttfa_ms_p90'])}; {_cell(s['cpu_s_per_audio_s'], 1, 3)}) "
                     f"| TTFA p90 ≤ 300 |")
    lines += [
        f"| always busy in process, {BUSY_STREAMS} streams: ×RT (CPU s / audio s) "
        f"| {_cell(summary['always_busy_x_realtime'], 1, 1)} ({_cell(summary['always_busy_cpu_s_per_audio_s'], 1, 3)}) | |",
        f"| sustainable engine calls ÷ always-busy ×RT | {_cell(summary['calls_over_always_busy_x_realtime'], 1, 2)} "
        f"| ≥ {RATIO_TARGET} |",
        f"| engine ÷ naive sustainable calls | {_cell(summary['engine_over_naive_calls'], 1, 1)} "
        f"| ≥ {ENGINE_OVER_NAIVE_TARGET:g} |",
        f"| paced ÷ always-busy CPU s per audio s | {_cell(summary['paced_over_always_busy_cpu'], 1, 2)} "
        f"| ≤ {CPU_RATIO_TARGET} |",
        "",
        f"host: {host['cpu_model']}, {host['cores']} logical cores, flags {' '.join(host['flags']) or 'none of avx2/avx512'}"
        f"; commit {host['commit']}",
    ]
    return "\n".join(lines)


def _cell(value: Any, scale: float = 1.0, digits: int = 0, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return f"{value * scale:.{digits}f}{suffix}"


def format_rows(rows: Sequence[dict[str, Any]], header: bool = True) -> str:
    """Markdown table of the rows."""
    lines = []
    if header:
        lines += ["| backend | path | calls | TTFA p50 / p90 ms | chunks on time | turns on time | turns with fill "
                  "| ×RT | server CPU s / audio s | client CPU s / audio s | RSS MiB | MiB / call | load |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['path']} | {r['calls']} | {_cell(r['ttfa_ms_p50'])} / {_cell(r['ttfa_ms_p90'])} "
            f"| {_cell(r['chunks_on_time'], 100, 1, ' %')} | {_cell(r['turns_all_on_time'], 100, 0, ' %')} "
            f"| {_cell(r['turns_with_fill'], 100, 0, ' %')} | {_cell(r['x_realtime'], 1, 1)} "
            f"| {_cell(r['cpu_s_per_audio_s'], 1, 3)} | {_cell(r['client_cpu_s_per_audio_s'], 1, 3)} "
            f"| {_cell(r['rss_mib'])} | {_cell(r['rss_mib_per_call'], 1, 1)} "
            f"| {_cell(r['load_before'], 1, 1)}→{_cell(r['load_after'], 1, 1)} |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__.splitlines()[0])
    p.add_argument("--levels", default=",".join(map(str, LEVELS)), help="closed-loop call counts")
    p.add_argument("--backends", default=",".join(BACKENDS), help="server backends (engine, naive)")
    p.add_argument("--duration-s", type=float, default=30.0, help="seconds per level")
    p.add_argument("--threads", type=int, default=2, help="torch threads of the engine")
    p.add_argument("--no-inprocess", action="store_true", help="skip the in-process paced run")
    p.add_argument("--no-always-busy", action="store_true", help="skip the in-process always-busy run")
    p.add_argument("--ready-timeout-s", type=float, default=300.0, help="how long a server may take to start")
    p.add_argument("--word-timestamps", action="store_true", help="gRPC calls ask for word timestamps (off by default; the in-process rows never time words)")
    p.add_argument("--server-env", default="", help="extra server environment, e.g. OMP_WAIT_POLICY=PASSIVE,A=B")
    p.add_argument("--json", type=Path, default=Path("bench-results/capacity.json"), help="write the report here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    levels = [int(x) for x in args.levels.split(",") if x]
    backends = [b for b in args.backends.split(",") if b]
    extra_env = dict(kv.split("=", 1) for kv in args.server_env.split(",") if kv)
    bench_args = ["--pacing", "REALTIME", "--encoding", "pcmu", "--sample-rate-hz", "8000", "--frame-ms", "20",
                  "--text-class", "mixed", "--turn-timeout-s", str(max(60.0, 4 * args.duration_s))]
    if args.word_timestamps:
        bench_args.append("--word-timestamps")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows: list[dict[str, Any]] = []
    print(format_rows([]), flush=True)
    for backend in backends:
        server = Server(backend, args.threads, max(64, max(levels)), extra_env)
        try:
            rows += asyncio.run(grpc_levels(server, levels, args.duration_s, bench_args, args.ready_timeout_s))
        finally:
            server.stop()
    if not args.no_inprocess:
        reached = max((r["calls"] for r in rows), default=max(levels))
        rows += inprocess_levels(backends, [n for n in levels if n <= reached], args.duration_s, args.threads,
                                 args.json.parent)
    busy = None if args.no_always_busy else always_busy(args.threads, args.json.parent)
    host = host_info()
    summary = capacity_summary(rows, busy)
    best = {f"{r['backend']}/{r['path']}": 0 for r in rows}
    for key in best:
        backend, path = key.split("/")
        best[key] = sustainable([r for r in rows if r["backend"] == backend and r["path"] == path])
    print()
    print(format_rows(rows))
    print()
    for r in rows:
        if r.get("server_threads"):
            shares = ", ".join(f"{'main' if t['main'] else t['name']}:{_cell(t['cpu_s_per_audio_s'], 1, 3)}"
                               for t in r["server_threads"])
            print(f"{r['backend']} grpc {r['calls']} calls, server CPU s / audio s by thread: {shares}")
    print()
    for key, n in best.items():
        print(f"sustainable ({key}): {n} calls (≥ {ON_TIME_TARGET:.0%} chunks on time, ≤ {FILL_TARGET:.0%} turns with fill)")
    print()
    print(format_summary(summary, host))
    ship = summary["backends"].get("engine", {}).get("sustainable_calls")
    if ship:
        print(f"ship for this host ({args.threads} torch threads): server.max_calls = engine.max_slots = {ship} "
              f"(VOXPOOL__SERVER__MAX_CALLS={ship} VOXPOOL__ENGINE__MAX_SLOTS={ship})")
    elif ship == 0:
        print("ship for this host: no level was sustainable, so this run sizes nothing (measure lower levels)")
    report = {"command": " ".join(["python -m bench.capacity", *(argv if argv is not None else sys.argv[1:])]),
              "started_utc": started, "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "cpu_count": os.cpu_count(), "levels": levels, "duration_s": args.duration_s, "server_env": extra_env,
              "host": host, "threads": args.threads, "always_busy": busy, "summary": summary,
              "sustainable_calls": {b: s["sustainable_calls"] for b, s in summary["backends"].items()},
              "sustainable_calls_by_path": best, "ship_max_calls": ship, "rows": rows}
    args.json.write_text(json.dumps(json_safe(report), indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
