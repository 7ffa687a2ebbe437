"""The Jambonz custom-TTS gateway, driven message by message by a websocket client, against a local voxpool server."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from tests.integrations.conftest import require, target
from tests.tcp_proxy import TcpProxy

require("aiohttp")
require("websockets")

import aiohttp  # noqa: E402
from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

from clients.integrations.jambonz import GatewayConfig, start  # noqa: E402

WAIT_S = 30.0
QUIET_S = 2.5
KEY = "s3cret"


@contextlib.asynccontextmanager
async def gateway(voxpool_target: str, **overrides):
    gw, runner, port = await start(GatewayConfig(voxpool_target=voxpool_target, host="127.0.0.1", port=0,
                                                 api_key=KEY, **overrides))
    try:
        yield gw, port
    finally:
        await runner.cleanup()


def ws_url(port: int, rate: int = 16000) -> str:
    return f"ws://127.0.0.1:{port}/synthesize?voice=&language=cmn-CN&sampleRate={rate}"


AUTH = {"Authorization": f"Bearer {KEY}"}


async def read_audio(ws, quiet_s: float = QUIET_S, first_timeout_s: float = WAIT_S) -> list[bytes]:
    """Binary frames until the socket stays quiet for `quiet_s` (after the first one); text messages fail."""
    frames: list[bytes] = []
    timeout = first_timeout_s
    while True:
        try:
            msg = await asyncio.wait_for(ws.recv(), timeout)
        except asyncio.TimeoutError:
            return frames
        assert isinstance(msg, bytes), f"unexpected text message {msg!r}"
        frames.append(msg)
        timeout = quiet_s


async def closed_with(ws) -> tuple[dict, int]:
    """The error message the gateway sends before closing, and the close code."""
    msg = await asyncio.wait_for(ws.recv(), WAIT_S)
    with pytest.raises(ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), WAIT_S)
    return json.loads(msg), ws.close_code


async def no_calls(server) -> None:
    async def wait():
        while server.admission.active:
            await asyncio.sleep(0.02)
    await asyncio.wait_for(wait(), WAIT_S)


async def test_streaming_protocol_two_turns_then_stop(vox_server):
    async with gateway(target(vox_server), pacing="REALTIME") as (gw, port):
        async with connect(ws_url(port), additional_headers=AUTH) as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
            assert hello == {"type": "connect", "data": {"sample_rate": 16000, "base64_encoding": False}}
            assert vox_server.admission.active == 1  # one Converse per websocket
            for token in ("您好，", "欢迎", "致电。"):
                await ws.send(json.dumps({"type": "stream", "text": token}))
            await ws.send(json.dumps({"type": "flush"}))
            first = await read_audio(ws)
            assert first and all(len(f) == 640 for f in first)  # 20 ms of 16 kHz L16 each
            await ws.send(json.dumps({"type": "keepalive"}))
            await ws.send(json.dumps({"type": "stream", "text": "请问有什么可以帮您？"}))
            await ws.send(json.dumps({"type": "flush"}))
            second = await read_audio(ws)
            assert second
            # barge-in: a long turn, stop after the first frames; the audio ends within a few frames
            await ws.send(json.dumps({"type": "stream", "text": "您的订单已经发货，预计明天送达，请保持电话畅通，谢谢。"}))
            await ws.send(json.dumps({"type": "flush"}))
            head = []
            while len(head) < 3:
                head.append(await asyncio.wait_for(ws.recv(), WAIT_S))
            await ws.send(json.dumps({"type": "stop"}))
            tail = await read_audio(ws, first_timeout_s=QUIET_S)
            assert len(tail) <= 10  # frames already in flight (pacing lead) plus the fade-out
            # the socket is still usable after stop
            await ws.send(json.dumps({"type": "stream", "text": "好的。"}))
            await ws.send(json.dumps({"type": "flush"}))
            assert await read_audio(ws)
        await no_calls(vox_server)
        assert gw.open_legs == 0


@pytest.mark.parametrize("garbage, code", [
    ("this is not json", 1003),
    (json.dumps({"type": "speak", "text": "x"}), 1003),
    (json.dumps({"type": "stream", "text": 5}), 1003),
    (json.dumps(["stream"]), 1003),
])
async def test_garbage_is_closed_with_an_error_and_frees_the_call(vox_server, garbage, code):
    async with gateway(target(vox_server)) as (gw, port):
        async with connect(ws_url(port), additional_headers=AUTH) as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))["type"] == "connect"
            await ws.send(garbage)
            err, close_code = await closed_with(ws)
        assert err["type"] == "error" and err["error"]
        assert close_code == code
        await no_calls(vox_server)


async def test_binary_from_jambonz_is_refused(vox_server):
    async with gateway(target(vox_server)) as (gw, port):
        async with connect(ws_url(port), additional_headers=AUTH) as ws:
            await asyncio.wait_for(ws.recv(), WAIT_S)
            await ws.send(b"\x00\x01")
            err, close_code = await closed_with(ws)
        assert "binary" in err["error"] and close_code == 1003
        await no_calls(vox_server)


async def test_oversize_frame_is_closed_message_too_big(vox_server):
    async with gateway(target(vox_server), max_message_bytes=4096) as (gw, port):
        async with connect(ws_url(port), additional_headers=AUTH, max_size=None) as ws:
            await asyncio.wait_for(ws.recv(), WAIT_S)
            await ws.send(json.dumps({"type": "stream", "text": "您" * 5000}))
            with pytest.raises(ConnectionClosed):
                while True:
                    await asyncio.wait_for(ws.recv(), WAIT_S)
            assert ws.close_code == 1009
        await no_calls(vox_server)
    async with gateway(target(vox_server), max_text_chars=100) as (gw, port):
        async with connect(ws_url(port), additional_headers=AUTH) as ws:
            await asyncio.wait_for(ws.recv(), WAIT_S)
            await ws.send(json.dumps({"type": "stream", "text": "您" * 101}))
            err, close_code = await closed_with(ws)
        assert "at most 100" in err["error"] and close_code == 1009
        await no_calls(vox_server)


async def test_silent_client_is_closed_after_the_idle_timeout(vox_server):
    async with gateway(target(vox_server), idle_timeout_s=0.5) as (gw, port):
        async with connect(ws_url(port), additional_headers=AUTH) as ws:
            await asyncio.wait_for(ws.recv(), WAIT_S)
            err, close_code = await closed_with(ws)
        assert "no message for 0.5 s" in err["error"] and close_code == 1008
        await no_calls(vox_server)


async def test_jambonz_keepalives_keep_the_voxpool_stream_and_silence_lets_it_go():
    """voxpool ends a stream idle for its idle timeout; jambonz's keepalives reach it and hold the stream (the next
    text needs no reopen), while a silent socket (inside the gateway's own, longer timeout) lets it end."""
    from tests.service.conftest import running_server

    async with running_server(limits={"idle_timeout_s": 1.5}) as server:
        opened = []
        acquire = server.admission.acquire
        server.admission.acquire = lambda *a, **kw: (opened.append(1), acquire(*a, **kw))[1]
        async with gateway(target(server), idle_timeout_s=60.0) as (gw, port):
            async with connect(ws_url(port), additional_headers=AUTH) as ws:
                await asyncio.wait_for(ws.recv(), WAIT_S)
                for _ in range(40):  # 4 s of keepalives: more than twice voxpool's idle timeout
                    await ws.send(json.dumps({"type": "keepalive"}))
                    await asyncio.sleep(0.1)
                assert server.admission.active == 1 and len(opened) == 1
                await no_calls(server)  # silence: voxpool ends the idle stream, the socket stays open
                await ws.send(json.dumps({"type": "stream", "text": "好的。"}))
                await ws.send(json.dumps({"type": "flush"}))
                assert await read_audio(ws)
                assert len(opened) == 2  # the text after the silence needed a new stream


async def test_wrong_key_or_rate_is_refused_before_the_upgrade(vox_server):
    async with gateway(target(vox_server)) as (gw, port):
        with pytest.raises(InvalidStatus) as bad_key:
            async with connect(ws_url(port), additional_headers={"Authorization": "Bearer nope"}):
                pass
        assert bad_key.value.response.status_code == 403
        with pytest.raises(InvalidStatus) as bad_rate:
            async with connect(ws_url(port, rate=12000), additional_headers=AUTH):
                pass
        assert bad_rate.value.response.status_code == 400
        assert b"8000, 11025, 16000, 22050, 24000, 32000, 44100 or 48000" in bad_rate.value.response.body
        assert vox_server.admission.active == 0


async def test_a_48_khz_media_path_gets_48_khz_audio(vox_server):
    """jambonz asks for its media path's rate: the connect reply names it and every frame is 20 ms at 48 kHz."""
    async with gateway(target(vox_server)) as (gw, port):
        async with connect(ws_url(port, rate=48000), additional_headers=AUTH) as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
            assert hello == {"type": "connect", "data": {"sample_rate": 48000, "base64_encoding": False}}
            await ws.send(json.dumps({"type": "stream", "text": "您好，欢迎致电。"}))
            await ws.send(json.dumps({"type": "flush"}))
            frames = await read_audio(ws)
        assert frames and all(len(f) == 1920 for f in frames)  # 20 ms × 48 kHz × 2 bytes
        async with aiohttp.ClientSession() as http:
            body = {"language": "cmn-CN", "voice": "", "type": "text", "text": "您好，欢迎致电。"}
            pcm = {}
            for rate in (8000, 48000):
                async with http.post(f"http://127.0.0.1:{port}/synthesize?sampleRate={rate}", json=body,
                                     headers=AUTH) as resp:
                    assert resp.status == 200 and resp.headers["Content-Type"] == f"audio/l16;rate={rate}"
                    pcm[rate] = await resp.read()
        # the same speech: durations within one 20 ms frame (1920 bytes at 48 kHz)
        assert len(pcm[8000]) > 8000 and abs(len(pcm[48000]) - 6 * len(pcm[8000])) <= 1920
        await no_calls(vox_server)


async def test_voxpool_connection_loss_is_reported_and_the_next_text_reconnects(vox_server):
    async with TcpProxy(vox_server.port) as proxy:
        async with gateway(proxy.target, pacing="REALTIME") as (gw, port):
            async with connect(ws_url(port), additional_headers=AUTH) as ws:
                await asyncio.wait_for(ws.recv(), WAIT_S)
                await ws.send(json.dumps({"type": "stream", "text": "您好，这里是客服中心，请稍候。"}))
                await ws.send(json.dumps({"type": "flush"}))
                assert isinstance(await asyncio.wait_for(ws.recv(), WAIT_S), bytes)
                proxy.sever()
                msg = await asyncio.wait_for(ws.recv(), WAIT_S)
                while isinstance(msg, bytes):
                    msg = await asyncio.wait_for(ws.recv(), WAIT_S)
                assert json.loads(msg)["type"] == "error" and "reconnects" in json.loads(msg)["error"]
                await ws.send(json.dumps({"type": "stream", "text": "好的。"}))
                await ws.send(json.dumps({"type": "flush"}))
                assert await read_audio(ws)
                assert proxy.connections >= 2


async def test_http_synthesis_returns_l16_at_the_asked_rate(vox_server):
    async with gateway(target(vox_server)) as (gw, port):
        url = f"http://127.0.0.1:{port}/synthesize"
        async with aiohttp.ClientSession() as http:
            body = {"language": "cmn-CN", "voice": "", "type": "text", "text": "您好，欢迎致电。"}
            async with http.post(url + "?sampleRate=8000", json=body, headers=AUTH) as resp:
                assert resp.status == 200 and resp.headers["Content-Type"] == "audio/l16;rate=8000"
                pcm = await resp.read()
            assert len(pcm) > 1600 and len(pcm) % 2 == 0
            async with http.post(url, json=body) as resp:
                assert resp.status == 403
            async with http.post(url, data=b"garbage", headers=AUTH) as resp:
                assert resp.status == 400 and "JSON" in (await resp.json())["error"]
            async with http.post(url, json={**body, "type": "markdown"}, headers=AUTH) as resp:
                assert resp.status == 400 and '"ssml"' in (await resp.json())["error"]
            async with http.post(url, json={**body, "text": ""}, headers=AUTH) as resp:
                assert resp.status == 400
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert resp.status == 200 and (await resp.json())["status"] == "ok"


async def test_http_ssml_is_spoken_as_ssml_and_bad_ssml_says_where(vox_server):
    """jambonz sends `type: "ssml"` for SSML prompts: the document reaches voxpool as SSML (a 1 s break adds 1 s of
    audio to the same words), and a malformed one is a 400 naming where it breaks."""
    async with gateway(target(vox_server)) as (gw, port):
        url = f"http://127.0.0.1:{port}/synthesize?sampleRate=8000"
        async with aiohttp.ClientSession() as http:
            async def speak(kind: str, text: str) -> bytes:
                body = {"language": "cmn-CN", "voice": "", "type": kind, "text": text}
                async with http.post(url, json=body, headers=AUTH) as resp:
                    assert resp.status == 200, await resp.text()
                    return await resp.read()

            bytes_per_s = 8000 * 2
            plain = await speak("ssml", "<speak>您好。<break time=\"0ms\"/>欢迎致电。</speak>")
            paused = await speak("ssml", "<speak>您好。<break time=\"1s\"/>欢迎致电。</speak>")
            assert abs(len(paused) - len(plain) - bytes_per_s) <= bytes_per_s // 50  # the break, within a frame
            body = {"language": "cmn-CN", "voice": "", "type": "ssml", "text": "<speak>您好<break time=</speak>"}
            async with http.post(url, json=body, headers=AUTH) as resp:
                assert resp.status == 400
                error = (await resp.json())["error"]
                assert "line 1" in error and "column" in error, error
