"""The audio cache with the real Baker voice over gRPC: a hit is byte-identical to fresh synthesis and skips the engine."""

from __future__ import annotations

import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from tests.service.conftest import collect, stub_for

pytestmark = pytest.mark.slow


@pytest.fixture
async def baker_server():
    from engine.async_engine import AsyncEngine
    from models.voices.bundle import load_voice
    from models.voices.install import install_voice
    from service.config import load_config
    from service.server import VoxpoolServer, engine_config

    folder = install_voice("baker-zh")  # already installed: returns its folder
    cfg = load_config(None, environ={})
    cfg.server.port, cfg.server.host = 0, "127.0.0.1"
    cfg.cache.admit_after_sightings = 3  # two fresh syntheses first, then stored
    voice = load_voice(str(folder), weights="int8")
    voices = {voice.name: voice}
    cfg.voice.default = voice.name
    cfg.engine = {"max_slots": 4}
    server = VoxpoolServer(cfg, AsyncEngine.from_config(engine_config(cfg, tuple(voices)), voices=voices), voices)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_hit_equals_fresh_synthesis_with_the_real_voice(baker_server):
    request = pb.SynthesizeRequest(text="您好，欢迎致电客户服务中心。",
                                   audio=pb.AudioFormat(encoding=pb.AudioFormat.L16, sample_rate_hz=16000))

    async def audio() -> bytes:
        async with stub_for(baker_server.port) as stub:
            events = await collect(stub.Synthesize(request))
        return b"".join(e.audio.payload for e in events if e.HasField("audio"))

    first, second, third = await audio(), await audio(), await audio()
    submitted = baker_server.engine.counters().requests_submitted
    hit = await audio()
    assert baker_server.engine.counters().requests_submitted == submitted  # served without the engine
    stats = baker_server.cache.stats()
    assert stats.hits >= 1 and stats.entries >= 1
    assert len(first) > 16000 * 2  # more than half a second of 16-bit audio
    assert first == second == third == hit
