"""Resource samples of this process over time (RSS, fds, OS threads, asyncio tasks) and their least-squares slopes."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tests.reliability.conftest import open_fds, os_threads, rss_bytes

TEN_MIN_S = 600.0


@dataclass(frozen=True)
class Sample:
    """One reading: seconds since the sampler started, resident MiB, open fds, OS threads, live asyncio tasks."""

    t_s: float
    rss_mib: float
    fds: int
    threads: int
    tasks: int


@dataclass(frozen=True)
class Slope:
    """Least-squares line through (t, y): slope and its standard error, both per 10 minutes."""

    per_10min: float
    stderr_per_10min: float
    n: int
    span_s: float

    def __str__(self) -> str:
        return f"{self.per_10min:+.2f} ± {self.stderr_per_10min:.2f} per 10 min (n={self.n}, {self.span_s:.0f} s)"


def fit_slope(t_s: Sequence[float], y: Sequence[float]) -> Slope:
    """Ordinary least squares y = a + b·t; b and its standard error scaled to 10 minutes. Needs ≥ 3 points."""
    n = len(t_s)
    if n != len(y) or n < 3:
        raise ValueError(f"fit_slope needs at least 3 (t, y) pairs of equal length, got {n} and {len(y)}")
    mt, my = sum(t_s) / n, sum(y) / n
    stt = sum((t - mt) ** 2 for t in t_s)
    if stt <= 0.0:
        raise ValueError("fit_slope needs samples at more than one time")
    b = sum((t - mt) * (v - my) for t, v in zip(t_s, y)) / stt
    a = my - b * mt
    resid = sum((v - a - b * t) ** 2 for t, v in zip(t_s, y))
    se = math.sqrt(resid / (n - 2) / stt)
    return Slope(b * TEN_MIN_S, se * TEN_MIN_S, n, max(t_s) - min(t_s))


@dataclass
class ResourceSampler:
    """Samples this process every `period_s` while `run()` is a task; `slopes(after_s)` fits the window after it."""

    period_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._t0 = self.clock()

    def sample(self) -> Sample:
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # no running loop
            tasks = 0
        s = Sample(self.clock() - self._t0, rss_bytes() / 2**20, open_fds(), os_threads(), tasks)
        self.samples.append(s)
        return s

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.period_s)

    def window(self, after_s: float) -> list[Sample]:
        return [s for s in self.samples if s.t_s >= after_s]

    def slopes(self, after_s: float) -> dict[str, Slope]:
        """Slope per 10 min of each resource over the samples taken at or after `after_s`."""
        w = self.window(after_s)
        t = [s.t_s for s in w]
        return {name: fit_slope(t, [float(getattr(s, name)) for s in w])
                for name in ("rss_mib", "fds", "threads", "tasks")}
