"""Resource samples of this process over time (RSS, fds, OS threads, asyncio tasks) and their least-squares slopes."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tests.reliability.conftest import open_fds, os_threads, rss_bytes

TEN_MIN_S = 600.0


@dataclass(frozen=True)
class Sample:
    """One reading: seconds since the sampler started, resident MiB, open fds, OS threads, live asyncio tasks, and
    glibc malloc's bytes in use and free-but-held (all arenas; NaN off glibc). Growth of `heap_used_mib` is a leak;
    growth of `heap_free_mib` with flat use is the allocator keeping freed memory (fragmentation)."""

    t_s: float
    rss_mib: float
    fds: int
    threads: int
    tasks: int
    heap_used_mib: float = math.nan
    heap_free_mib: float = math.nan


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    """glibc's mallinfo2 (2.33+), or None where the C library has none."""
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


_MALLINFO2 = _mallinfo2()


def heap_mib() -> tuple[float, float]:
    """(MiB malloc'd and in use, including mmapped blocks; MiB free inside malloc's arenas), NaN without glibc."""
    if _MALLINFO2 is None:
        return math.nan, math.nan
    m = _MALLINFO2()
    return (m.uordblks + m.hblkhd) / 2**20, m.fordblks / 2**20


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
        s = Sample(self.clock() - self._t0, rss_bytes() / 2**20, open_fds(), os_threads(), tasks, *heap_mib())
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
        names = ["rss_mib", "fds", "threads", "tasks"]
        if w and not math.isnan(w[0].heap_used_mib):
            names += ["heap_used_mib", "heap_free_mib"]
        return {name: fit_slope(t, [float(getattr(s, name)) for s in w]) for name in names}
