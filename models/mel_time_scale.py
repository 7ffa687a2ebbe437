"""Speaking rate as a tempo change of the mel before the vocoder (pitch kept): whole-utterance and streamed per slot.

Output frame j is the linear interpolation of input frames ⌊j·ρ⌋ and ⌊j·ρ⌋ + 1 at weight frac(j·ρ) (the frame
past the utterance's last is the last one again); models/time_scale_frames.py has the frame arithmetic. The
vocoder sees an ordinary mel, only ρ times shorter: pitch and spectral envelope stay, the pace changes.

`MelTimeScaler(slots, n_mels)` streams it: per slot a row of preallocated state (the rate, input frames fed,
output frames made, the last two input frames fed), so each call takes only the new input frames and returns
exactly the output frames asked for. Joined, a row's outputs equal `time_scale` of the whole utterance to the
bit (same products, same interpolation per element), for any split of the input (tests/models/test_mel_time_scale.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from models.time_scale_frames import (
    RATE_RANGE,
    input_frames_needed,
    output_frames,
    ready_output_frames,
)
from models.transfer import device_tensor

CARRY_FRAMES = 2  # input frames a row keeps: the next output reads at most two frames back from the last fed


def check_rate(speaking_rate: float) -> float:
    """A rate within RATE_RANGE as float; ValueError naming the range otherwise (NaN included)."""
    lo, hi = RATE_RANGE
    if not lo <= speaking_rate <= hi:
        raise ValueError(f"speaking rate {speaking_rate!r} is out of range; use {lo:g} to {hi:g} (1.0 = natural rate)")
    return float(speaking_rate)


def _positions(first_out: int, n_out: int, speaking_rate: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(⌊p_j⌋ int64 [n], frac(p_j) float64 [n]) for outputs j = first_out … first_out + n − 1."""
    j = torch.arange(first_out, first_out + n_out, dtype=torch.float64)
    p = j * float(speaking_rate)
    base = torch.floor(p)
    return base.long(), p - base


def _lerp(a: torch.Tensor, b: torch.Tensor, frac: torch.Tensor) -> torch.Tensor:
    """a + frac·(b − a) per frame: a, b [..., n, M], frac [..., n] float64 (cast to a's dtype)."""
    return torch.lerp(a, b, frac.to(a.dtype).unsqueeze(-1).expand_as(a))


def time_scale(mel: torch.Tensor, speaking_rate: float) -> torch.Tensor:
    """Whole-utterance tempo change: mel [N, M] → [output_frames(N, rate), M] (rate 1: a copy of mel)."""
    speaking_rate = check_rate(speaking_rate)
    n = mel.shape[0]
    m = output_frames(n, speaking_rate)
    base, frac = _positions(0, m, speaking_rate)
    nxt = torch.clamp(base + 1, max=n - 1)
    return _lerp(mel[base.to(mel.device)], mel[nxt.to(mel.device)], frac.to(mel.device))


class TimeScaleError(ValueError):
    """A streaming call asks for outputs its rows cannot make (input not fed yet, or already dropped)."""


@dataclass(frozen=True)
class ScaleRow:
    """One row of a `MelTimeScaler.step` call: its slot, new input frames [n, M], outputs wanted, and whether the
    new frames end the utterance (then the frame after the last is the last one again)."""

    slot: int
    frames: torch.Tensor
    n_out: int
    final: bool = False


