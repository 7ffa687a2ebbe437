"""Client-side streaming metrics of the benchmark: chunks, on-time rule, stall seconds, percentiles, goodput search."""

# Definitions (DESIGN.md §6), all on the client's monotonic clock:
# * Only speech frames make chunks: frames flagged `silence` (pre-roll, underrun fill) are left out of the
#   chunks and of the audio durations C_k, so an underrun under REALTIME pacing shows up as a late chunk.
# * Chunks. ASAP: every frame is a chunk. REALTIME: the server releases frames one per frame period, so
#   a chunk is a burst: consecutive speech frames whose arrivals lie within `burst_gap_s` of the previous
#   frame form one chunk (at the start of a turn the lead's worth of frames arrives as one burst).
# * On time: with t1 the arrival of the first chunk and C_k the durations of the chunks before chunk i,
#   chunk i is on time iff t_i ≤ t1 + ΣC_k (+ an optional tolerance; default 0). The first chunk is on time.
# * Stall seconds for a pre-buffer P: a player starts playing P after the first chunk arrives and plays at
#   real time; whenever the next chunk has not arrived it waits for it (no re-buffering). The stall is the
#   total wait. P = 0 gives a stall > 0 exactly when some chunk is late.
# * TTFA: first speech frame − the moment the text became synthesizable (the send of the delta holding the
#   first sentence/clause mark, or the flush, whichever came first). FCL = TTFA; LCL = last speech frame −
#   the same reference; RTF = LCL / speech audio duration (EITTS); with REALTIME pacing RTF ≈ 1 by design.
# * TTFS (time to first speech): TTFA plus the server's media time from the first audio frame to the first sample of
#   speech (turn_done.ttfs_ms − turn_done.ttfa_ms, exact on the media clock): when the caller starts to hear speech.
# * Fill frames: silence frames after a turn's first speech frame (REALTIME underrun fill). The chunk rule
#   models a player with a buffer, which the REALTIME lead may keep fed across a short fill; a gateway that
#   writes frames straight to RTP plays every fill frame, so they are counted apart (`fill_frames`).

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PERCENTILES = (50, 90, 95, 99)


class MetricsError(ValueError):
    """Inputs that do not describe a timeline (unsorted arrivals, negative durations, bad bounds)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """A run of speech frames released together: `t_s` arrival of its first frame, `duration_s` of its audio."""

    t_s: float
    duration_s: float


def group_chunks(frames: Sequence[tuple[float, float]], burst_gap_s: float | None) -> list[Chunk]:
    """Speech frames [(arrival_s, duration_s), ...] in arrival order → chunks.

    burst_gap_s None: every frame is a chunk (ASAP). Otherwise a frame arriving within burst_gap_s of the
    previous frame joins the previous frame's chunk (REALTIME bursts).
    """
    chunks: list[Chunk] = []
    start_t: float | None = None
    prev_t = -math.inf
    dur = 0.0
    for t, d in frames:
        if d < 0:
            raise MetricsError(f"negative frame duration {d}")
        if t < prev_t:
            raise MetricsError("frame arrivals must be in non-decreasing order")
        if start_t is not None and burst_gap_s is not None and t - prev_t <= burst_gap_s:
            dur += d
        else:
            if start_t is not None:
                chunks.append(Chunk(start_t, dur))
            start_t, dur = t, d
        prev_t = t
    if start_t is not None:
        chunks.append(Chunk(start_t, dur))
    return chunks


def on_time_flags(chunks: Sequence[Chunk], tolerance_s: float = 0.0) -> list[bool]:
    """Per chunk: t_i ≤ t1 + Σ_{k<i} C_k + tolerance_s (the first chunk is on time by definition)."""
    if not chunks:
        return []
    t1 = chunks[0].t_s
    before = 0.0
    flags = []
    for c in chunks:
        flags.append(c.t_s <= t1 + before + tolerance_s + 1e-12)
        before += c.duration_s
    return flags


def stall_seconds(chunks: Sequence[Chunk], prebuffer_s: float) -> float:
    """Total time a real-time player that starts `prebuffer_s` after the first chunk waits for audio."""
    if prebuffer_s < 0:
        raise MetricsError(f"pre-buffer must be ≥ 0, got {prebuffer_s}")
    if not chunks:
        return 0.0
    clock = chunks[0].t_s + prebuffer_s  # when the player needs the next chunk
    stall = 0.0
    for c in chunks:
        if c.t_s > clock:
            stall += c.t_s - clock
            clock = c.t_s
        clock += c.duration_s
    return stall


def percentile(values: Sequence[float], q: float) -> float:
    """q-th percentile (0-100) with linear interpolation between closest ranks; NaN for no values."""
    if not 0 <= q <= 100:
        raise MetricsError(f"percentile must be within 0-100, got {q}")
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def describe(values: Iterable[float]) -> dict[str, float]:
    """n, mean, min, p50, p90, p95, p99, max of the finite values (NaN where there are none)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    out: dict[str, float] = {"n": len(xs), "mean": sum(xs) / len(xs) if xs else math.nan,
                             "min": min(xs) if xs else math.nan}
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(xs, q)
    out["max"] = max(xs) if xs else math.nan
    return out


