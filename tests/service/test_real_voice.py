"""The real Baker voice end to end through gRPC on loopback: plausible speech, and barge-in that reports
the spoken part of the text from the attention alignment."""

import asyncio

import numpy as np
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from service.audio.g711 import decode
from tests.service.conftest import collect, config_event, end_event, flush_event, pcm_close, stub_for, text_event

pytestmark = pytest.mark.slow


@pytest.fixture
async def baker_server(baker_voice_folder):
    from engine.async_engine import AsyncEngine
    from models.voices.bundle import load_voice
    from service.config import load_config
    from service.server import VoxpoolServer, engine_config

    cfg = load_config(None, environ={})
    cfg.server.port, cfg.server.host = 0, "127.0.0.1"
    voice = load_voice(str(baker_voice_folder), weights="int8")
    voices = {voice.name: voice}
    cfg.voice.default = voice.name
    cfg.engine = {"max_slots": 4}
    cfg.cache.enabled = True  # for the cache test; the other tests speak texts of their own
    server = VoxpoolServer(cfg, AsyncEngine.from_config(engine_config(cfg, tuple(voices)), voices=voices), voices)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_synthesize_real_voice(baker_server):
    async with stub_for(baker_server.port) as stub:
        events = await collect(stub.Synthesize(pb.SynthesizeRequest(
            text="您好，欢迎致电客户服务中心。", audio=pb.AudioFormat(encoding=pb.AudioFormat.L16, sample_rate_hz=16000))))
    assert events[0].started.voice.name == "baker-zh"
    assert "non-commercial" in events[0].started.voice.license
    audio = np.concatenate([decode(e.audio.payload, "L16") for e in events if e.HasField("audio")])
    seconds = len(audio) / 16000
    assert 1.8 <= seconds <= 5.0  # 13 syllables and a pause: speech of plausible length
    rms = np.sqrt(np.mean(audio ** 2))
    assert 0.01 < rms < 0.5 and np.abs(audio).max() < 1.0  # speech level, no clipping
    # speech, not noise: energy concentrated below 4 kHz, and silence in the comma pause
    spectrum = np.abs(np.fft.rfft(audio))
    freqs = np.fft.rfftfreq(len(audio), 1 / 16000)
    assert spectrum[freqs < 4000].sum() > 0.8 * spectrum.sum()
    done = events[-1].turn_done
    assert done.audio_ms >= 1800 and done.chunks >= 3


async def test_clear_reports_spoken_prefix_from_alignment(baker_server):
    text = "您好，您本月的话费账单已经生成，请在二十五号之前完成缴费，感谢您的耐心等待。"
    async with stub_for(baker_server.port) as stub:
        queue: asyncio.Queue = asyncio.Queue()

        async def events():
            while (item := await queue.get()) is not None:
                yield item

        call = stub.Converse(events())
        for ev in (config_event(pacing=pb.Pacing.REALTIME), text_event(text, turn_id="bill"), flush_event("bill")):
            queue.put_nowait(ev)
        got, speech_ms = [], 0
        async for ev in call:
            got.append(ev)
            if ev.HasField("audio") and not ev.audio.silence:
                speech_ms += ev.audio.duration_ms
            if speech_ms >= 2000:
                break  # two seconds of the turn's speech have been released (counted in audio, not wall time)
        queue.put_nowait(pb.ClientEvent(clear=pb.Clear(turn_id="bill")))
        cleared = None
        async for ev in call:
            if ev.HasField("cleared"):
                cleared = ev.cleared
                break
        queue.put_nowait(end_event())
        queue.put_nowait(None)
        await collect(call)
    assert cleared is not None
    spoken, rest = cleared.text_spoken, cleared.text_remaining
    assert spoken + rest == text
    # ~2 s of speech at ~4-5 syllables/s: past the greeting, well short of the end
    print(f"spoken {spoken!r} | remaining {rest!r}")
    assert len(spoken) >= 5 and len(rest) >= 15, (spoken, rest)


async def test_hit_equals_fresh_synthesis_with_the_real_voice(baker_server):
    # one segment: with the int8 decoder a segment's audio depends on what shares its decoder batch (activations are
    # quantized per call, docs/engine.md), and a text of two segments has the second in the engine beside the first
    request = pb.SynthesizeRequest(text="欢迎致电客户服务中心。",
                                   audio=pb.AudioFormat(encoding=pb.AudioFormat.L16, sample_rate_hz=16000))

    async def audio() -> bytes:
        async with stub_for(baker_server.port) as stub:
            events = await collect(stub.Synthesize(request))
        return b"".join(e.audio.payload for e in events if e.HasField("audio"))

    baker_server.cache.admit_after_sightings = 3  # two fresh syntheses first, then stored
    first, second, third = await audio(), await audio(), await audio()
    submitted = baker_server.engine.counters().requests_submitted
    hit = await audio()
    assert baker_server.engine.counters().requests_submitted == submitted  # served without the engine
    stats = baker_server.cache.stats()
    assert stats.hits >= 1 and stats.entries >= 1
    assert len(first) > 16000 * 2  # more than half a second of 16-bit audio
    assert hit == third  # byte for byte the synthesis that filled the entry
    # fresh syntheses agree up to float rounding (chunk boundaries, hence vocoder window shapes, vary with
    # load; docs/engine.md): same length, within a few 16-bit steps
    assert pcm_close(first, hit) and pcm_close(second, hit)
