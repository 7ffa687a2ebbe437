"""Streaming convolution blocks: each keeps its own left context per stream row, so no frame is computed twice.

A streaming layer takes this call's new input x [B, C, n], prepends the row's cached context [B, C, w] (the last
w input samples of the previous call), and returns exactly n new output samples per row, delayed by its own
look-ahead. Rows of one call share n (their audio positions may differ: rows of different ages batch).

Utterance edges. The whole-utterance models pad each convolution's input by reflection (MB-MelGAN) or zeros
(HiFi-GAN, transposed convolutions, PQMF). A streaming layer does the same to the input it holds: `Edges` says,
per row, at which index of this call's input the utterance starts (a row's first call) and ends (its last call);
positions before the start / past the end are overwritten by the reflection of the samples after / before it
(or by zeros), exactly the pad the whole-utterance layer sees. Output positions before the start are pre-roll
(never emitted); the caller feeds enough tail positions in a last call for the end to come out.

`StreamCache` holds every layer's context: one tensor [slots, C, w] per layer, allocated once; a call gathers
the rows it runs (`RowState`) and writes each layer's new context back as soon as it is computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from models.transfer import device_tensor


class StreamEdgeError(ValueError):
    """A call cannot reproduce an utterance edge (too few samples to reflect, or not enough tail positions)."""


@dataclass(frozen=True)
class Edges:
    """Per row: index in this call's input of the utterance's first sample and of its end (None: not in this call)."""

    start: tuple[int | None, ...]
    end: tuple[int | None, ...]

    def map(self, scale: int = 1, shift: int = 0) -> "Edges":
        """The same edges after a layer that maps input index i to output index i·scale + shift."""
        f = lambda v: None if v is None else v * scale + shift  # noqa: E731
        return Edges(tuple(map(f, self.start)), tuple(map(f, self.end)))

    @property
    def any(self) -> bool:
        """True when some row starts or ends in this call."""
        return any(v is not None for v in self.start + self.end)


class StreamLayer(nn.Module):
    """A layer with per-row cached context of `state_width` samples × `state_channels` (key set by the owner)."""

    state_channels: int
    state_width: int
    key: str = ""


class RowState:
    """The cache rows of one call: `take` gathers a layer's context [B, C, w], `put` scatters the new one."""

    def __init__(self, cache: "StreamCache", rows: Sequence[int]) -> None:
        self.cache = cache
        lo = rows[0] if rows else 0
        contiguous = list(rows) == list(range(lo, lo + len(rows)))
        self.where: slice | torch.Tensor = (
            slice(lo, lo + len(rows)) if contiguous
            else device_tensor(rows, cache.device)
        )

    def take(self, layer: StreamLayer) -> torch.Tensor:
        slab = self.cache.slabs[layer.key]
        return slab[self.where] if isinstance(self.where, slice) else slab.index_select(0, self.where)

    def put(self, layer: StreamLayer, value: torch.Tensor) -> None:
        slab = self.cache.slabs[layer.key]
        if isinstance(self.where, slice):
            slab[self.where].copy_(value)
        else:
            slab.index_copy_(0, self.where, value)


class StreamCache:
    """Context of every StreamLayer under `net`, one zeroed tensor [slots, C, w] each, allocated once."""

    def __init__(self, net: nn.Module, slots: int, device: torch.device, dtype: torch.dtype) -> None:
        self.slots, self.device = slots, device
        self.slabs: dict[str, torch.Tensor] = {}
        for name, layer in net.named_modules():
            if isinstance(layer, StreamLayer):
                layer.key = name
                shape = (slots, layer.state_channels, layer.state_width)
                self.slabs[name] = torch.zeros(shape, device=device, dtype=dtype)

    def rows(self, rows: Sequence[int]) -> RowState:
        """The rows of one call."""
        return RowState(self, rows)

    def reset(self, rows: Sequence[int]) -> None:
        """Zero the rows' context (a released or failed slot keeps nothing of its stream)."""
        where = device_tensor(rows, self.device)
        for slab in self.slabs.values():
            slab.index_fill_(0, where, 0)


def _edge_positions(edges: Edges, offset: int, length: int) -> tuple[list[int], list[int]]:
    """Start and end per row as cat positions (no edge: 0 / length); both must lie in this call."""
    for v in edges.start + edges.end:
        if v is not None and v + offset > length:
            raise StreamEdgeError(f"an utterance edge at input index {v} lies past this call's {length - offset} "
                                  "samples: feed more frames (first call) or more tail frames (last call)")
    start = [0 if v is None else v + offset for v in edges.start]
    end = [length if v is None else v + offset for v in edges.end]
    return start, end


