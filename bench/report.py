"""Reporting of `python -m bench.grpc_load`: the markdown tables, the side-by-side comparison of targets, strict JSON."""

from __future__ import annotations

import math
from typing import Any, Sequence


def _fmt(x: Any, spec: str = ".0f") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return format(x, spec)


def _load_label(run: dict[str, Any]) -> str:
    if run["mode"] == "closed":
        return f"N={run['concurrency']}"
    return f"{run['rate_per_s']:g}/s" + (" (goodput probe)" if run["mode"] == "goodput_probe" else "")


def runs_table(runs: Sequence[dict[str, Any]], prebuffers_ms: Sequence[int]) -> str:
    """Markdown table: one row per run."""
    stall_cols = " | ".join(f"stall {p} ms: mean s / stalled" for p in prebuffers_ms)
    head = (f"| target | load | turns | ok | errors | TTFA p50 | TTFA p90 | TTFA p99 | TTFS p50 / p90 | LCL p50 | RTF p50 | "
            f"chunks on time | turns on time | turns with fill | {stall_cols} | sched lag p99 |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in runs:
        s = r["summary"]
        errs = ", ".join(f"{k}×{v}" for k, v in s["errors"].items()) or "0"
        stalls = " | ".join(
            f"{_fmt(s['stall_s'][str(p)]['mean'], '.3f')} / "
            f"{_fmt(_pct(s['stall_s'][str(p)]['turns_stalled_fraction']), '.0f')}%"
            for p in prebuffers_ms)
        lines.append(
            f"| {r['target']} | {_load_label(r)} | {s['turns']} | {s['ok']} | {errs} | {_fmt(s['ttfa_ms']['p50'])} | "
            f"{_fmt(s['ttfa_ms']['p90'])} | {_fmt(s['ttfa_ms']['p99'])} | {_ttfs(s)} | {_fmt(s['lcl_ms']['p50'])} | "
            f"{_fmt(s['rtf']['p50'], '.2f')} | {_fmt(_pct(s['chunk_on_time_fraction']), '.1f')}% | "
            f"{_fmt(_pct(s['all_on_time_fraction']), '.1f')}% | "
            f"{_fmt(_pct(s.get('turns_with_fill_fraction')), '.1f')}% | {stalls} | "
            f"{_fmt(s['schedule_lag_ms']['p99'], '.1f')} |")
    return "\n".join(lines)


def _ttfs(summary: dict[str, Any]) -> str:
    """Time to first speech p50 / p90 (bench_metrics), "–" for a run that did not record it."""
    t = summary.get("ttfs_ms")
    return f"{_fmt(t['p50'])} / {_fmt(t['p90'])}" if t and t.get("n") else "–"


def _pct(x: float | None) -> float | None:
    return None if x is None else 100.0 * x


def comparison(runs: Sequence[dict[str, Any]], targets: Sequence[str]) -> list[dict[str, Any]]:
    """Per load level measured on every target: each target's TTFA p50/p90 and on-time fraction, and its
    TTFA ratios to the first target (the baseline of the ratios)."""
    base = targets[0]
    by_key: dict[tuple, dict[str, dict]] = {}
    for r in runs:
        if r["mode"] == "goodput_probe":
            continue
        key = (r["mode"], r.get("rate_per_s") or r.get("concurrency"))
        by_key.setdefault(key, {})[r["target"]] = r["summary"]
    rows = []
    for (mode, load), per in by_key.items():
        if not all(t in per for t in targets):
            continue
        b = per[base]
        row: dict[str, Any] = {"mode": mode, "load": load, "baseline": base, "targets": {}}
        for t in targets:
            s = per[t]
            row["targets"][t] = {
                "ttfa_p50_ms": s["ttfa_ms"]["p50"], "ttfa_p90_ms": s["ttfa_ms"]["p90"],
                "all_on_time_fraction": s["all_on_time_fraction"],
                "ttfa_p50_ratio": _ratio(s["ttfa_ms"]["p50"], b["ttfa_ms"]["p50"]),
                "ttfa_p90_ratio": _ratio(s["ttfa_ms"]["p90"], b["ttfa_ms"]["p90"]),
            }
        rows.append(row)
    return rows


def _ratio(a: float, b: float) -> float:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return math.nan
    return a / b


def comparison_table(rows: Sequence[dict[str, Any]], targets: Sequence[str]) -> str:
    """Markdown: TTFA p50 / p90 (ms) and ratio to the baseline, turns fully on time, per load and target."""
    head = "| load | " + " | ".join(f"{t}: TTFA p50 / p90 (×{targets[0]}) / on time" for t in targets) + " |"
    lines = [head, "|" + "---|" * (len(targets) + 1)]
    for row in rows:
        load = f"N={row['load']}" if row["mode"] == "closed" else f"{row['load']:g}/s"
        cells = []
        for t in targets:
            c = row["targets"][t]
            cells.append(f"{_fmt(c['ttfa_p50_ms'])} / {_fmt(c['ttfa_p90_ms'])} ms "
                         f"(×{_fmt(c['ttfa_p50_ratio'], '.2f')} / ×{_fmt(c['ttfa_p90_ratio'], '.2f')}) / "
                         f"{_fmt(_pct(c['all_on_time_fraction']), '.1f')}%")
        lines.append(f"| {load} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goodput_table(goodput: dict[str, dict[str, Any]], targets: Sequence[str]) -> str:
    base = goodput.get(targets[0], {}).get("goodput_per_s")
    lines = ["| target | goodput (turns/s) | bracket | × baseline | probes (rate: pass) |", "|---|---|---|---|---|"]
    for t in targets:
        g = goodput.get(t)
        if g is None:
            continue
        probes = ", ".join(f"{r:g}:{'✓' if ok else '✗'}" for r, ok in g["probes"])
        lines.append(f"| {t} | {g['goodput_per_s']:.3g} | {g['bracket']} | "
                     f"{_fmt(_ratio(g['goodput_per_s'], base), '.2f')} | {probes} |")
    return "\n".join(lines)


def json_safe(obj: Any) -> Any:
    """NaN/inf → None, tuples → lists, recursively (strict JSON for any consumer)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def render(report: dict[str, Any]) -> str:
    """The markdown printed to stdout."""
    targets = list(report["targets"])
    st = report["settings"]
    out = [f"## python -m bench.grpc_load — {', '.join(f'{k}={v}' for k, v in report['targets'].items())}",
           f"pacing {st['pacing']}, {st['encoding']} {st['sample_rate_hz']} Hz, {st['frame_ms']} ms frames, "
           f"texts {st['text_class']}{' streamed' if st['stream_text'] else ''}, {st['arrivals']} arrivals, "
           f"seed {st['seed']}, {st['duration_s']:g} s per level. Times in ms.", ""]
    if report["runs"]:
        out += [runs_table(report["runs"], st["prebuffers_ms"]), ""]
    if report.get("comparison"):
        out += [f"### Side by side (ratios to {targets[0]})", "", comparison_table(report["comparison"], targets), ""]
    if report.get("goodput"):
        out += [f"### Goodput (p90 TTFA ≤ {st['ttfa_target_ms']:g} ms and ≥ {100 * st['on_time_target']:g}% "
                f"of turns fully on time)", "", goodput_table(report["goodput"], targets), ""]
    return "\n".join(out)
