"""The LiveKit Agents TTS plugin through the framework's own stream classes, against a local voxpool server."""

from __future__ import annotations

import asyncio

import pytest

from tests.integrations.conftest import TcpProxy, require, target

require("livekit.agents")

from livekit.agents import APIConnectionError, APIConnectOptions, tts  # noqa: E402
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT  # noqa: E402

from clients.integrations.livekit_tts import VoxpoolTTS  # noqa: E402

RATE_HZ = 16000
WAIT_S = 30.0
NO_RETRY = APIConnectOptions(max_retry=0, retry_interval=0.1, timeout=10.0)


def transcript(events) -> list:
    return [w for ev in events for w in ev.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]


async def collect(stream, limit: int | None = None) -> list[tts.SynthesizedAudio]:
    out = []
    async for ev in stream:
        out.append(ev)
        if limit is not None and len(out) >= limit:
            break
    return out


async def test_capabilities_are_declared_honestly(vox_server):
    engine = VoxpoolTTS(target=target(vox_server), sample_rate=RATE_HZ)
    assert engine.capabilities.streaming is True and engine.capabilities.aligned_transcript is True
    assert engine.sample_rate == RATE_HZ and engine.num_channels == 1 and engine.provider == "voxpool"
    with pytest.raises(ValueError, match="8000, 11025, 16000, 22050, 24000, 32000, 44100 or 48000"):
        VoxpoolTTS(target=target(vox_server), sample_rate=12000)
    await engine.aclose()


async def test_streaming_push_flush_end_gives_audio_and_aligned_words(vox_server):
    engine = VoxpoolTTS(target=target(vox_server), sample_rate=RATE_HZ)
    try:
        for text in (["您好，", "欢迎", "致电。"], ["请问", "有什么", "可以帮您？"]):
            stream = engine.stream(conn_options=NO_RETRY)
            for token in text:
                stream.push_text(token)
            stream.flush()
            stream.end_input()
            events = await asyncio.wait_for(collect(stream), WAIT_S)
            await stream.aclose()
            frames = [ev.frame for ev in events]
            assert frames and all(f.sample_rate == RATE_HZ and f.num_channels == 1 for f in frames)
            assert sum(f.samples_per_channel for f in frames) > RATE_HZ // 10
            assert events[-1].is_final and len({ev.request_id for ev in events}) == 1
            words = transcript(events)
            assert "".join(words) == "".join(text)
            starts = [w.start_time for w in words]
            assert starts == sorted(starts) and starts[0] == 0.0
            assert all(w.end_time >= w.start_time for w in words)
        assert engine.session.streams_opened == 1  # both streams on one Converse call
    finally:
        await engine.aclose()


async def test_non_streaming_synthesize_collects_pcm(vox_server):
    engine = VoxpoolTTS(target=target(vox_server), sample_rate=8000)
    try:
        frame = await asyncio.wait_for(engine.synthesize("您好，欢迎致电。").collect(), WAIT_S)
    finally:
        await engine.aclose()
    assert frame.sample_rate == 8000 and frame.num_channels == 1 and frame.samples_per_channel > 800


@pytest.mark.parametrize("rate_hz", [11025, 48000])
async def test_any_offered_rate_streams_and_synthesizes(vox_server, rate_hz):
    """11025 Hz takes 40 ms frames on the wire (whole samples), 48 kHz 20 ms: the adapter asks for what fits."""
    engine = VoxpoolTTS(target=target(vox_server), sample_rate=rate_hz)
    try:
        stream = engine.stream(conn_options=NO_RETRY)
        stream.push_text("您好。")
        stream.end_input()
        events = await asyncio.wait_for(collect(stream), WAIT_S)
        await stream.aclose()
        frame = await asyncio.wait_for(engine.synthesize("您好。").collect(), WAIT_S)
    finally:
        await engine.aclose()
    assert events and all(ev.frame.sample_rate == rate_hz for ev in events)
    streamed = sum(ev.frame.samples_per_channel for ev in events)
    assert frame.sample_rate == rate_hz and streamed > rate_hz // 2 and frame.samples_per_channel > rate_hz // 2


async def test_push_after_end_input_raises_with_a_message(vox_server):
    engine = VoxpoolTTS(target=target(vox_server), sample_rate=RATE_HZ)
    stream = engine.stream(conn_options=NO_RETRY)
    stream.push_text("您好。")
    stream.end_input()
    with pytest.raises(RuntimeError, match="after end_input"):
        stream.push_text("还有")
    await asyncio.wait_for(collect(stream), WAIT_S)
    await stream.aclose()
    await engine.aclose()


async def test_closing_a_stream_mid_turn_clears_it_on_the_server(vox_server):
    engine = VoxpoolTTS(target=target(vox_server), sample_rate=RATE_HZ)
    text = "您好，这里是客服中心。您的订单已经发货，预计明天送达。请保持电话畅通。"
    try:
        # realtime-like consumer: read a few frames, then the user barges in
        stream = engine.stream(conn_options=NO_RETRY)
        stream.push_text(text)
        stream.end_input()
        await asyncio.wait_for(collect(stream, limit=1), WAIT_S)
        turn_id = stream.turn_id
        await stream.aclose()
        await asyncio.wait_for(_until(lambda: turn_id in engine.heard), WAIT_S)
        heard = engine.heard[turn_id]
        assert heard.text_spoken + heard.text_remaining == text
    finally:
        await engine.aclose()


async def test_broken_connection_raises_the_livekit_error_and_the_next_stream_reconnects(vox_server):
    async with TcpProxy(vox_server.port) as proxy:
        engine = VoxpoolTTS(target=proxy.target, sample_rate=RATE_HZ)
        try:
            stream = engine.stream(conn_options=NO_RETRY)
            stream.push_text("您好，这里是客服中心，请稍候。")
            stream.end_input()
            await asyncio.wait_for(engine.shared_session().open(), WAIT_S)
            proxy.sever()
            with pytest.raises(APIConnectionError, match="voxpool"):
                await asyncio.wait_for(collect(stream), WAIT_S)
            await stream.aclose()
            again = engine.stream(conn_options=NO_RETRY)
            again.push_text("好的。")
            again.end_input()
            events = await asyncio.wait_for(collect(again), WAIT_S)
            await again.aclose()
            assert events and "".join(transcript(events)) == "好的。"
            assert engine.session.streams_opened == 2
        finally:
            await engine.aclose()


async def _until(predicate, step_s: float = 0.02):
    while not predicate():
        await asyncio.sleep(step_s)
