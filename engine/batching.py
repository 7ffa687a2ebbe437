"""Batch helpers for the runner: padded id batches and shape buckets."""

from __future__ import annotations

from typing import Sequence

import torch


def bucket_up(n: int, multiple: int) -> int:
    """Round n up to a multiple (fewer distinct shapes → fewer kernels to tune / graphs to capture)."""
    if multiple <= 1:
        return n
    return -(-n // multiple) * multiple


def pow2_bucket(n: int) -> int:
    """Smallest power of two ≥ n (n ≥ 1): the batch buckets CUDA graphs are captured for."""
    if n < 1:
        raise ValueError(f"batch size must be >= 1, got {n}")
    return 1 << (n - 1).bit_length()


def pad_ids(ids: Sequence[Sequence[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Id lists → (ids [B, T_max] long, right-padded with pad_id; lengths [B] long)."""
    lengths = [len(row) for row in ids]
    out = torch.full((len(ids), max(lengths)), pad_id, dtype=torch.long)
    for i, row in enumerate(ids):
        out[i, : len(row)] = torch.tensor(list(row), dtype=torch.long)
    return out, torch.tensor(lengths, dtype=torch.long)
