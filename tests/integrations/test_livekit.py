"""The LiveKit Agents TTS plugin through the framework's own stream classes, against a local voxpool server."""

from __future__ import annotations

import asyncio

import pytest

from tests.integrations.conftest import require, target
from tests.tcp_proxy import TcpProxy

require("livekit.agents")

from livekit.agents import APIConnectionError, APIConnectOptions, APITimeoutError, tts  # noqa: E402
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


async def test_push_after_end_input_is_ignored_as_the_base_class_does(vox_server):
    engine = VoxpoolTTS(target=target(vox_server), sample_rate=RATE_HZ)
    try:
        stream = engine.stream(conn_options=NO_RETRY)
        stream.push_text("您好。")
        stream.end_input()
        stream.push_text("还有")  # the base class drops text after end_input; so does this stream (no raise)
        stream.flush()
        events = await asyncio.wait_for(collect(stream), WAIT_S)
        await stream.aclose()
    finally:
        await engine.aclose()
    assert events and "".join(transcript(events)) == "您好。"


async def test_a_stalled_server_raises_api_timeout_error_after_the_base_class_retries(vox_server):
    """conn_options.timeout bounds the wait for voxpool: each attempt ends with APITimeoutError, the base class
    retries it (recoverable errors), and the last one reaches the caller."""
    async with TcpProxy(vox_server.port) as proxy:
        engine = VoxpoolTTS(target=proxy.target, sample_rate=RATE_HZ)
        errors = []
        engine.on("error", errors.append)
        try:
            await asyncio.wait_for(engine.shared_session().open(), WAIT_S)
            proxy.freeze()
            stream = engine.stream(conn_options=APIConnectOptions(max_retry=2, retry_interval=0.05, timeout=0.5))
            stream.push_text("您好，欢迎致电。")
            stream.end_input()
            with pytest.raises(APITimeoutError):
                await asyncio.wait_for(collect(stream), WAIT_S)
            await stream.aclose()
        finally:
            proxy.thaw()
            await engine.aclose()
    assert [e.recoverable for e in errors] == [True, True, False]
    assert all(isinstance(e.error, APITimeoutError) for e in errors)


async def test_a_server_that_stalls_then_answers_is_retried_into_audio(vox_server):
    async with TcpProxy(vox_server.port) as proxy:
        engine = VoxpoolTTS(target=proxy.target, sample_rate=RATE_HZ)
        errors = []

        def on_error(err) -> None:
            errors.append(err)
            proxy.thaw()  # the server answers again before the retry

        engine.on("error", on_error)
        try:
            await asyncio.wait_for(engine.shared_session().open(), WAIT_S)
            proxy.freeze()
            stream = engine.stream(conn_options=APIConnectOptions(max_retry=3, retry_interval=0.05, timeout=2.0))
            stream.push_text("您好，欢迎致电。")
            stream.end_input()
            events = await asyncio.wait_for(collect(stream), WAIT_S)
            await stream.aclose()
        finally:
            proxy.thaw()
            await engine.aclose()
    assert errors and isinstance(errors[0].error, APITimeoutError) and errors[0].recoverable
    assert events and "".join(transcript(events)) == "您好，欢迎致电。"


async def test_server_warnings_reach_the_plugin_log(vox_server, caplog):
    engine = VoxpoolTTS(target=target(vox_server), sample_rate=RATE_HZ)
    try:
        with caplog.at_level("WARNING", logger="clients.integrations.livekit_tts"):
            stream = engine.stream(conn_options=NO_RETRY)
            stream.push_text("您好<b>欢迎</b>致电。")
            stream.end_input()
            events = await asyncio.wait_for(collect(stream), WAIT_S)
            await stream.aclose()
    finally:
        await engine.aclose()
    assert events  # the turn went on
    assert any("normalization" in r.getMessage() and "<b>" in r.getMessage() for r in caplog.records)


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
