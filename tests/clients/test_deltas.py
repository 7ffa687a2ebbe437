"""clients.deltas: the deltas `voxpool say --stream` and the load generator send, and where text becomes synthesizable."""

from __future__ import annotations

import pytest

from clients.deltas import DeltaError, split_deltas, synthesizable_index


def test_split_deltas_rejoins_and_respects_sizes():
    text = "您好，欢迎致电客户服务中心，查询账单请按一。"
    deltas = split_deltas(text, 2, 4, 42, 3)
    assert "".join(deltas) == text
    assert all(2 <= len(d) <= 4 for d in deltas[:-1]) and 1 <= len(deltas[-1]) <= 4
    assert deltas == split_deltas(text, 2, 4, 42, 3)
    with pytest.raises(DeltaError, match="min ≤ max"):
        split_deltas(text, 3, 2, 0)


def test_synthesizable_index():
    assert synthesizable_index(["您好", "，欢", "迎。"]) == 1
    assert synthesizable_index(["请稍候"]) is None
