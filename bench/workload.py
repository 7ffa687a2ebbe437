"""The benchmark's workload: text sets by length class, seeded arrival schedules, and LLM-like text deltas."""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from typing import Sequence

import numpy as np

from clients.deltas import DeltaError, seeded_rng

DEFAULT_TEXTS = "callcenter_zh.tsv"
ARRIVALS = ("poisson", "even")


class WorkloadError(ValueError):
    """A bad workload setting: unknown text class, empty text file, non-positive rate or duration."""


@dataclass(frozen=True)
class TextItem:
    """One line of a text set: id, length class (short / medium / long / ...), text."""

    id: str
    cls: str
    text: str


def load_texts(path: str | os.PathLike | None = None) -> list[TextItem]:
    """Read a TSV of `id<TAB>class<TAB>text` lines ('#' lines and blank lines skipped); None: the packaged set."""
    if path is None:
        content = resources.files("bench.texts").joinpath(DEFAULT_TEXTS).read_text(encoding="utf-8")
        where = f"bench/texts/{DEFAULT_TEXTS}"
    else:
        with open(path, encoding="utf-8") as f:
            content = f.read()
        where = str(path)
    items = []
    for n, line in enumerate(content.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not all(p.strip() for p in parts):
            raise WorkloadError(f"{where}:{n}: expected id<TAB>class<TAB>text, got {line!r}")
        items.append(TextItem(parts[0].strip(), parts[1].strip(), parts[2].strip()))
    if not items:
        raise WorkloadError(f"{where}: no texts")
    return items


def select_texts(items: Sequence[TextItem], text_class: str) -> list[TextItem]:
    """The items of one class, of several ("short,medium"), or all of them ("mixed")."""
    if text_class == "mixed":
        return list(items)
    wanted = {c.strip() for c in text_class.split(",") if c.strip()}
    known = sorted({i.cls for i in items})
    unknown = wanted - set(known)
    if unknown or not wanted:
        raise WorkloadError(f"unknown text class {text_class!r}; use mixed or one of {', '.join(known)}")
    return [i for i in items if i.cls in wanted]


def _rng(seed: int, *keys: float) -> np.random.Generator:
    """clients.deltas.seeded_rng, its error reported as a workload setting."""
    try:
        return seeded_rng(seed, *keys)
    except DeltaError as exc:
        raise WorkloadError(str(exc)) from None


def arrival_times(rate_per_s: float, duration_s: float, seed: int, process: str = "poisson",
                  burstiness: float = 1.0) -> list[float]:
    """Arrival offsets in [0, duration_s) for an open-loop run.

    poisson: gaps drawn from Gamma(shape=burstiness, scale=1/(burstiness·rate)) (burstiness 1 = Poisson,
    < 1 burstier), seeded by (seed, rate) so every target of a comparison gets the same schedule.
    even: one arrival every 1/rate seconds starting at 0.
    """
    if rate_per_s <= 0 or duration_s <= 0:
        raise WorkloadError(f"rate and duration must be > 0 (got {rate_per_s}/s for {duration_s} s)")
    if process == "even":
        n = int(np.ceil(duration_s * rate_per_s - 1e-9))
        return [k / rate_per_s for k in range(n) if k / rate_per_s < duration_s]
    if process != "poisson":
        raise WorkloadError(f"unknown arrival process {process!r}; use one of {', '.join(ARRIVALS)}")
    if burstiness <= 0:
        raise WorkloadError(f"burstiness must be > 0, got {burstiness}")
    rng = _rng(seed, rate_per_s, burstiness)
    out: list[float] = []
    t = 0.0
    batch = max(16, int(duration_s * rate_per_s * 1.5))
    while True:
        for gap in rng.gamma(burstiness, 1.0 / (burstiness * rate_per_s), size=batch):
            t += float(gap)
            if t >= duration_s:
                return out
            out.append(t)


def pick_texts(items: Sequence[TextItem], n: int, seed: int, *keys: float) -> list[TextItem]:
    """n items drawn uniformly with replacement, seeded by (seed, *keys)."""
    if not items:
        raise WorkloadError("no texts to pick from")
    idx = _rng(seed, 7, *keys).integers(0, len(items), size=n)
    return [items[int(i)] for i in idx]