@dataclass
class TurnTimeline:
    """What the client saw of one turn, in seconds on one monotonic clock.

    frames: [(arrival_s, duration_s, silence), ...] in arrival order, every frame of the turn.
    """

    ref_s: float  # the moment the text became synthesizable
    flush_s: float  # the flush was sent
    frames: list[tuple[float, float, bool]] = field(default_factory=list)


def turn_metrics(tl: TurnTimeline, *, burst_gap_s: float | None, prebuffers_ms: Sequence[int] = (0, 100, 200),
                 tolerance_s: float = 0.0) -> dict[str, Any]:
    """The per-turn client metrics (see the module docstring). Times in ms, audio in s."""
    speech = [(t, d) for t, d, silent in tl.frames if not silent]
    chunks = group_chunks(speech, burst_gap_s)
    flags = on_time_flags(chunks, tolerance_s)
    audio_s = sum(c.duration_s for c in chunks)
    first_speech = next((i for i, f in enumerate(tl.frames) if not f[2]), len(tl.frames))
    out: dict[str, Any] = {
        "frames": len(tl.frames),
        "silence_frames": sum(1 for f in tl.frames if f[2]),
        "fill_frames": sum(1 for f in tl.frames[first_speech:] if f[2]),
        "audio_s": audio_s,
        "chunks": len(chunks),
        "chunks_on_time": sum(flags),
        "on_time_fraction": (sum(flags) / len(flags)) if flags else math.nan,
        "all_on_time": bool(flags) and all(flags),
    }
    if chunks:
        first, last = chunks[0].t_s, speech[-1][0]
        out["ttfa_ms"] = (first - tl.ref_s) * 1e3
        out["ttfa_flush_ms"] = (first - tl.flush_s) * 1e3
        out["fcl_ms"] = out["ttfa_ms"]
        out["lcl_ms"] = (last - tl.ref_s) * 1e3
        out["rtf"] = (last - tl.ref_s) / audio_s if audio_s > 0 else math.nan
        worst, before = 0.0, 0.0
        for c in chunks:
            worst = max(worst, c.t_s - (first + before))
            before += c.duration_s
        out["max_lateness_ms"] = worst * 1e3
    else:
        out.update(ttfa_ms=math.nan, ttfa_flush_ms=math.nan, fcl_ms=math.nan, lcl_ms=math.nan, rtf=math.nan,
                   max_lateness_ms=math.nan)
    out["stall_s"] = {str(p): stall_seconds(chunks, p / 1e3) for p in prebuffers_ms}
    return out


