"""The mel tempo change: frame arithmetic, and streamed == whole-utterance to the bit for any split, rate and batch."""

from __future__ import annotations

import math
import random

import pytest
import torch

from models.mel_time_scale import MelTimeScaler, ScaleRow, TimeScaleError, check_rate, time_scale
from models.time_scale_frames import (
    input_frames_needed,
    inputs_started_before,
    output_frames,
    ready_output_frames,
    step_start_sample,
    steps_started_before,
)

RATES = (0.5, 0.8, 1.0, 1.25, 2.0, 0.73, 1.9)
M = 6


def test_frame_arithmetic_against_brute_force():
    for speaking_rate in RATES:
        p = [j * speaking_rate for j in range(600)]
        for n in range(0, 150):
            assert output_frames(n, speaking_rate) == sum(1 for x in p if x < n)
            assert ready_output_frames(n, speaking_rate) == (0 if n == 0 else sum(1 for x in p if math.ceil(x) <= n - 1))
            need = input_frames_needed(n, speaking_rate)
            assert ready_output_frames(need, speaking_rate) >= n  # the frames needed make the outputs
            assert n == 0 or ready_output_frames(need - 1, speaking_rate) < n  # and no fewer would
            assert inputs_started_before(n, speaking_rate) == sum(1 for i in range(400) if output_frames(i, speaking_rate) < n)


def test_rate_one_is_the_identity_arithmetic():
    for n in range(50):
        assert output_frames(n, 1.0) == ready_output_frames(n, 1.0) == input_frames_needed(n, 1.0) == n
    assert steps_started_before(6051, 300, 2, 1.0) == -(-6051 // 600)


@pytest.mark.parametrize("speaking_rate", RATES)
def test_steps_started_before_matches_step_starts(speaking_rate):
    for sample in range(0, 20000, 97):
        assert steps_started_before(sample, 300, 2, speaking_rate) == sum(
            1 for k in range(200) if step_start_sample(k, 300, 2, speaking_rate) < sample)


def test_whole_utterance_lengths_and_values():
    mel = torch.randn(40, M)
    assert torch.equal(time_scale(mel, 1.0), mel)
    slow, fast = time_scale(mel, 0.5), time_scale(mel, 2.0)
    assert slow.shape[0] == 80 and fast.shape[0] == 20
    assert torch.equal(fast, mel[::2])  # whole positions: no interpolation
    assert torch.allclose(slow[1], (mel[0] + mel[1]) / 2)
    assert torch.equal(slow[-1], mel[-1])  # past the last frame: the last frame again
    for bad in (0.49, 2.01, float("nan")):
        with pytest.raises(ValueError, match="0.5 to 2"):
            check_rate(bad)


def _stream(scaler: MelTimeScaler, slot: int, mel: torch.Tensor, out_sizes: list[int]) -> torch.Tensor:
    """Stream one utterance asking for output chunks of out_sizes (the last repeats), feeding only what they need."""
    n, pieces, made, i = mel.shape[0], [], 0, 0
    total = output_frames(n, scaler.speaking_rate[slot])
    while made < total:
        want = min(out_sizes[min(i, len(out_sizes) - 1)], total - made)
        need = min(n, scaler.needed(slot, made + want))
        final = made + want == total
        if final:
            need = n
        pieces.append(scaler.step([ScaleRow(slot, mel[scaler.fed[slot]: need], want, final)])[0])
        made, i = made + want, i + 1
    return torch.cat(pieces)


@pytest.mark.parametrize("speaking_rate", RATES)
@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, 24, 48, 96])
def test_streamed_equals_whole(speaking_rate, size):
    torch.manual_seed(size)
    mel = torch.randn(131, M)
    scaler = MelTimeScaler(4, M)
    scaler.start(2, speaking_rate)
    assert torch.equal(_stream(scaler, 2, mel, [size]), time_scale(mel, speaking_rate))


def test_random_splits_and_batched_rows_of_different_ages_and_rates():
    rng = random.Random(7)
    scaler = MelTimeScaler(6, M)
    for trial in range(12):
        n_rows = rng.randint(1, 5)
        slots = rng.sample(range(6), n_rows)
        mels = {s: torch.randn(rng.randint(1, 150), M) for s in slots}
        rates = {s: rng.choice(RATES) for s in slots}
        for s in slots:
            scaler.start(s, rates[s])
        totals = {s: output_frames(mels[s].shape[0], rates[s]) for s in slots}
        got: dict[int, list[torch.Tensor]] = {s: [] for s in slots}
        made = {s: 0 for s in slots}
        while any(made[s] < totals[s] for s in slots):
            live = [s for s in slots if made[s] < totals[s] and rng.random() < 0.8] or \
                   [next(s for s in slots if made[s] < totals[s])]
            rows = []
            for s in live:
                want = min(rng.randint(1, 96), totals[s] - made[s])
                n = mels[s].shape[0]
                need = min(n, scaler.needed(s, made[s] + want))
                final = made[s] + want == totals[s]
                if final:
                    need = n
                rows.append(ScaleRow(s, mels[s][scaler.fed[s]: need], want, final))
                made[s] += want
            for row, out in zip(rows, scaler.step(rows)):
                got[row.slot].append(out)
        for s in slots:
            assert torch.equal(torch.cat(got[s]), time_scale(mels[s], rates[s])), (trial, s, rates[s])


def test_reset_forgets_the_slot_and_bad_calls_are_refused():
    mel = torch.randn(30, M)
    scaler = MelTimeScaler(2, M)
    scaler.start(0, 2.0)
    scaler.step([ScaleRow(0, mel[:10], 4)])
    with pytest.raises(TimeScaleError, match="outputs asked"):
        scaler.step([ScaleRow(0, mel[10:11], 10)])
    scaler.reset([0])
    assert scaler.speaking_rate[0] == 1.0 and scaler.fed[0] == 0 and not scaler.carry[0].any()
    scaler.start(0, 0.8)  # the slot's next utterance hears nothing of the last one
    assert torch.equal(_stream(scaler, 0, mel, [5]), time_scale(mel, 0.8))
    with pytest.raises(TimeScaleError, match="ended"):
        scaler.step([ScaleRow(0, mel[:1], 1)])
