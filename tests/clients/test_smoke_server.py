"""The client library and `voxpool say` against a real server on loopback (tiny voice)."""

import argparse
import asyncio
import wave

import numpy as np
import pytest

from clients.client import (
    Audio,
    Cleared,
    ConversationClosed,
    InvalidRequest,
    MarkReached,
    ServerBusy,
    ServerUnavailable,
    Started,
    SyncVoxpoolClient,
    TurnDone,
    VoxpoolClient,
)
from clients.say import say_main
from clients.wav import FORMAT_MULAW, read_wav_info
from tests.service.conftest import running_server, tiny_server  # noqa: F401  (tiny_server: a fixture)


def _say_args(port, out, **kw):
    base = dict(text="您好，欢迎致电。", output=str(out), encoding="pcmu", sample_rate=8000, voice="", stream=False,
                server=f"127.0.0.1:{port}", ssml=False, speaking_rate=None, timestamps=False)
    base.update(kw)
    return argparse.Namespace(**base)


async def test_say_synthesize_writes_a_playable_wav(tiny_server, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "a.wav"
    rc = await asyncio.to_thread(say_main, _say_args(tiny_server.port, out))
    printed = capsys.readouterr().out
    assert rc == 0, printed
    info = read_wav_info(out)
    assert info.format_tag == FORMAT_MULAW and info.sample_rate_hz == 8000
    # two segments (clause cut) × 40 decoder steps of the tiny voice ≈ 2 s, every frame 160 bytes
    assert 1.8 <= info.duration_s <= 2.3 and info.data_bytes % 160 == 0
    assert "TTFA" in printed and "wrote" in printed


async def test_say_stream_l16(tiny_server, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "b.wav"
    rc = await asyncio.to_thread(say_main, _say_args(tiny_server.port, out, encoding="l16", sample_rate=16000, stream=True))
    assert rc == 0, capsys.readouterr()
    with wave.open(str(out), "rb") as w:
        assert (w.getframerate(), w.getsampwidth()) == (16000, 2)
        samples = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    # REALTIME may add underrun silence (kept in the file; more of it on a loaded machine): count 20 ms frames of speech
    frames = samples[: len(samples) // 320 * 320].reshape(-1, 320)
    speech_s = np.count_nonzero(np.any(frames != 0, axis=1)) * 0.020
    assert 1.8 <= speech_s <= 2.3 and len(samples) / 16000 >= speech_s


async def test_say_reports_bad_voice_and_unreachable_server(tiny_server, tmp_path, capsys):  # noqa: F811
    rc = await asyncio.to_thread(say_main, _say_args(tiny_server.port, tmp_path / "c.wav", voice="nope"))
    err = capsys.readouterr().err
    assert rc == 2 and "rejected" in err and "nope" in err
    assert not (tmp_path / "c.wav").exists()


def test_say_unreachable_server(tmp_path, capsys):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    rc = say_main(_say_args(port, tmp_path / "d.wav"))
    err = capsys.readouterr().err
    assert rc == 2 and "make serve" in err


async def test_async_client_converse(tiny_server):  # noqa: F811
    async with VoxpoolClient(f"127.0.0.1:{tiny_server.port}") as client:
        await client.wait_ready(5)
        voices = await client.list_voices()
        assert [v.name for v in voices] == ["tiny"]
        norm = await client.normalize("请拨打10086")
        assert norm.pinyin[:2] == ["qing3", "bo1"]
        conv = await client.converse(encoding="PCMA", pacing="ASAP")
        assert conv.started.frame_bytes == 160 and conv.started.encoding == "PCMA"
        await conv.send_text("请稍")
        await conv.send_text("候。", turn_id="")
        await conv.mark("end-of-text")
        await conv.flush()
        await conv.end()
        events = [ev async for ev in conv]
        audio = [e for e in events if isinstance(e, Audio)]
        assert audio and all(len(a.payload) == 160 for a in audio)
        assert [a.seq for a in audio] == list(range(len(audio)))
        assert isinstance(events[-1], TurnDone) or any(isinstance(e, TurnDone) for e in events)
        with pytest.raises(InvalidRequest, match="frame_ms"):
            await client.converse(frame_ms=25)


async def test_conversation_mark_and_clear(tiny_server):  # noqa: F811
    async with VoxpoolClient(f"127.0.0.1:{tiny_server.port}") as client:
        conv = await client.converse(pacing="REALTIME")
        await conv.send_text("您好，欢迎致电。", turn_id="a")
        await conv.mark("m1", turn_id="a")
        await conv.send_text("请问有什么可以帮您？", turn_id="a")
        await conv.flush("a")
        seen = []
        async for ev in conv:
            seen.append(ev)
            if isinstance(ev, MarkReached):
                await conv.clear()  # barge-in once the first sentence was heard
            if isinstance(ev, Cleared):
                await conv.end()
        marks = [e for e in seen if isinstance(e, MarkReached)]
        cleared = [e for e in seen if isinstance(e, Cleared)]
        assert [(m.name, m.turn_id) for m in marks] == [("m1", "a")]
        assert len(cleared) == 1 and cleared[0].turn_id == "a"
        assert cleared[0].text_spoken.startswith("您好") and cleared[0].text_remaining
        with pytest.raises(ConversationClosed):
            await conv.send_text("太晚了")


async def test_default_service_config_skips_a_draining_server(tiny_server):  # noqa: F811
    # readiness NOT_SERVING (draining): the health check of the default service config takes the pod out of
    # rotation. A private subchannel pool keeps the health state of other tests' channels out of this one.
    await tiny_server.health.draining()
    private = [("grpc.use_local_subchannel_pool", 1)]
    async with VoxpoolClient(f"127.0.0.1:{tiny_server.port}", options=private) as client:
        with pytest.raises(ServerUnavailable):
            await client.wait_ready(1.0)
        with pytest.raises(ServerUnavailable):
            await client.list_voices(timeout_s=2.0)
    async with VoxpoolClient(f"127.0.0.1:{tiny_server.port}", service_config="", options=private) as plain:
        assert [v.name for v in await plain.list_voices()] == ["tiny"]  # no health check: still reachable


async def test_sync_client(tiny_server):  # noqa: F811
    def run():
        with SyncVoxpoolClient(f"127.0.0.1:{tiny_server.port}") as client:
            events = list(client.synthesize("请稍候。", encoding="L16", sample_rate_hz=8000))
            conv = client.converse(pacing="ASAP")
            conv.send_text("再见。")
            conv.flush()
            conv.end()
            return events, list(conv)

    events, conv_events = await asyncio.to_thread(run)
    assert isinstance(events[0], Started) and isinstance(events[-1], TurnDone)
    assert all(len(e.payload) == 320 for e in events if isinstance(e, Audio))
    assert any(isinstance(e, Audio) for e in conv_events)


async def test_full_server_raises_server_busy_with_pushback():
    async with running_server(server={"max_calls": 1}) as server:
        async with VoxpoolClient(f"127.0.0.1:{server.port}") as client:
            first = await client.converse()
            with pytest.raises(ServerBusy) as info:
                await client.converse()
            assert info.value.retry_after_ms is not None and info.value.retry_after_ms > 0
            first.cancel()