def pad_edges(cat: torch.Tensor, edges: Edges, offset: int, pad: int, mode: str) -> torch.Tensor:
    """Overwrite the `pad` positions before each row's start and after its end with the whole-utterance padding.

    cat [B, C, L]: the input of this call with its context in front (input index 0 at cat position `offset`).
    mode "reflect": about the edge sample, as F.pad(mode="reflect"); "zeros": zeros everywhere outside the edges.
    """
    if not edges.any:
        return cat
    length = cat.shape[-1]
    starts, ends = _edge_positions(edges, offset, length)
    if mode != "zeros":
        for s, e in zip(starts, ends):
            if s + pad >= e:
                raise StreamEdgeError(f"reflecting {pad} samples about an edge needs {pad + 1} samples of the "
                                      f"utterance in this call, it holds {e - s}")
    # built on the device: on CUDA no blocking host copy per layer (models/transfer.py)
    start = device_tensor(starts, cat.device).unsqueeze(1)  # [B, 1]
    end = device_tensor(ends, cat.device).unsqueeze(1)
    q = torch.arange(length, device=cat.device).unsqueeze(0)  # [1, L]
    if mode == "zeros":
        return cat * ((q >= start) & (q < end)).to(cat.dtype).unsqueeze(1)
    idx = torch.where(q < start, 2 * start - q, q)
    idx = torch.where(idx >= end, 2 * (end - 1) - idx, idx).clamp(0, length - 1)
    return cat.gather(2, idx.unsqueeze(1).expand(-1, cat.shape[1], -1))


class StreamConv(StreamLayer):
    """A 'same' convolution (odd span, pad (span−1)/2 each side) streamed: n inputs → n outputs, delay = pad.

    `source` holds the weights: an nn.Conv1d (its own padding is ignored) or anything with `weight`
    [out, in, k] (and optionally `bias`, `dilation`), e.g. the PQMF filter bank.
    """

    def __init__(self, source: nn.Module, mode: str) -> None:
        super().__init__()
        if mode not in ("reflect", "zeros"):
            raise ValueError(f"mode must be 'reflect' or 'zeros', got {mode!r}")
        self.source, self.mode = source, mode
        dilation = getattr(source, "dilation", (1,))
        self.dilation = dilation[0] if isinstance(dilation, tuple) else int(dilation)
        out_ch, in_ch, kernel = source.weight.shape
        span = self.dilation * (kernel - 1) + 1
        if span % 2 == 0:
            raise ValueError(f"a streamed 'same' convolution needs an odd span, got {span}")
        self.pad = (span - 1) // 2
        self.state_channels, self.state_width = in_ch, span - 1

    def forward(self, x: torch.Tensor, state: RowState, edges: Edges) -> tuple[torch.Tensor, Edges]:
        """x [B, C_in, n] → [B, C_out, n]."""
        w = self.state_width
        cat = pad_edges(torch.cat([state.take(self), x], 2), edges, w, self.pad, self.mode)
        state.put(self, cat[..., cat.shape[-1] - w:])
        y = F.conv1d(cat, self.source.weight, getattr(self.source, "bias", None), dilation=self.dilation)
        return y, edges.map(shift=self.pad)


class StreamConvTranspose(StreamLayer):
    """ConvTranspose1d(k, stride u) followed by the crop [crop, crop + N·u), streamed: n inputs → n·u outputs.

    Output j of the full transposed convolution needs inputs ⌊(j−k)/u⌋+1 … ⌊j/u⌋, so ⌈k/u⌉ − 1 inputs of
    context complete the first n·u outputs of this call; inputs outside the utterance are zeros.
    """

    def __init__(self, up: nn.ConvTranspose1d, crop: int) -> None:
        super().__init__()
        self.up, self.crop = up, crop
        self.stride, kernel = up.stride[0], up.kernel_size[0]
        self.state_channels, self.state_width = up.in_channels, -(-kernel // self.stride) - 1

    def forward(self, x: torch.Tensor, state: RowState, edges: Edges) -> tuple[torch.Tensor, Edges]:
        """x [B, C_in, n] → [B, C_out, n·u]."""
        w, u, n = self.state_width, self.stride, x.shape[-1]
        cat = pad_edges(torch.cat([state.take(self), x], 2), edges, w, 0, "zeros")
        state.put(self, cat[..., cat.shape[-1] - w:])
        y = F.conv_transpose1d(cat, self.up.weight, self.up.bias, stride=u)
        return y[..., w * u: (w + n) * u], edges.map(scale=u, shift=self.crop)


class StreamDelay(StreamLayer):
    """Delays a signal by `samples` (the residual path beside a streamed convolution): n inputs → n outputs."""

    def __init__(self, channels: int, samples: int) -> None:
        super().__init__()
        self.state_channels, self.state_width = channels, samples

    def forward(self, x: torch.Tensor, state: RowState, edges: Edges) -> tuple[torch.Tensor, Edges]:
        """x [B, C, n] → x delayed [B, C, n]."""
        if self.state_width == 0:
            return x, edges
        cat = torch.cat([state.take(self), x], 2)
        n = x.shape[-1]
        state.put(self, cat[..., n:])
        return cat[..., :n], edges.map(shift=self.state_width)
