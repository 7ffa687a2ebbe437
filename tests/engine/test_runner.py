"""The engine over the real Tacotron2 + MB-MelGAN code (tiny random weights): exact chunked, batched audio."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from engine import AsyncEngine, EngineConfig, FinishReason, InvalidRequest, SynthesisRequest
from engine.core import EngineCore
from engine.modules import VocodeJob
from engine.runner import TorchRunner, build_runners
from tests.engine.tiny_voice import make_tiny_voice, whole_utterance

# (ids, seed): utterances of different lengths (they stop after 6–50 decoder steps), so rows join and leave
CASES = [([1, 2, 3, 4, 5, 6, 7, 8, 9, 10][: 2 + s], s) for s in range(8)]
ATOL = 1e-5  # float32 rounding; the tiny vocoder's L/R cover its receptive field, so chunking is exact


@pytest.fixture(scope="module")
def voice():
    return make_tiny_voice()


@pytest.fixture(scope="module")
def references(voice):
    return [whole_utterance(voice, ids, seed) for ids, seed in CASES]


def engine_for(voice, **cfg) -> AsyncEngine:
    base = dict(voices=("tiny",), max_slots=8, first_chunk_frames=8, chunk_frames=12, max_chunk_frames=24)
    base.update(cfg)
    config = EngineConfig(**base)
    return AsyncEngine(EngineCore(config, build_runners(config, {"tiny": voice})))


async def test_concurrent_chunked_audio_equals_whole_utterance(voice, references) -> None:
    engine = engine_for(voice)
    await engine.start()
    streams = [engine.submit(SynthesisRequest(f"r{s}", ids, seed=s)) for ids, s in CASES]
    results = await asyncio.gather(*(st.collect() for st in streams))
    await engine.stop()
    assert engine.counters().max_decode_batch >= 4  # they really shared decoder calls
    lengths = set()
    for (ref_audio, ref_peaks), (audio, chunks, final) in zip(references, results):
        assert final.reason is FinishReason.COMPLETED
        assert len(audio) == len(ref_audio) > 0
        np.testing.assert_allclose(audio, ref_audio.numpy(), atol=ATOL, rtol=0)
        positions = np.concatenate([c.input_positions for c in chunks])
        np.testing.assert_array_equal(positions[: len(ref_peaks)], ref_peaks.numpy())
        # 8 frames, or a larger chunk size when its start was staggered (max_ramping_streams) and mel piled up
        assert len(chunks[0].samples) in (8 * 16, 12 * 16, 24 * 16) or len(chunks) == 1
        lengths.add(len(audio))
    assert len(lengths) >= 4  # utterances of different lengths joined and left the batch


async def test_batched_equals_each_request_alone(voice) -> None:
    alone = []
    for ids, seed in CASES[:5]:
        engine = engine_for(voice)
        await engine.start()
        audio, _, _ = await engine.submit(SynthesisRequest("solo", ids, seed=seed)).collect()
        await engine.stop()
        alone.append(audio)
    engine = engine_for(voice, max_vocode_batch=8, window_bucket_frames=16)
    await engine.start()
    together = await asyncio.gather(
        *(engine.submit(SynthesisRequest(f"b{s}", ids, seed=s)).collect() for ids, s in CASES[:5])
    )
    await engine.stop()
    for solo, (audio, _, _) in zip(alone, together):
        np.testing.assert_allclose(audio, solo, atol=1e-6, rtol=0)


async def test_seed_changes_the_audio(voice) -> None:
    engine = engine_for(voice)
    await engine.start()
    a, _, _ = await engine.submit(SynthesisRequest("a", [1, 2, 3, 4], seed=1)).collect()
    b, _, _ = await engine.submit(SynthesisRequest("b", [1, 2, 3, 4], seed=2)).collect()
    await engine.stop()
    n = min(len(a), len(b))
    assert n > 0 and not np.allclose(a[:n], b[:n])


def test_decode_gather_paths_agree(voice) -> None:
    """Contiguous slots decode through views, scattered ones through index_select: same frames either way."""
    config = EngineConfig(voices=("tiny",), max_slots=4)
    runner = TorchRunner("tiny", voice, config)
    ids = [[1, 2, 3], [4, 5, 6, 7], [2, 2]]
    runner.encode([0, 1, 2], ids, [5, 6, 7])
    runner.decode([0, 1, 2], 3, True)  # contiguous
    runner.decode([0, 2], 4, True)  # scattered
    runner.decode([1], 4, True)
    solo = TorchRunner("tiny", voice, config)
    for slot, (row, seed) in enumerate(zip(ids, [5, 6, 7])):
        solo.encode([3], [row], [seed])
        solo.decode([3], 7, True)
        n = int(runner.decoded[slot])
        assert n == int(solo.decoded[3]) == 14
        torch.testing.assert_close(runner.mel[slot, :n], solo.mel[3, :n], atol=1e-6, rtol=0)
        solo.release(3)


def test_vocode_flush_job_and_release(voice) -> None:
    config = EngineConfig(voices=("tiny",), max_slots=2)
    runner = TorchRunner("tiny", voice, config)
    runner.encode([1], [[1, 2, 3]], [0])
    runner.decode([1], 10, True)
    n = int(runner.decoded[1])
    out = runner.vocode([VocodeJob(1, 0, n, utterance_frames=n, first=True, last=True)])
    assert out[0].shape == (n * 16,) and out[0].dtype == np.float32
    assert 1 not in runner.joiners
    assert runner.vocode([VocodeJob(1, n, n, utterance_frames=n, first=False, last=True)])[0].size == 0
    runner.release(1)
    assert bool(runner.state.finished[1]) and runner.decoded[1] == 0


async def test_ids_out_of_the_voice_range_are_invalid(voice) -> None:
    engine = engine_for(voice)
    await engine.start()
    with pytest.raises(InvalidRequest):
        engine.submit(SynthesisRequest("bad", [1, 99]))
    with pytest.raises(InvalidRequest):
        engine.submit(SynthesisRequest("long", [1] * 33))  # tiny max_input_len is 32
    await engine.stop()


def test_decode_over_a_span_with_finished_gaps(voice) -> None:
    """Rows 0 and 2 decode as one view of rows 0..2 when row 1 is free: same frames as decoding them alone."""
    config = EngineConfig(voices=("tiny",), max_slots=4)
    runner = TorchRunner("tiny", voice, config)
    runner.encode([0, 1, 2], [[1, 2, 3], [4, 5], [2, 2, 6]], [5, 6, 7])
    runner.release(1)
    assert runner._span([0, 2]) == [0, 1, 2]
    rows = runner.decode([0, 2], 6, True)
    assert rows.peaks.shape == (2, 6) and int(runner.decoded[1]) == 0
    solo = TorchRunner("tiny", voice, config)
    for slot, (ids, seed) in ((0, ([1, 2, 3], 5)), (2, ([2, 2, 6], 7))):
        solo.encode([3], [ids], [seed])
        solo.decode([3], 6, True)
        n = int(solo.decoded[3])
        assert int(runner.decoded[slot]) == n
        torch.testing.assert_close(runner.mel[slot, :n], solo.mel[3, :n], atol=1e-6, rtol=0)
        solo.release(3)


def test_cpu_runner_never_builds_cuda_graphs(voice) -> None:
    from engine.cuda_graphs import CudaGraphs

    runner = TorchRunner("tiny", voice, EngineConfig(voices=("tiny",), max_slots=2, cuda_graphs=True))
    assert runner.graphs is None
    with pytest.raises(ValueError):
        CudaGraphs(runner, runner.config)
