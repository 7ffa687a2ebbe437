"""Rows of the batched decoder-state slab: the field lists (defined once) and the one gather / scatter of rows."""

from __future__ import annotations

from typing import Sequence

import torch

from models.tacotron2 import DecoderState
from models.transfer import device_tensor

FIELDS = tuple(DecoderState.__dataclass_fields__)
# fields decode() changes; memory, keys, lengths and seed are read-only while decoding
MUTABLE = ("last_frame", "context", "attn", "attn_cum", "att_h", "att_c", "dec_h", "dec_c", "peak", "step", "finished")
TIME = ("memory", "keys", "attn", "attn_cum")  # fields with an input-position axis (dim 1)

Rows = slice | torch.Tensor  # a contiguous range of slots (views), or slot indices [B] long (copies)


def rows_of(slots: Sequence[int], device: torch.device) -> Rows:
    """A slice when the slots are contiguous and ascending, else an index tensor."""
    lo = slots[0]
    if list(slots) == list(range(lo, lo + len(slots))):
        return slice(lo, lo + len(slots))
    return device_tensor(slots, device)


def _field(src: torch.Tensor, name: str, where: Rows, t: int) -> torch.Tensor:
    if isinstance(where, slice):
        return src[where, :t] if name in TIME else src[where]
    return src.index_select(0, where)[:, :t] if name in TIME else src.index_select(0, where)


def gather(slab: DecoderState, where: Rows, t: int) -> DecoderState:
    """The rows as a DecoderState cropped to input length t: views for a slice, copies for indices."""
    return DecoderState(**{name: _field(getattr(slab, name), name, where, t) for name in FIELDS})


def scatter(slab: DecoderState, where: Rows, sub: DecoderState | dict[str, torch.Tensor], t: int) -> None:
    """Write the fields decode() changes (from a DecoderState or a field → tensor map) back into the rows."""
    for name in MUTABLE:
        dst = getattr(slab, name)
        val = sub[name] if isinstance(sub, dict) else getattr(sub, name)
        if isinstance(where, slice):
            target = dst[where, :t] if name in TIME else dst[where]
            if target.data_ptr() != val.data_ptr():
                target.copy_(val)
        elif name in TIME:
            dst[:, :t].index_copy_(0, where, val)
        else:
            dst.index_copy_(0, where, val)