class MelTimeScaler:
    """Streams `time_scale` per slot: state rows allocated once for `slots`, reset with the slot."""

    def __init__(self, slots: int, n_mels: int, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> None:
        self.slots, self.n_mels = slots, n_mels
        self.device = torch.device(device)
        self.carry = torch.zeros(slots, CARRY_FRAMES, n_mels, device=self.device, dtype=dtype)
        self.speaking_rate = [1.0] * slots
        self.fed = [0] * slots  # input frames fed per slot
        self.made = [0] * slots  # output frames returned per slot
        self.ended = [False] * slots

    def start(self, slot: int, speaking_rate: float) -> None:
        """A new utterance in `slot` at `rate` (forgets the slot's previous one)."""
        self.reset([slot])
        self.speaking_rate[slot] = check_rate(speaking_rate)

    def reset(self, slots: Sequence[int]) -> None:
        """Forget these slots' utterances (release, cancel, failed batch): rate 1, nothing fed, carry zeroed."""
        if not slots:
            return
        self.carry.index_fill_(0, device_tensor(slots, self.device), 0)
        for s in slots:
            self.speaking_rate[s], self.fed[s], self.made[s], self.ended[s] = 1.0, 0, 0, False

    def needed(self, slot: int, n_out_total: int) -> int:
        """Input frames the slot must have been fed (in total) for outputs [0, n_out_total) while it goes on."""
        return input_frames_needed(n_out_total, self.speaking_rate[slot])

    def available(self, slot: int, n_in_total: int, final: bool) -> int:
        """Outputs (in total) the slot can make once fed n_in_total input frames (`final`: that is all of them)."""
        speaking_rate = self.speaking_rate[slot]
        return output_frames(n_in_total, speaking_rate) if final else ready_output_frames(n_in_total, speaking_rate)

    def step(self, rows: Sequence[ScaleRow]) -> list[torch.Tensor]:
        """Feed each row its new input frames; return exactly `n_out` next output frames per row ([n_out, M] each).

        One batched gather + interpolation over all rows; each row's state advances and keeps its last two input
        frames. A row may ask for fewer outputs than it could make (they come next call), but never for one
        that reads a frame not fed yet or dropped (TimeScaleError).
        """
        if not rows:
            return []
        width = CARRY_FRAMES + max(r.frames.shape[0] for r in rows)
        most = max(r.n_out for r in rows)
        cat = self.carry.new_zeros(len(rows), width, self.n_mels)
        base_idx = torch.zeros(len(rows), max(most, 1), dtype=torch.long)
        next_idx = torch.zeros_like(base_idx)
        fracs = torch.zeros(len(rows), max(most, 1), dtype=torch.float64)
        for b, row in enumerate(rows):
            s, n_in = row.slot, row.frames.shape[0]
            if row.frames.dim() != 2 or row.frames.shape[1] != self.n_mels:
                raise ValueError(f"frames must be [n, {self.n_mels}], got {tuple(row.frames.shape)}")
            if self.ended[s] and n_in:
                raise TimeScaleError(f"slot {s}: its utterance's input already ended; start a new one")
            total = self.fed[s] + n_in
            can = self.available(s, total, row.final) - self.made[s]
            if row.n_out > can:
                raise TimeScaleError(f"slot {s}: {row.n_out} outputs asked, {can} computable from {total} input frames "
                                     f"(feed up to {self.needed(s, self.made[s] + row.n_out)})")
            cat[b, :CARRY_FRAMES] = self.carry[s]
            cat[b, CARRY_FRAMES: CARRY_FRAMES + n_in] = row.frames.to(cat.dtype)
            if row.n_out:
                base, frac = _positions(self.made[s], row.n_out, self.speaking_rate[s])
                origin = self.fed[s] - CARRY_FRAMES  # input index of cat[b, 0]
                if int(base[0]) < max(origin, 0):
                    raise TimeScaleError(f"slot {s}: output {self.made[s]} reads input {int(base[0])}, dropped already: "
                                         "feed input only up to the frames the outputs asked for need")
                nxt = torch.clamp(base + 1, max=total - 1)
                base_idx[b, : row.n_out] = base - origin
                next_idx[b, : row.n_out] = nxt - origin
                fracs[b, : row.n_out] = frac
        dev = self.device
        gather = lambda idx: cat.gather(1, idx.to(dev).unsqueeze(-1).expand(-1, -1, self.n_mels))  # noqa: E731
        scaled = _lerp(gather(base_idx), gather(next_idx), fracs.to(dev))
        out = []
        for b, row in enumerate(rows):
            s, n_in = row.slot, row.frames.shape[0]
            end = CARRY_FRAMES + n_in
            self.carry[s] = cat[b, end - CARRY_FRAMES: end]
            self.fed[s] += n_in
            self.made[s] += row.n_out
            self.ended[s] = self.ended[s] or row.final
            out.append(scaled[b, : row.n_out])
        return out
