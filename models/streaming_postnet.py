"""The Tacotron2 postnet streamed: each convolution keeps its own left context per slot, so no frame is computed twice.

`StreamingPostnet(acoustic, slots)` shares the acoustic model's postnet weights and keeps, per slot, the last
(kernel − 1) inputs of every postnet convolution and the last `delay_frames` mel frames of the residual path
(models/stream_conv.py). `step(rows, mel_before, first)` feeds each row its next n decoded frames and returns
mel_after for the n frames `delay_frames` (= postnet context, 10 on Baker) before them.

Equal to the whole-utterance `Tacotron2.postnet` within float rounding: that pads every convolution with zeros
before frame 0 (a first call writes the same zeros in front of each layer's input) and appends zero frames after
the last one, so a stream fed its decoded frames and then zero frames (the engine's mel buffer is zero past a
row's last decoded frame) gives every frame of the utterance its whole-utterance value
(tests/models/test_streaming_postnet.py). Frames before the start on a first call are pre-roll (not returned as
frames of the utterance: see `step`).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from models.stream_conv import Edges, RowState, StreamCache, StreamConv, StreamDelay
from models.tacotron2 import Tacotron2


class _PostnetNet(nn.Module):
    """Tacotron2.postnet over [B, M, n] streamed: → the residual branch and the delayed mel, both [B, M, n]."""

    def __init__(self, acoustic: Tacotron2) -> None:
        super().__init__()
        self.layers = acoustic.postnet_convs  # _ConvNorm: conv (SAME zeros) · scale + shift
        self.convs = nn.ModuleList(StreamConv(layer.conv, "zeros") for layer in self.layers)
        self.delay = StreamDelay(acoustic.config.n_mels, sum(c.pad for c in self.convs))

    def forward(self, x: torch.Tensor, state: RowState, edges: Edges) -> tuple[torch.Tensor, torch.Tensor]:
        h, e = x, edges
        last = len(self.convs) - 1
        for i, (conv, layer) in enumerate(zip(self.convs, self.layers)):
            h, e = conv(h, state, e)
            h = torch.addcmul(layer.shift.unsqueeze(-1), h, layer.scale.unsqueeze(-1))
            if i < last:
                h = torch.tanh_(h)
        mel, _ = self.delay(x, state, edges)
        return h, mel


class StreamingPostnet(nn.Module):
    """Per-slot streaming state over a Tacotron2's postnet (weights shared with it, never copied)."""

    def __init__(self, acoustic: Tacotron2, slots: int) -> None:
        super().__init__()
        self.net = _PostnetNet(acoustic)
        self.projection = acoustic.residual_projection
        self.n_mels = acoustic.config.n_mels
        self.delay_frames = self.net.delay.state_width  # = acoustic.postnet_context_frames
        # a first call writes each layer's zero padding in front of the utterance: the last layer's start lies
        # (layers − 1)·pad frames into the call, so a first call takes at least the whole delay
        self.min_first_frames = self.delay_frames
        param = acoustic.residual_projection.weight
        self.cache = StreamCache(self.net, slots, param.device, param.dtype)

    def reset(self, rows: Sequence[int]) -> None:
        """Forget these slots' streams (their next call must be a first call)."""
        if rows:
            self.cache.reset(rows)

    def step(self, rows: Sequence[int], mel_before: torch.Tensor, first: Sequence[bool]) -> torch.Tensor:
        """Feed mel_before [B, n, M] (row b → slot rows[b]): the row's next n frames, frames past its end as zeros.

        Returns mel_after [B, n, M] of the frames `delay_frames` earlier: a row whose frames fed so far (this call
        included) end at frame f gets frames [f − n − delay_frames, f − delay_frames); on a first call the ones
        before frame 0 are pre-roll. `first[b]`: row b starts its utterance with this call (n ≥ min_first_frames).
        """
        b, n = mel_before.shape[0], mel_before.shape[1]
        if mel_before.dim() != 3 or mel_before.shape[2] != self.n_mels or b != len(rows) or n < 1:
            raise ValueError(f"mel_before must be [{len(rows)}, n ≥ 1, {self.n_mels}], got {tuple(mel_before.shape)}")
        if len(first) != b:
            raise ValueError("first needs one entry per row")
        if any(first) and n < self.min_first_frames:
            raise ValueError(f"a first call needs ≥ {self.min_first_frames} frames, got {n}")
        edges = Edges(tuple(0 if f else None for f in first), (None,) * b)
        residual, mel = self.net(mel_before.transpose(1, 2), self.cache.rows(rows), edges)
        return mel.transpose(1, 2) + self.projection(residual.transpose(1, 2))


def postnet_streamed(streamer: StreamingPostnet, mel_before: torch.Tensor, sizes: Sequence[int], slot: int = 0
                     ) -> torch.Tensor:
    """mel_after [N, M] of one utterance mel_before [N, M] fed in calls of `sizes` frames (the last size repeats),
    then zero frames until every frame came out. For tests and benchmarks."""
    n_total, m = mel_before.shape
    fed = torch.cat([mel_before, mel_before.new_zeros(streamer.delay_frames, m)])
    streamer.reset([slot])
    pieces, pos, i = [], 0, 0
    while pos < fed.shape[0]:
        n = sizes[min(i, len(sizes) - 1)]
        n = min(max(n, streamer.min_first_frames) if pos == 0 else n, fed.shape[0] - pos)
        out = streamer.step([slot], fed[None, pos: pos + n], [pos == 0])[0]
        pieces.append(out[max(0, streamer.delay_frames - pos):])  # drop the first call's pre-roll
        pos, i = pos + n, i + 1
    return torch.cat(pieces)[:n_total]
