"""Chunked streaming vocoding: context windows, batched vocoding of their centres, linear cross-fade at seams."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from models.streaming_vocoder import VocoderStreamSpec

log = logging.getLogger(__name__)

# How a stream is vocoded (any vocoder with `forward(mel [B, T, M]) -> audio [B, T·hop]`):
#
# * The engine cuts a stream's mel into consecutive *centres* of T frames (T may change from call to call; the
#   first chunk is usually short). For each centre, `mel_window` builds a *window* of L + T + R frames: L frames
#   of left context before the centre and R frames of look-ahead after it. A running stream must have decoded
#   `frames_needed` = start + T + R frames first.
# * Utterance edges: window frames before the first frame, and (once the stream has ended) after the last one,
#   are filled by reflection about the edge frame and *counted* (`MelWindow.left_pad_frames`/`right_pad_frames`).
#   `vocode_windows` runs such rows without their padding, grouped by pad counts, so the network pads its own
#   edges exactly as in whole-utterance vocoding: the first and last chunks are exact without waiting for any
#   extra frames. Rows without padding (the steady state) run as one batch of identical shape.
# * `vocode_windows` returns, per row, the centre's audio plus `crossfade_samples` (X) of the look-ahead's audio:
#   [B, T·hop + X]. It is stateless.
# * `StreamJoiner` (one per stream, the only state) blends the held X-sample tail of chunk k into the first X
#   samples of chunk k+1 with a LINEAR fade (weights sum to 1: equal gain, right for two near-identical
#   renderings of one signal; an equal-power fade would add up to 3 dB there), emits exactly T·hop samples per
#   chunk (the whole-utterance timeline, nothing delayed) and holds the new tail. The last chunk's tail is dropped.
#
# With L and R covering the part of the receptive field that matters, the joined audio equals whole-utterance
# vocoding within the bound measured in tests/bench/test_vocoder_windows.py (see models.streaming_vocoder.MEASURED_CONTEXT).

class ChunkError(ValueError):
    """A window or chunk does not fit the stream spec (wrong shape, not enough frames, past the end)."""


def _reflect_indices(indices: torch.Tensor, length: int) -> torch.Tensor:
    """Map frame indices outside [0, length) back inside by reflection about the edge frames (period 2·length − 2)."""
    if length == 1:
        return torch.zeros_like(indices)
    period = 2 * (length - 1)
    folded = torch.remainder(indices, period)
    return torch.where(folded >= length, period - folded, folded)


@dataclass(frozen=True)
class MelWindow:
    """One window [L + T + R, M] and how many of its edge frames are padding (outside the utterance)."""

    frames: torch.Tensor
    left_pad_frames: int
    right_pad_frames: int


def mel_window(mel: torch.Tensor, start_frame: int, centre_frames: int, spec: VocoderStreamSpec,
               stream_ended: bool) -> MelWindow:
    """Window for the centre [start_frame, start_frame + centre_frames) of one stream's mel [N, M].

    Frames outside [0, N) are filled by reflection about the edge frame and counted in the pad fields, which
    `vocode_windows` uses to vocode such windows without their padding (exactly like whole-utterance vocoding).
    `stream_ended` says no more frames will come (N is the stream's length): the look-ahead and even the centre
    may then run past the end (the caller keeps only (N − start)·hop samples of that last chunk). A running
    stream must already hold `spec.frames_needed(start_frame, centre_frames)` frames.
    """
    if mel.dim() != 2:
        raise ChunkError(f"mel must be [N, M], got {tuple(mel.shape)}")
    n = mel.shape[0]
    if centre_frames < 1:
        raise ChunkError(f"centre_frames must be ≥ 1, got {centre_frames}")
    if start_frame < 0 or start_frame >= n:
        raise ChunkError(f"centre start {start_frame} outside the stream's {n} frames")
    if not stream_ended and n < spec.frames_needed(start_frame, centre_frames):
        raise ChunkError(
            f"centre [{start_frame}, {start_frame + centre_frames}) needs "
            f"{spec.frames_needed(start_frame, centre_frames)} frames of a running stream, it has {n}"
        )
    first = start_frame - spec.left_context_frames
    width = spec.window_frames(centre_frames)
    idx = torch.arange(first, first + width, device=mel.device)
    return MelWindow(
        frames=mel.index_select(0, _reflect_indices(idx, n)),
        left_pad_frames=max(0, -first),
        right_pad_frames=max(0, first + width - n),
    )


def vocode_windows(vocoder: nn.Module, windows: torch.Tensor, spec: VocoderStreamSpec,
                   left_pad_frames: Sequence[int] | None = None,
                   right_pad_frames: Sequence[int] | None = None) -> torch.Tensor:
    """Vocode a batch of same-shaped windows [B, L + T + R, M] → [B, T·hop + crossfade_samples].

    Stateless: each row is the centre's audio followed by the first `crossfade_samples` of its look-ahead's
    audio (the tail a `StreamJoiner` blends into the next chunk). Rows with padding at an utterance edge
    (`left_pad_frames[b]`, `right_pad_frames[b]`, from `MelWindow`) are vocoded without it, grouped by their
    pad counts, so the network sees the true utterance edge; audio past the utterance end is zero. Rows
    without padding run as one batch.
    """
    if windows.dim() != 3:
        raise ChunkError(f"windows must be [B, L + T + R, M], got {tuple(windows.shape)}")
    batch, width = windows.shape[0], windows.shape[1]
    left, right = spec.left_context_frames, spec.right_context_frames
    centre = width - left - right
    if centre < 1:
        raise ChunkError(f"window of {width} frames leaves no centre after L={left}, R={right}")
    pads_l = [0] * batch if left_pad_frames is None else [int(p) for p in left_pad_frames]
    pads_r = [0] * batch if right_pad_frames is None else [int(p) for p in right_pad_frames]
    if len(pads_l) != batch or len(pads_r) != batch:
        raise ChunkError(f"pad counts for {len(pads_l)}/{len(pads_r)} rows, windows have {batch}")
    for pl, pr in zip(pads_l, pads_r):
        if not (0 <= pl <= left and 0 <= pr < right + centre):
            raise ChunkError(f"pad counts ({pl}, {pr}) do not fit L={left}, T={centre}, R={right}")
    hop, x = spec.hop_samples, spec.crossfade_samples
    out_len = centre * hop + x
    groups: dict[tuple[int, int], list[int]] = {}
    for b, key in enumerate(zip(pads_l, pads_r)):
        groups.setdefault(key, []).append(b)
    out = None
    with torch.inference_mode():
        for (pl, pr), rows in groups.items():
            sub = windows if len(groups) == 1 else windows[rows]
            audio = vocoder(sub[:, pl: width - pr])
            begin = (left - pl) * hop
            piece = audio[:, begin: begin + out_len]
            if len(groups) == 1 and piece.shape[1] == out_len:
                return piece
            if out is None:
                out = audio.new_zeros(batch, out_len)
            out[rows, : piece.shape[1]] = piece
    return out


def linear_fade_in(samples: int, dtype: torch.dtype = torch.float32, device: torch.device | None = None
                   ) -> torch.Tensor:
    """Fade-in weights [samples], w[i] = (i + 0.5)/samples; the fade-out is 1 − w, so every pair sums to 1."""
    return (torch.arange(samples, dtype=torch.float64, device=device) + 0.5).div(samples).to(dtype)


class StreamJoiner:
    """Per-stream state of chunked vocoding: joins `vocode_windows` rows of consecutive chunks with a linear fade."""

    def __init__(self, spec: VocoderStreamSpec):
        self.spec = spec
        self._tail: torch.Tensor | None = None
        self._done = False
        self.samples_out = 0

    @property
    def pending_samples(self) -> int:
        """Samples held back for the next seam (not part of the emitted timeline yet)."""
        return 0 if self._tail is None else int(self._tail.shape[0])

    def join(self, chunk: torch.Tensor, centre_samples: int | None = None, final: bool = False) -> torch.Tensor:
        """One row of `vocode_windows` [T·hop + X] → the audio to emit now [T·hop] (or [centre_samples]).

        `centre_samples` (default T·hop) shortens a final chunk whose centre ran past the stream's end.
        After `final=True` the joiner accepts nothing more.
        """
        if self._done:
            raise ChunkError("stream already finished")
        if chunk.dim() != 1:
            raise ChunkError(f"chunk must be 1-D audio, got {tuple(chunk.shape)}")
        x = self.spec.crossfade_samples
        full_centre = chunk.shape[0] - x
        if full_centre < 1 or full_centre % self.spec.hop_samples:
            raise ChunkError(f"chunk of {chunk.shape[0]} samples is not T·{self.spec.hop_samples} + {x}")
        n = full_centre if centre_samples is None else centre_samples
        if not 1 <= n <= full_centre:
            raise ChunkError(f"centre_samples {n} outside [1, {full_centre}]")
        out = chunk[:n].clone()
        if self._tail is not None:
            k = min(x, n)
            w = linear_fade_in(x, chunk.dtype, chunk.device)[:k]
            out[:k] = self._tail[:k] * (1 - w) + out[:k] * w
        if final:
            self._tail = None
            self._done = True
        else:
            if n != full_centre:
                raise ChunkError("only the final chunk may be shortened")
            self._tail = chunk[full_centre:].clone() if x else None
        self.samples_out += n
        return out


def stream_vocode(vocoder: nn.Module, mel: torch.Tensor, spec: VocoderStreamSpec,
                  chunk_frames: list[int] | int, first_chunk_frames: int | None = None) -> torch.Tensor:
    """Vocode one whole mel [N, M] chunk by chunk, exactly as a stream would be → [N·hop]. For tests and tools.

    `chunk_frames` is the centre size (or a list of sizes, the last repeated); `first_chunk_frames` overrides the
    first. Every window is cut as the engine would once the whole mel is known (reflection past the end).
    """
    n = mel.shape[0]
    sizes = [chunk_frames] if isinstance(chunk_frames, int) else list(chunk_frames)
    joiner = StreamJoiner(spec)
    pieces = []
    start, i = 0, 0
    while start < n:
        size = first_chunk_frames if (i == 0 and first_chunk_frames) else sizes[min(i, len(sizes) - 1)]
        final = start + size >= n
        win = mel_window(mel, start, size, spec, stream_ended=True)
        row = vocode_windows(vocoder, win.frames[None], spec, [win.left_pad_frames], [win.right_pad_frames])[0]
        pieces.append(joiner.join(row, centre_samples=min(size, n - start) * spec.hop_samples, final=final))
        start += size
        i += 1
    return torch.cat(pieces)
