"""mel_after per slot, each frame computed once: the postnet stage of TorchRunner (two interchangeable forms).

`StreamedPostnet` (default): every decoded frame goes through the postnet once (models/streaming_postnet.py, one
state row per slot, reset with the slot). `WindowPostnet` (`EngineConfig.vocoder_fast_path: false`, the reference):
each call recomputes the frames [have − ctx, end + ctx) around the new ones, 2·ctx = 20 frames more per chunk on
Baker. Both write mel_after frames [have, end) of each asked slot, equal to the whole-utterance postnet.

A row's mel_before is final up to its decoded frame count, and past it once the row finished decoding (zeros: the
runner's buffer is zero past a row's last frame, as the whole-utterance postnet's tail); the scheduler asks for
frames up to `end` only when `end + ctx` is final (engine/scheduler.py), so a streamed row never takes a frame
that changes later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from engine.batching import bucket_up
from models.streaming_postnet import StreamingPostnet
from models.tacotron2 import Tacotron2
from models.transfer import device_tensor


@dataclass(frozen=True)
class PostnetAsk:
    """One slot's need: mel_after up to `end_frame`; mel_before is final below `final_frames`."""

    slot: int
    end_frame: int
    final_frames: int


class WindowPostnet:
    """The reference: a window of ctx frames each side recomputed per call, rows padded to one bucketed width."""

    def __init__(self, acoustic: Tacotron2, slots: int, bucket_frames: int, max_frames: int) -> None:
        self.acoustic, self.bucket_frames, self.max_frames = acoustic, bucket_frames, max_frames
        self.ctx = acoustic.postnet_context_frames
        self.ready = [0] * slots  # mel_after frames computed per slot

    def reset(self, slots: Sequence[int]) -> None:
        for slot in slots:
            self.ready[slot] = 0

    def warm(self, call_widths: Sequence[int]) -> None:
        """Build the kernels of the calls that go with vocoder calls of these widths (batch 1)."""
        n_mels = self.acoustic.config.n_mels
        for width in sorted({bucket_up(w + 2 * self.ctx, self.bucket_frames) for w in call_widths}):
            self.acoustic.postnet(torch.zeros(1, width, n_mels, dtype=self.acoustic.residual_projection.weight.dtype,
                                              device=self.acoustic.residual_projection.weight.device))

    def run(self, mel: torch.Tensor, mel_after: torch.Tensor, asks: Sequence[PostnetAsk]) -> None:
        todo = [(a.slot, max(0, self.ready[a.slot] - self.ctx), self.ready[a.slot], a.end_frame)
                for a in asks if a.end_frame > self.ready[a.slot]]
        if not todo:
            return
        width = bucket_up(max(end + self.ctx - lo for _, lo, _, end in todo), self.bucket_frames)
        batch = mel.new_zeros(len(todo), width, mel.shape[2])
        for i, (slot, lo, _, end) in enumerate(todo):
            hi = min(end + self.ctx, self.max_frames)
            batch[i, : hi - lo] = mel[slot, lo:hi]  # frames past the decoded end are zeros, as whole-utterance
        after = self.acoustic.postnet(batch)
        for i, (slot, lo, first, end) in enumerate(todo):
            mel_after[slot, first:end] = after[i, first - lo: end - lo]
            self.ready[slot] = end


class StreamedPostnet:
    """Each frame through the postnet once, in calls of few widths: kernels are built per (batch, width) shape
    (oneDNN keeps each, docs/reliability.md §5.2), so a width is a multiple of `bucket_frames`, or shorter than
    it, or a first call's minimum plus less than `bucket_frames`. A row may take frames past what it needs, up to
    what is final (a finished row's zeros past its end), to share a call or to reach a multiple; a row that cannot
    is fed the largest multiple first and the rest in a second call, which carries the state over exactly."""

    def __init__(self, acoustic: Tacotron2, slots: int, bucket_frames: int, max_frames: int) -> None:
        self.streamer = StreamingPostnet(acoustic, slots)
        self.bucket_frames, self.max_frames = bucket_frames, max_frames
        self.ctx = self.streamer.delay_frames
        self.fed = [0] * slots  # mel_before frames fed per slot; mel_after is ready below fed − ctx

    def reset(self, slots: Sequence[int]) -> None:
        self.streamer.reset(list(slots))
        for slot in slots:
            self.fed[slot] = 0

    def widths(self, max_frames: int) -> list[int]:
        """Every width a call can take when no row needs more than `max_frames` frames (warm-up, tests)."""
        b, first = self.bucket_frames, self.streamer.min_first_frames
        return sorted({*range(1, b), *range(b, bucket_up(max_frames, b) + 1, b), *range(first, first + b)})

    def warm(self, call_widths: Sequence[int]) -> None:
        """Build the kernels of the calls that go with vocoder calls of these widths (batch 1, first and later
        calls: a first call takes the delay on top), in slot 0, which is reset afterwards."""
        weight = self.streamer.projection.weight
        for width in self.widths(max(call_widths) + self.ctx):
            frames = torch.zeros(1, width, self.streamer.n_mels, dtype=weight.dtype, device=weight.device)
            for first in ((True, False) if width >= self.streamer.min_first_frames else (False,)):
                self.streamer.step([0], frames, [first])
        self.reset([0])

    def _groups(self, asks: Sequence[PostnetAsk]) -> dict[int, list[int]]:
        """One pass: frames to feed → slots fed that many (a row split in two gets the rest in the next pass)."""
        rows = []
        for a in asks:
            fed = self.fed[a.slot]
            need = a.end_frame + self.ctx - fed
            if need <= 0:
                continue
            least = 1  # the fewest frames a call of this row may take
            if fed == 0:
                least = self.streamer.min_first_frames
                need = max(need, least)
            # frames it may take without reading mel that is not final yet; a caller asking past them (the
            # scheduler never does) gets them as the zeros the buffer holds, as the window path would
            room = max(need, min(a.final_frames, self.max_frames) - fed)
            rows.append((need, room, least, a.slot))
        groups: dict[int, list[int]] = {}
        b = self.bucket_frames
        for need, room, least, slot in sorted(rows, reverse=True):
            width = next((w for w in sorted(groups) if need <= w <= room), None)
            if width is None:
                up, down = bucket_up(need, b), need - need % b
                if up <= room:
                    width = up
                elif down >= least:
                    width = down  # the rest (< b frames) in the next pass
                else:
                    width = need  # < b, or a first call's minimum plus < b
            groups.setdefault(width, []).append(slot)
        return groups

    def run(self, mel: torch.Tensor, mel_after: torch.Tensor, asks: Sequence[PostnetAsk]) -> None:
        while groups := self._groups(asks):
            for width, slots in sorted(groups.items()):
                fed = device_tensor([self.fed[s] for s in slots], mel.device)
                rows = device_tensor(slots, mel.device).unsqueeze(1)
                batch = mel[rows, fed.unsqueeze(1) + torch.arange(width, device=mel.device)]
                after = self.streamer.step(slots, batch, [self.fed[s] == 0 for s in slots])
                for i, slot in enumerate(slots):
                    lo = self.fed[slot] - self.ctx  # frame of after[i, 0]; before 0 on a first call: pre-roll
                    mel_after[slot, max(0, lo): lo + width] = after[i, max(0, -lo):]
                    self.fed[slot] += width
