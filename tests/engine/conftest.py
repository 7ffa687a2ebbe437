"""Engine test settings: one torch thread while these tests run (the CI box is shared; OpenMP spin-waits
collapse under oversubscription), restored afterwards."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
