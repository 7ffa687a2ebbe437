"""Baselines (benchmarks only): same API and models as the engine, same audio."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine import AsyncEngine, EngineConfig, FinishReason, Health, SynthesisRequest
from engine.baselines import make_baseline
from engine.runner import build_runners
from tests.engine.tiny_voice import TINY_SPEC, make_tiny_voice, whole_utterance

CASES = [([1, 2, 3, 4, 5, 6, 7, 8, 9, 10][: 2 + s], s) for s in range(6)]


@pytest.fixture(scope="module")
def voice():
    return make_tiny_voice()


@pytest.fixture(scope="module")
def references(voice):
    return [whole_utterance(voice, ids, seed)[0].numpy() for ids, seed in CASES]


def baseline(kind: str, voice) -> AsyncEngine:
    config = EngineConfig(voices=("tiny",), max_slots=4, max_waiting=8, first_chunk_frames=8, chunk_frames=12)
    return AsyncEngine(make_baseline(kind, config, build_runners(config, {"tiny": voice})))


async def test_naive_streams_the_same_audio(voice, references) -> None:
    engine = baseline("naive", voice)
    await engine.start()
    assert engine.health() is Health.SERVING
    results = await asyncio.gather(
        *(engine.submit(SynthesisRequest(f"n{s}", ids, seed=s)).collect() for ids, s in CASES)
    )
    for ref, (audio, chunks, final) in zip(references, results):
        assert final.reason is FinishReason.COMPLETED
        np.testing.assert_allclose(audio, ref, atol=1e-5, rtol=0)
        assert len(chunks) >= 1 and chunks[0].first
        if len(ref) > 8 * 16 + 12 * 16:
            assert len(chunks) >= 2  # it streams
    assert engine.counters().requests_completed == len(CASES)
    assert await engine.drain(5.0)
    assert engine.health() is Health.NOT_SERVING


async def test_non_incremental_returns_whole_utterances_in_rounds(voice, references) -> None:
    engine = baseline("non_incremental", voice)
    await engine.start()
    streams = [engine.submit(SynthesisRequest(f"w{s}", ids, seed=s)) for ids, s in CASES]
    results = await asyncio.gather(*(st.collect() for st in streams))
    margin = TINY_SPEC["right_context_frames"] * 16  # the batch pads shorter rows past their end
    for ref, (audio, chunks, final) in zip(references, results):
        assert final.reason is FinishReason.COMPLETED
        assert len(chunks) == 1 and len(audio) == len(ref)
        np.testing.assert_allclose(audio[:-margin], ref[:-margin], atol=1e-5, rtol=0)
        # the whole utterance is its one chunk (above); its audio came before the finish (an order, not a time)
        assert final.timings.first_audio_s is not None and final.timings.first_audio_s <= final.timings.finished_s
    await engine.stop()


async def test_baseline_cancel(voice) -> None:
    engine = baseline("naive", voice)
    await engine.start()
    stream = engine.submit(SynthesisRequest("c", [1, 2, 3, 4, 5, 6, 7, 8], seed=1))
    assert engine.cancel("c")
    _, _, final = await stream.collect()
    assert final.reason is FinishReason.CANCELLED
    await engine.stop()
