"""Converse and Synthesize against a real server on loopback (tiny voice): the happy paths."""

import grpc
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from tests.service.conftest import collect, config_event, end_event, flush_event, kinds, stub_for, text_event


async def test_converse_one_turn(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        call = stub.Converse(iter([config_event(), text_event("您好，欢迎致电。"), flush_event(), end_event()]))
        events = await collect(call)
    ks = kinds(events)
    assert ks[0] == "started"
    started = events[0].started
    assert started.frame_bytes == 160 and started.effective_config.voice == "tiny"
    audio = [e.audio for e in events if e.HasField("audio")]
    assert audio, ks
    assert all(len(a.payload) == 160 and a.duration_ms == 20 for a in audio)
    assert [a.seq for a in audio] == list(range(len(audio)))
    assert [a.pts_ms for a in audio] == [20 * i for i in range(len(audio))]
    done = [e.turn_done for e in events if e.HasField("turn_done")]
    assert len(done) == 1 and done[0].turn_id == "t1"
    # two segments (clause cut at the comma) × 40 decoder steps × 25 ms = 2 s of audio
    assert done[0].audio_ms == sum(a.duration_ms for a in audio if not a.silence)
    assert 1900 <= done[0].audio_ms <= 2100
    assert ks.index("turn_done") > max(i for i, k in enumerate(ks) if k == "audio")


async def test_synthesize(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Synthesize(pb.SynthesizeRequest(
            text="请稍候。", audio=pb.AudioFormat(encoding=pb.AudioFormat.L16, sample_rate_hz=16000, frame_ms=10))))
    assert kinds(events)[0] == "started"
    audio = [e.audio for e in events if e.HasField("audio")]
    assert audio and all(len(a.payload) == 320 for a in audio)  # 10 ms × 16 kHz × 2 bytes
    assert kinds(events)[-1] == "turn_done"


async def test_list_voices_and_normalize(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        voices = await stub.ListVoices(pb.ListVoicesRequest())
        assert [v.name for v in voices.voices] == ["tiny"] and voices.voices[0].is_default
        norm = await stub.Normalize(pb.NormalizeRequest(text="请拨打13501234567"))
    assert norm.normalized_text.replace("、", "") == "请拨打幺三五零幺二三四五六七"
    assert norm.ids[-1] == 218 and norm.pinyin[:3] == ["qing3", "bo1", "da3"]


@pytest.mark.parametrize(
    "first, code, needle",
    [
        (text_event("你好"), grpc.StatusCode.INVALID_ARGUMENT, "first message must be config"),
        (config_event(voice="nope"), grpc.StatusCode.INVALID_ARGUMENT, "unknown voice"),
        (config_event(rate=12000), grpc.StatusCode.INVALID_ARGUMENT, "sample_rate_hz"),
        (config_event(frame_ms=25), grpc.StatusCode.INVALID_ARGUMENT, "frame_ms"),
        (config_event(lead_ms=900, pacing=pb.Pacing.REALTIME), grpc.StatusCode.INVALID_ARGUMENT, "lead_ms"),
    ],
)
async def test_bad_config(tiny_server, first, code, needle):
    async with stub_for(tiny_server.port) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await collect(stub.Converse(iter([first, end_event()])))
    assert err.value.code() == code
    assert needle in err.value.details()


async def test_normalize_options_per_request(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        yao = await stub.Normalize(pb.NormalizeRequest(text="验证码是1234"))
        yi = await stub.Normalize(pb.NormalizeRequest(
            text="验证码是1234", normalization=pb.NormalizationOptions(one_as_yao=False)))
    assert "幺二三四" in yao.normalized_text
    assert "一二三四" in yi.normalized_text
