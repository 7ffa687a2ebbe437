"""The engine over the real Tacotron2 + MB-MelGAN code (tiny random weights): exact chunked, batched audio."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from engine import AsyncEngine, EngineConfig, FinishReason, InvalidRequest, SynthesisRequest
from engine.errors import RequestFailed
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


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "reference-layers"])
async def test_concurrent_chunked_audio_equals_whole_utterance(voice, references, fast_path) -> None:
    """Both postprocess paths (streamed postnet + fused vocoder layers, and the fallback) give the exact audio."""
    engine = engine_for(voice, vocoder_fast_path=fast_path)
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
        # 8 frames, or a larger chunk size when its start was staggered (max_ramping_streams) and mel piled up:
        # the first call feeds that plus the vocoder's delay and gets the audio its receptive field allows
        runner = engine.backend.runners["tiny"]
        firsts = {w * 16 - runner.streamer.lookahead_samples for w in runner.first_widths()}
        assert len(chunks[0].samples) in firsts or len(chunks) == 1
        lengths.add(len(audio))
    assert len(lengths) >= 4  # utterances of different lengths joined and left the batch


async def test_starving_streams_short_chunks_give_the_exact_audio(voice, references) -> None:
    """Streams that are always starving (starving_buffer_ms huge) and whose decoder gains at most 4 frames per
    iteration vocode 4-frame short chunks (min_chunk_frames, multiples of window_bucket_frames): the joined audio
    is still the whole utterance's, and the short width really ran."""
    engine = engine_for(voice, starving_buffer_ms=1e9, min_chunk_frames=4, window_bucket_frames=4,
                        decode_steps_per_iteration=1, max_decode_steps_per_iteration=2)
    assert engine.backend.runners["tiny"].config.short_chunk_sizes() == (4, 8)
    await engine.start()
    results = await asyncio.gather(*(engine.submit(SynthesisRequest(f"r{s}", ids, seed=s)).collect()
                                     for ids, s in CASES))
    await engine.stop()
    short = 0
    for (ref_audio, _), (audio, chunks, final) in zip(references, results):
        assert final.reason is FinishReason.COMPLETED
        np.testing.assert_allclose(audio, ref_audio.numpy(), atol=ATOL, rtol=0)
        short += sum(1 for c in chunks[1:-1] if len(c.samples) == 4 * 16)
    assert short >= 4


async def test_bf16_vocoder_streams_close_to_fp32_and_leaves_the_voice_fp32(voice, references) -> None:
    """vocoder_dtype=bfloat16 runs a bf16 copy of the vocoder: the audio stays close to the exact fp32 audio (bf16
    keeps 8 bits of mantissa; its speech quality is measured with DNSMOS, docs/benchmarks.md) and the voice's
    own vocoder stays float32."""
    engine = engine_for(voice, vocoder_dtype="bfloat16")
    assert next(engine.backend.runners["tiny"].vocoder.parameters()).dtype == torch.bfloat16
    assert next(voice.vocoder.parameters()).dtype == torch.float32
    await engine.start()
    results = await asyncio.gather(*(engine.submit(SynthesisRequest(f"r{s}", ids, seed=s)).collect()
                                     for ids, s in CASES[:4]))
    await engine.stop()
    for (ref_audio, _), (audio, _, final) in zip(references, results):
        assert final.reason is FinishReason.COMPLETED and audio.dtype == np.float32
        assert len(audio) == len(ref_audio)
        ref = ref_audio.numpy()
        assert np.linalg.norm(audio - ref) <= 0.05 * np.linalg.norm(ref)


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
    """A whole utterance in one call, or fed whole and then flushed by an empty last call, gives all its audio;
    release zeroes the slot's vocoder row."""
    config = EngineConfig(voices=("tiny",), max_slots=2)
    runner = TorchRunner("tiny", voice, config)
    runner.encode([1], [[1, 2, 3]], [0])
    runner.decode([1], 10, True)
    n = int(runner.decoded[1])
    out = runner.vocode([VocodeJob(1, 0, n, utterance_frames=n, first=True, last=True)])
    assert out[0].shape == (n * 16,) and out[0].dtype == np.float32
    runner.release(1)
    assert all(float(slab[1].abs().sum()) == 0 for slab in runner.streamer.cache.slabs.values())
    runner.encode([1], [[1, 2, 3]], [0])
    runner.decode([1], 10, True)
    fed = runner.vocode([VocodeJob(1, 0, n, utterance_frames=None, first=True, last=False)])[0]
    assert fed.size == n * 16 - runner.streamer.lookahead_samples  # held back: the vocoder's look-ahead
    flushed = runner.vocode([VocodeJob(1, n, n, utterance_frames=n, first=False, last=True)])[0]
    np.testing.assert_allclose(np.concatenate([fed, flushed]), out[0], atol=1e-5, rtol=0)
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


