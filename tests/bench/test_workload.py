"""Benchmark workload: the packaged text set, class selection, seeded arrival schedules, text deltas."""

import numpy as np
import pytest

from bench.workload import (
    WorkloadError,
    arrival_times,
    load_texts,
    pick_texts,
    select_texts,
)


def test_packaged_texts_match_shared_classes():
    items = load_texts()
    classes = {i.cls for i in items}
    assert {"short", "medium", "long"} <= classes
    assert sum(1 for i in items if i.cls == "short") == 10
    assert all(i.text and "\t" not in i.text for i in items)
    assert len({i.id for i in items}) == len(items)


def test_select_texts():
    items = load_texts()
    assert {i.cls for i in select_texts(items, "long")} == {"long"}
    assert {i.cls for i in select_texts(items, "short,medium")} == {"short", "medium"}
    assert len(select_texts(items, "mixed")) == len(items)
    with pytest.raises(WorkloadError, match="unknown text class"):
        select_texts(items, "huge")


def test_load_texts_rejects_bad_lines(tmp_path):
    p = tmp_path / "t.tsv"
    p.write_text("# header\nx1\tshort\n", encoding="utf-8")
    with pytest.raises(WorkloadError, match="t.tsv:2"):
        load_texts(p)
    p.write_text("a\tshort\t你好。\n\nb\tlong\t再见。\n", encoding="utf-8")
    assert [i.id for i in load_texts(p)] == ["a", "b"]


def test_poisson_schedule_is_reproducible_and_has_the_right_rate():
    a = arrival_times(5.0, 400.0, seed=42)
    assert a == arrival_times(5.0, 400.0, seed=42)
    assert a != arrival_times(5.0, 400.0, seed=43)
    assert all(0 <= x < 400.0 for x in a) and a == sorted(a)
    # 2000 expected arrivals: the count's std is sqrt(2000) ≈ 45
    assert abs(len(a) - 2000) < 200
    gaps = np.diff([0.0] + a)
    assert gaps.mean() == pytest.approx(0.2, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.1)  # exponential: coefficient of variation 1


def test_bursty_schedule_has_larger_spread():
    gaps = np.diff(arrival_times(5.0, 400.0, seed=1, burstiness=0.25))
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.2)  # Gamma(k): CV = 1/sqrt(k)


def test_even_schedule():
    assert arrival_times(2.0, 3.0, seed=0, process="even") == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    with pytest.raises(WorkloadError):
        arrival_times(0.0, 3.0, seed=0)
    with pytest.raises(WorkloadError):
        arrival_times(1.0, 3.0, seed=0, process="bursty")


def test_pick_texts_is_seeded():
    items = load_texts()
    a = pick_texts(items, 50, 42, 1.0)
    assert a == pick_texts(items, 50, 42, 1.0)
    assert a != pick_texts(items, 50, 42, 2.0)
    assert len({i.id for i in a}) > 10