def summarize(turns: Sequence[Mapping[str, Any]], *, wall_s: float, prebuffers_ms: Sequence[int] = (0, 100, 200)
              ) -> dict[str, Any]:
    """Aggregate per-turn records (each with "status": "OK", a gRPC status name or "inband:CODE", and, when
    OK, the `turn_metrics` keys, "setup_ms", "lag_ms", "server").

    Turn-level fractions (all_on_time_fraction) count every started turn, failed ones as not on time;
    latency percentiles use the turns that produced audio.
    """
    n = len(turns)
    ok = [t for t in turns if t.get("status") == "OK" and t.get("chunks", 0) > 0]
    errors = Counter(t.get("status", "UNKNOWN") for t in turns if t.get("status") != "OK")
    errors.update("no_audio" for t in turns if t.get("status") == "OK" and t.get("chunks", 0) == 0)
    audio_s = sum(t["audio_s"] for t in ok)
    out: dict[str, Any] = {
        "turns": n,
        "ok": len(ok),
        "errors": dict(sorted(errors.items())),
        "wall_s": wall_s,
        "throughput_turns_per_s": len(ok) / wall_s if wall_s > 0 else math.nan,
        "audio_s": audio_s,
        "rtfx": audio_s / wall_s if wall_s > 0 else math.nan,
        "ttfa_ms": describe(t["ttfa_ms"] for t in ok),
        "ttfa_flush_ms": describe(t["ttfa_flush_ms"] for t in ok),
        "lcl_ms": describe(t["lcl_ms"] for t in ok),
        "rtf": describe(t["rtf"] for t in ok),
        "setup_ms": describe(t["setup_ms"] for t in turns if t.get("setup_ms") is not None),
        "server_ttfa_ms": describe(t["server"]["ttfa_ms"] for t in ok if t.get("server")),
        "ttfs_ms": describe(t["ttfa_ms"] + t["server"]["ttfs_ms"] - t["server"]["ttfa_ms"]
                            for t in ok if t.get("server", {}).get("ttfs_ms")),
        "server_ttfs_ms": describe(t["server"]["ttfs_ms"] for t in ok if t.get("server", {}).get("ttfs_ms")),
        "chunk_on_time_fraction": (sum(t["on_time_fraction"] for t in ok) / len(ok)) if ok else math.nan,
        "all_on_time_fraction": (sum(1 for t in ok if t["all_on_time"]) / n) if n else math.nan,
        "turns_with_fill_fraction": (sum(1 for t in ok if t.get("fill_frames", 0) > 0) / len(ok)) if ok else math.nan,
        "stall_s": {},
        "schedule_lag_ms": describe(t["lag_ms"] for t in turns if t.get("lag_ms") is not None),
    }
    for p in prebuffers_ms:
        key = str(p)
        vals = [t["stall_s"][key] for t in ok]
        out["stall_s"][key] = {
            "mean": sum(vals) / len(vals) if vals else math.nan,
            "p90": percentile(vals, 90),
            "max": max(vals) if vals else math.nan,
            "turns_stalled_fraction": (sum(1 for v in vals if v > 0) / len(vals)) if vals else math.nan,
        }
    return out


def meets_goodput(summary: Mapping[str, Any], ttfa_target_ms: float, on_time_target: float = 0.99) -> bool:
    """p90 TTFA ≤ target and at least `on_time_target` of the turns fully on time (failed turns count against)."""
    p90 = summary["ttfa_ms"]["p90"]
    frac = summary["all_on_time_fraction"]
    return (math.isfinite(p90) and p90 <= ttfa_target_ms and math.isfinite(frac)
            and frac >= on_time_target - 1e-12)


@dataclass
class GoodputResult:
    """Outcome of the bisection: `goodput_per_s` is the highest passing rate probed (0.0 when LO fails)."""

    goodput_per_s: float
    bracket: str  # "inside", "below_lo" (LO fails), "at_or_above_hi" (HI passes)
    probes: list[tuple[float, bool]]


async def bisect_goodput(passes: Callable[[float], Awaitable[bool]], lo: float, hi: float, steps: int
                         ) -> GoodputResult:
    """Largest rate in [lo, hi] that passes, assuming pass/fail is monotone in the rate.

    Probes lo, then hi, then `steps` midpoints (arithmetic); the answer is within (hi − lo) / 2**steps.
    """
    if not (0 < lo < hi) or steps < 0:
        raise MetricsError(f"goodput search needs 0 < LO < HI and steps ≥ 0 (got {lo}:{hi}, {steps} steps)")
    probes: list[tuple[float, bool]] = []

    async def probe(rate: float) -> bool:
        ok = bool(await passes(rate))
        probes.append((rate, ok))
        return ok

    if not await probe(lo):
        return GoodputResult(0.0, "below_lo", probes)
    if await probe(hi):
        return GoodputResult(hi, "at_or_above_hi", probes)
    good, bad = lo, hi
    for _ in range(steps):
        mid = (good + bad) / 2
        if await probe(mid):
            good = mid
        else:
            bad = mid
    return GoodputResult(good, "inside", probes)