# ---------------------------------------------------------------- vocoder state rows: faults and slot reuse

def _row_is_zero(runner, slot: int) -> bool:
    return all(float(slab[slot].abs().sum()) == 0 for slab in runner.streamer.cache.slabs.values())


async def _until(predicate, timeout_s: float = 20.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_cancel_mid_chunk_frees_and_resets_the_vocoder_row_and_the_next_caller_is_exact(voice, references
                                                                                               ) -> None:
    """The request is cancelled while its vocoder call runs: its slot is freed and its vocoder row zeroed; the
    next request in that slot (the pool's only one) gets exact audio, nothing of the previous caller's state."""
    engine = engine_for(voice, max_slots=1)
    core = engine.backend
    runner = core.runners["tiny"]
    real_step = runner.streamer.step
    seen: list[list[int]] = []

    def step_then_cancel(rows, *args, **kwargs):
        out = real_step(rows, *args, **kwargs)
        seen.append(list(rows))
        if len(seen) == 1:
            core.cancel("victim")  # mid-chunk: this call's audio is computed, the row holds the stream's state
            assert not _row_is_zero(runner, rows[0])
        return out

    await engine.start()
    runner.streamer.step = step_then_cancel
    ids, seed = CASES[7]  # a long utterance: several chunks would follow
    _, chunks, final = await engine.submit(SynthesisRequest("victim", ids, seed=seed)).collect()
    assert final.reason is FinishReason.CANCELLED
    await _until(lambda: core.pool.num_active == 0)
    assert _row_is_zero(runner, 0)
    audio, _, final = await engine.submit(SynthesisRequest("next", ids, seed=seed)).collect()
    await engine.stop()
    assert final.reason is FinishReason.COMPLETED and seen[-1] == [0]
    np.testing.assert_allclose(audio, references[7][0].numpy(), atol=ATOL, rtol=0)


async def test_failed_vocoder_batch_fails_only_its_requests_and_resets_their_rows(voice, references) -> None:
    """One chunk per vocoder call: the failing call fails its one request and zeroes its row; the others stay
    exact, and the failed slot serves the next request exactly."""
    engine = engine_for(voice, max_slots=4, max_ramping_streams=0, max_vocode_batch=1)
    core = engine.backend
    runner = core.runners["tiny"]
    real_step = runner.streamer.step
    failed_rows: list[int] = []

    def failing_step(rows, mel, first, last_frames):
        if not failed_rows and any(first):  # the first vocoder call fails, after touching its row's state
            real_step(rows, mel, first, last_frames)
            failed_rows.extend(rows)
            raise RuntimeError("injected vocoder failure")
        return real_step(rows, mel, first, last_frames)

    async def outcome(stream):
        try:
            audio, _, final = await stream.collect()
        except RequestFailed as exc:
            assert exc.module == "vocode"
            return None
        assert final.reason is FinishReason.COMPLETED
        return audio

    await engine.start()
    runner.streamer.step = failing_step
    results = await asyncio.gather(*(outcome(engine.submit(SynthesisRequest(f"f{s}", ids, seed=s)))
                                     for ids, s in CASES[:4]))
    await _until(lambda: core.pool.num_active == 0)
    assert len(failed_rows) == 1 and _row_is_zero(runner, failed_rows[0])
    assert sum(r is None for r in results) == 1
    for (ref, _), audio in zip(references[:4], results):
        if audio is not None:
            np.testing.assert_allclose(audio, ref.numpy(), atol=ATOL, rtol=0)
    again = await asyncio.gather(*(outcome(engine.submit(SynthesisRequest(f"g{s}", ids, seed=s)))
                                   for ids, s in CASES[:4]))
    await engine.stop()
    for (ref, _), audio in zip(references[:4], again):
        np.testing.assert_allclose(audio, ref.numpy(), atol=ATOL, rtol=0)
