"""PNG charts of a `python -m bench.grpc_load` report: TTFA p50/p90 and on-time fractions against load, one line per target."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence


class PlotError(RuntimeError):
    """matplotlib is missing, or the report has nothing to plot."""


def _series(report: dict[str, Any], modes: tuple[str, ...], xkey: str) -> dict[str, list[tuple[float, dict]]]:
    out: dict[str, list[tuple[float, dict]]] = {}
    for run in report["runs"]:
        if run["mode"] in modes:
            out.setdefault(run["target"], []).append((float(run[xkey]), run["summary"]))
    for pts in out.values():
        pts.sort(key=lambda p: p[0])
    return out


def _num(x: Any) -> float:
    return float(x) if x is not None and math.isfinite(float(x)) else math.nan


def plot_report(report: dict[str, Any], out_dir: str | os.PathLike) -> list[Path]:
    """Write ttfa_vs_rate.png and on_time_vs_rate.png (open-loop runs and goodput probes, with the goodput
    marked), and the *_vs_concurrency.png pair (closed loop) when those runs exist. Returns the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise PlotError("plots need matplotlib: pip install matplotlib") from exc
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target_ms = report.get("settings", {}).get("ttfa_target_ms")
    written: list[Path] = []
    goodput = report.get("goodput") or {}
    for modes, xkey, xlabel, suffix, logx in (
        (("open", "goodput_probe"), "rate_per_s", "request rate (turns/s, open loop)", "rate", True),
        (("closed",), "concurrency", "concurrent streams (closed loop)", "concurrency", False),
    ):
        series = _series(report, modes, xkey)
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, (target, pts) in enumerate(series.items()):
            xs = [x for x, _ in pts]
            color = f"C{i}"
            ax.plot(xs, [_num(s["ttfa_ms"]["p50"]) for _, s in pts], "o-", color=color, label=f"{target} p50")
            ax.plot(xs, [_num(s["ttfa_ms"]["p90"]) for _, s in pts], "s--", color=color, label=f"{target} p90")
        if target_ms:
            ax.axhline(target_ms, color="grey", lw=0.8, ls=":", label=f"target {target_ms:g} ms")
        if suffix == "rate":
            for i, target in enumerate(series):
                g = goodput.get(target, {}).get("goodput_per_s")
                if g:
                    ax.axvline(g, color=f"C{i}", lw=0.8, ls="-.", label=f"{target} goodput {g:.3g}/s")
        _finish(ax, xlabel, "TTFA (ms)", "Time to first audio", logx, _xs(series))
        written.append(_save(fig, out / f"ttfa_vs_{suffix}.png", plt))

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, (target, pts) in enumerate(series.items()):
            xs = [x for x, _ in pts]
            color = f"C{i}"
            ax.plot(xs, [100 * _num(s["all_on_time_fraction"]) for _, s in pts], "o-", color=color,
                    label=f"{target} turns fully on time")
            ax.plot(xs, [100 * _num(s["chunk_on_time_fraction"]) for _, s in pts], "s--", color=color,
                    label=f"{target} chunks on time")
        ax.set_ylim(-2, 102)
        _finish(ax, xlabel, "on time (%)", "Streaming viability", logx, _xs(series))
        written.append(_save(fig, out / f"on_time_vs_{suffix}.png", plt))
    if not written:
        raise PlotError("the report has no open- or closed-loop runs to plot")
    return written


def _xs(series: dict[str, list[tuple[float, dict]]]) -> list[float]:
    return sorted({x for pts in series.values() for x, _ in pts})


def _finish(ax: Any, xlabel: str, ylabel: str, title: str, logx: bool, xs: Sequence[float]) -> None:
    if logx and len(xs) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{x:g}" for x in xs])
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_json(path: str | os.PathLike, out_dir: str | os.PathLike) -> Sequence[Path]:
    """Plot a report saved with `python -m bench.grpc_load --out`."""
    import json

    with open(path, encoding="utf-8") as f:
        return plot_report(json.load(f), out_dir)
