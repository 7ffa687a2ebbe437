"""Bench test settings: one torch thread while these tests run (the CI box is shared; OpenMP spin-waits collapse
under oversubscription), restored afterwards. Tests that never load torch do not import it for this."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
