"""The engine on the real Baker voice (slow): streamed audio equals whole-utterance synthesis."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

from engine import AsyncEngine, EngineConfig, FinishReason, SynthesisRequest
from engine.core import EngineCore
from engine.runner import build_runners
from models.speech_edges import GATE_DBFS, levels_dbfs, speech_end

pytestmark = pytest.mark.slow
HOP = 300


@pytest.fixture(scope="module")
def baker_voice(baker_voice_folder: Path):
    from models.voices.bundle import load_voice

    return load_voice(str(baker_voice_folder), weights="fp32")


@pytest.fixture(scope="module")
def segments(baker_voice, baker_fixtures: Path):
    """(ids, seed, whole-utterance audio) for two reference segments."""
    out = []
    for k, i in enumerate((1, 2)):
        ids = np.load(baker_fixtures / f"seg{i}_ids.npy").astype(int).tolist()
        mel_after, _ = baker_voice.acoustic.synthesize(torch.tensor(ids), seed=11 + k, dropout=True)
        with torch.inference_mode():
            out.append((ids, 11 + k, baker_voice.vocoder(mel_after.unsqueeze(0))[0].numpy()))
    return out


def engine_for(voice) -> AsyncEngine:
    config = EngineConfig(voices=("baker-zh",), max_slots=4)
    return AsyncEngine(EngineCore(config, build_runners(config, {"baker-zh": voice})))


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    n = min(len(a), len(b))
    return float(np.linalg.norm(a[:n] - b[:n]) / np.linalg.norm(b[:n]))


async def test_one_stream_equals_whole_utterance(baker_voice, segments) -> None:
    ids, seed, ref = segments[1]
    engine = engine_for(baker_voice)
    await engine.start()
    audio, chunks, final = await engine.submit(SynthesisRequest("solo", ids, seed=seed)).collect()
    await engine.stop()
    assert final.reason is FinishReason.COMPLETED
    assert len(audio) == len(ref) > 24000
    # the streaming vocoder is exact up to the last speech; what remains is decoder/postnet rounding. After it the
    # engine quiets the last chunk (the vocoder's edge burst, models/speech_edges.py): a fade, then 40 dB down
    last = np.asarray(chunks[-1].samples, np.float32)
    gated_from = len(audio) - len(last) + speech_end(ref[len(audio) - len(last):], 24000)
    assert len(audio) - 24000 // 2 < gated_from < len(audio)
    assert rel_l2(audio[:gated_from], ref[:gated_from]) < 1e-4
    assert np.all(levels_dbfs(audio[gated_from:], 24000) < GATE_DBFS)
    assert levels_dbfs(ref[gated_from:], 24000).max() > GATE_DBFS  # the whole-utterance vocoding has the burst
    runner = engine.backend.runners["baker-zh"]
    # the first call takes one of the widths the runner announces (a held-back start grows to a later chunk size)
    first_call_samples = len(chunks[0].samples) + runner.streamer.lookahead_samples
    assert first_call_samples in {w * HOP for w in runner.first_widths()} and len(chunks[0].samples) >= 16 * HOP
    assert len(chunks) >= 3
    positions = np.concatenate([c.input_positions for c in chunks])
    assert positions.min() >= 0 and positions.max() < len(ids) and positions[-1] >= len(ids) // 2


async def test_batched_streams_match_each_alone(baker_voice, segments) -> None:
    """Batched BLAS rounds differently from batch 1 and the autoregressive loop amplifies it (~1e-3 relative)."""
    engine = engine_for(baker_voice)
    await engine.start()
    results = await asyncio.gather(
        *(engine.submit(SynthesisRequest(f"b{k}", ids, seed=seed)).collect() for k, (ids, seed, _) in enumerate(segments))
    )
    await engine.stop()
    assert engine.counters().max_decode_batch == 2
    for (_, _, ref), (audio, _, final) in zip(segments, results):
        assert final.reason is FinishReason.COMPLETED
        assert abs(len(audio) - len(ref)) <= 4 * HOP
        assert rel_l2(audio, ref) < 2e-2
