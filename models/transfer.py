"""Small host → device copies that do not wait for the device.

`torch.tensor(values, device="cuda")` copies from pageable host memory, which blocks the calling thread until
the device's queue has drained; the engine thread makes a dozen such copies per iteration (slot rows, frame
offsets, utterance edges of the vocoder's first and last calls), each one a stall between the GPU's kernels.
From pinned memory with `non_blocking=True` the copy is queued like a kernel: PyTorch's caching host allocator
keeps the pinned block until the copy has run. On the CPU this is plain `torch.tensor`.
"""

from __future__ import annotations

from typing import Sequence

import torch


def device_tensor(values: Sequence[int] | Sequence[bool], device: torch.device | str,
                  dtype: torch.dtype = torch.long) -> torch.Tensor:
    """`values` as a 1-D tensor on `device`, without a blocking copy on CUDA."""
    device = torch.device(device)
    host = torch.tensor(list(values), dtype=dtype)
    if device.type != "cuda":
        return host if device.type == "cpu" else host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
