"""models/transfer.py on the CPU: the values, dtype and device asked for (its pinned, non-blocking CUDA copy is
exercised by bench/gpu_check.py on a GPU: the streamed vocoder's edges and the decoder's slot rows go through it)."""

from __future__ import annotations

import numpy as np
import torch

from models.transfer import device_tensor


def test_values_dtype_and_device() -> None:
    t = device_tensor([3, 1, 2], "cpu")
    assert t.dtype == torch.long and t.device.type == "cpu" and t.tolist() == [3, 1, 2]
    assert device_tensor(range(4), torch.device("cpu")).tolist() == [0, 1, 2, 3]
    assert device_tensor(np.array([5, 7], np.int64).tolist(), "cpu").tolist() == [5, 7]
    flags = device_tensor([True, False], "cpu", dtype=torch.bool)
    assert flags.dtype == torch.bool and flags.tolist() == [True, False]
    assert device_tensor([], "cpu").shape == (0,)
