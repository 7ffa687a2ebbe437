"""Fixtures shared by the model tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny convolutions on a shared 2-core machine: one intra-op thread avoids OpenMP contention."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
