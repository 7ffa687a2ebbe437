"""The soak's slope fit on synthetic series: flat noise fits ~0, a 1 MiB-per-minute leak is seen over the CI window."""

import random

import pytest

from tests.load.soak import ResourceSampler, fit_slope, heap_mib
from tests.load.test_soak import RSS_SLOPE_MIB_PER_10MIN


def series(slope_mib_per_s: float, noise_mib: float, seconds: int = 240, seed: int = 0) -> tuple[list, list]:
    rng = random.Random(seed)
    t = [float(i) for i in range(seconds)]
    return t, [400.0 + slope_mib_per_s * x + rng.uniform(-noise_mib, noise_mib) for x in t]


def test_flat_noisy_rss_fits_no_slope():
    fit = fit_slope(*series(0.0, noise_mib=1.0))
    assert abs(fit.per_10min) < 3 * fit.stderr_per_10min + 0.1
    assert fit.n == 240 and fit.span_s == 239


def test_a_leak_of_1_mib_per_minute_fails_the_ci_bound_over_the_ci_window():
    for seed in range(20):  # whatever the noise draw
        fit = fit_slope(*series(1.0 / 60, noise_mib=1.0, seconds=240 - 60, seed=seed))
        assert fit.per_10min == pytest.approx(10.0, abs=2.0)  # ± 4 standard errors
        assert fit.per_10min > RSS_SLOPE_MIB_PER_10MIN


def test_exact_line_and_bad_input():
    fit = fit_slope([0.0, 60.0, 120.0], [1.0, 2.0, 3.0])
    assert fit.per_10min == pytest.approx(10.0) and fit.stderr_per_10min == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError):
        fit_slope([0.0, 1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        fit_slope([5.0, 5.0, 5.0], [1.0, 2.0, 3.0])


def test_sampler_reads_this_process_on_its_clock():
    now = [0.0]
    sampler = ResourceSampler(clock=lambda: now[0])
    for k in range(4):
        now[0] = 10.0 * k
        s = sampler.sample()
        assert s.t_s == 10.0 * k and s.rss_mib > 0 and s.fds > 0 and s.threads >= 1 and s.tasks == 0
    assert [s.t_s for s in sampler.window(15.0)] == [20.0, 30.0]
    heap = {"heap_used_mib", "heap_free_mib"} if heap_mib()[0] == heap_mib()[0] else set()  # NaN off glibc
    assert set(sampler.slopes(0.0)) == {"rss_mib", "fds", "threads", "tasks"} | heap
    if heap:  # glibc: the allocator's own figures are read (some bytes in use, free bytes never negative)
        assert all(0 < x.heap_used_mib and 0 <= x.heap_free_mib for x in sampler.samples)
