"""Speaking rate in the engine (tiny random voice): audio equals the whole-utterance time-scaled mel vocoded once,
at every rate, batched with other rates; the alignment follows the scaled audio; a slot never leaks rate state."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from engine import AsyncEngine, EngineConfig, FinishReason, InvalidRequest, SynthesisRequest
from engine.audio_cache import CacheKey
from engine.core import EngineCore
from engine.runner import build_runners
from models.mel_time_scale import time_scale
from models.time_scale_frames import output_frames, step_start_sample
from tests.engine.tiny_voice import make_tiny_voice

CASES = [([1, 2, 3, 4, 5, 6, 7, 8, 9, 10][: 3 + s], s) for s in range(6)]
RATES = (0.5, 1.0, 2.0)
ATOL = 1e-5  # float32 rounding of batched vs whole vocoding (the tempo change itself is exact to the bit)


@pytest.fixture(scope="module")
def voice():
    return make_tiny_voice()


def reference(voice, ids, seed, speaking_rate):
    """(audio [N], peaks, mel frames): synthesize, time-scale the whole mel, one vocoder pass."""
    mel_after, peaks = voice.acoustic.synthesize(torch.tensor(ids), seed=seed, dropout=True)
    with torch.inference_mode():
        audio = voice.vocoder(time_scale(mel_after, speaking_rate).unsqueeze(0))[0]
    return audio.numpy(), peaks.numpy(), mel_after.shape[0]


def engine_for(voice, **cfg) -> AsyncEngine:
    base = dict(voices=("tiny",), max_slots=8, first_chunk_frames=8, chunk_frames=12, max_chunk_frames=24)
    base.update(cfg)
    config = EngineConfig(**base)
    return AsyncEngine(EngineCore(config, build_runners(config, {"tiny": voice})))


def test_rate_is_validated_on_the_request():
    for bad in (0.49, 2.5, float("nan"), 0.0):
        with pytest.raises(InvalidRequest, match="0.5 to 2"):
            SynthesisRequest("r", (1, 2), speaking_rate=bad)
    assert SynthesisRequest("r", (1, 2), speaking_rate=2).speaking_rate == 2.0


def test_a_different_rate_never_shares_a_cache_key():
    keys = {CacheKey.of(SynthesisRequest("r", (1, 2, 3), speaking_rate=r), "tiny", "v1") for r in (0.5, 1.0, 1.25, 2.0)}
    assert len(keys) == 4
    assert CacheKey.of(SynthesisRequest("a", (1, 2, 3), speaking_rate=1.25), "tiny", "v1") == \
        CacheKey.of(SynthesisRequest("b", (1, 2, 3), speaking_rate=1.25), "tiny", "v1")


async def test_rates_batched_together_equal_whole_utterance_time_scaling(voice) -> None:
    engine = engine_for(voice)
    runner = engine.backend.runners["tiny"]
    hop, r = runner.timing.hop_samples, runner.timing.reduction_factor
    await engine.start()
    jobs = [(ids, seed, RATES[i % 3]) for i, (ids, seed) in enumerate(CASES)]
    streams = [engine.submit(SynthesisRequest(f"r{i}", ids, seed=seed, speaking_rate=speaking_rate))
               for i, (ids, seed, speaking_rate) in enumerate(jobs)]
    results = await asyncio.gather(*(st.collect() for st in streams))
    await engine.stop()
    assert engine.counters().max_vocode_batch >= 2
    ahead_seen = 0
    for (ids, seed, speaking_rate), (audio, chunks, final) in zip(jobs, results):
        ref_audio, ref_peaks, n_frames = reference(voice, ids, seed, speaking_rate)
        assert final.reason is FinishReason.COMPLETED
        assert len(audio) == len(ref_audio) == output_frames(n_frames, speaking_rate) * hop  # ~1/rate of the natural length
        np.testing.assert_allclose(audio, ref_audio, atol=ATOL, rtol=0)
        positions = np.concatenate([c.input_positions for c in chunks])
        starts = np.concatenate([c.step_start_samples for c in chunks])
        np.testing.assert_array_equal(positions, ref_peaks[: len(positions)])
        np.testing.assert_array_equal(starts, [step_start_sample(k, hop, r, speaking_rate) for k in range(len(starts))])
        for c in chunks:  # each chunk carries exactly the steps whose audio starts inside it
            assert all(c.start_sample <= s < c.start_sample + len(c.samples) for s in c.step_start_samples)
        assert len(positions) == sum(1 for k in range(len(ref_peaks)) if step_start_sample(k, hop, r, speaking_rate) < len(audio))
        steps_so_far = 0
        for c in chunks:  # the decided steps past each chunk: the reference's next peaks, their audio still to come
            steps_so_far += len(c.input_positions)
            ahead = range(steps_so_far, steps_so_far + len(c.ahead_positions))
            np.testing.assert_array_equal(c.ahead_positions, ref_peaks[ahead.start: ahead.stop])
            np.testing.assert_array_equal(c.ahead_step_start_samples, [step_start_sample(k, hop, r, speaking_rate) for k in ahead])
            assert all(c.start_sample + len(c.samples) <= s < len(audio) for s in c.ahead_step_start_samples)
        ahead_seen += sum(len(c.ahead_positions) for c in chunks)
    assert ahead_seen > 0  # the decoder runs ahead of the vocoder: chunks do carry decided steps


async def test_rate_two_is_half_as_long_and_rate_half_twice(voice) -> None:
    engine = engine_for(voice)
    await engine.start()
    ids, seed = CASES[-1]
    lengths = {}
    for speaking_rate in RATES:
        audio, _, _ = await engine.submit(SynthesisRequest(f"x{speaking_rate}", ids, seed=seed, speaking_rate=speaking_rate)).collect()
        lengths[speaking_rate] = len(audio)
    await engine.stop()
    hop = engine.backend.runners["tiny"].timing.hop_samples
    assert abs(lengths[2.0] - lengths[1.0] / 2) <= hop
    assert abs(lengths[0.5] - lengths[1.0] * 2) <= hop


async def test_slot_reuse_after_cancel_never_leaks_rate_state(voice) -> None:
    engine = engine_for(voice, max_slots=1)
    core = engine.backend
    runner = core.runners["tiny"]
    ids, seed = list(range(1, 11)), 7  # the tiny voice's longest: 44 frames, several chunks at rate 0.5
    real_step = runner.scaler.step
    calls: list[int] = []

    def step_then_cancel(rows):
        out = real_step(rows)
        calls.append(len(rows))
        if len(calls) == 1:
            core.cancel("slow")  # mid-utterance: the tempo row holds state
            assert runner.scaler.fed[0] > 0 and runner.scaler.speaking_rate[0] == 0.5
        return out

    await engine.start()
    runner.scaler.step = step_then_cancel
    _, _, final = await engine.submit(SynthesisRequest("slow", ids, seed=seed, speaking_rate=0.5)).collect()
    assert final.reason is FinishReason.CANCELLED
    for _ in range(2000):
        if core.pool.num_active == 0:
            break
        await asyncio.sleep(0.01)
    assert runner.scaler.speaking_rate[0] == 1.0 and runner.scaler.fed[0] == 0 and not runner.scaler.carry[0].any()
    for speaking_rate in (1.0, 2.0):  # the same slot, next callers: exact at their own rate
        audio, _, final = await engine.submit(SynthesisRequest(f"n{speaking_rate}", ids, seed=seed, speaking_rate=speaking_rate)).collect()
        assert final.reason is FinishReason.COMPLETED
        np.testing.assert_allclose(audio, reference(voice, ids, seed, speaking_rate)[0], atol=ATOL, rtol=0)
    await engine.stop()
