"""Every offered sample rate out of Converse and Synthesize on a real server: exact frame sizes, the same speech
duration as at 8 kHz, and clear refusals of G.711 above 8 kHz, of rates not offered and of frames not whole samples."""

import grpc
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import wire
from tests.service.conftest import collect, config_event, end_event, stub_for, text_event

TEXT = "您好，欢迎致电。"
L16_BYTES = 2


def _audio(events) -> list:
    return [e.audio for e in events if e.HasField("audio")]


def _check_frames(events, rate_hz: int, frame_ms: int) -> int:
    """Every frame is frame_ms of L16 at rate_hz and Started says so; returns the audio's duration in ms."""
    started = events[0].started
    nbytes = rate_hz * frame_ms // 1000 * L16_BYTES
    assert started.effective_config.audio.sample_rate_hz == rate_hz
    assert started.effective_config.audio.frame_ms == frame_ms and started.frame_bytes == nbytes
    audio = _audio(events)
    assert audio and all(len(a.payload) == nbytes and a.duration_ms == frame_ms for a in audio), rate_hz
    assert [a.pts_ms for a in audio] == [i * frame_ms for i in range(len(audio))]
    return sum(a.duration_ms for a in audio)


async def test_converse_speaks_at_every_offered_rate(tiny_server):
    durations: dict[int, tuple[int, int]] = {}
    async with stub_for(tiny_server.port) as stub:
        for rate_hz in wire.SAMPLE_RATES_HZ:
            frame_ms = wire.fitting_frame_ms(rate_hz)
            events = await collect(stub.Converse(iter([
                config_event(encoding=pb.AudioFormat.L16, rate=rate_hz, frame_ms=frame_ms), text_event(TEXT),
                end_event()])))
            durations[rate_hz] = (_check_frames(events, rate_hz, frame_ms), frame_ms)
    ref_ms, ref_frame_ms = durations[8000]
    assert ref_ms >= 1000
    for rate_hz, (ms, frame_ms) in durations.items():
        assert abs(ms - ref_ms) <= max(frame_ms, ref_frame_ms), (rate_hz, ms, ref_ms)


async def test_synthesize_speaks_at_every_offered_rate_with_the_frame_length_that_fits(tiny_server):
    """frame_ms left unset: the server's 20 ms where it holds whole samples, 40 ms at 11025 Hz."""
    durations: dict[int, tuple[int, int]] = {}
    async with stub_for(tiny_server.port) as stub:
        for rate_hz in wire.SAMPLE_RATES_HZ:
            events = await collect(stub.Synthesize(pb.SynthesizeRequest(
                text=TEXT, audio=pb.AudioFormat(encoding=pb.AudioFormat.L16, sample_rate_hz=rate_hz))))
            frame_ms = 40 if rate_hz == 11025 else 20
            durations[rate_hz] = (_check_frames(events, rate_hz, frame_ms), frame_ms)
            assert events[-1].HasField("turn_done")
    ref_ms, ref_frame_ms = durations[8000]
    for rate_hz, (ms, frame_ms) in durations.items():
        assert abs(ms - ref_ms) <= max(frame_ms, ref_frame_ms), (rate_hz, ms, ref_ms)


@pytest.mark.parametrize("audio, needle", [
    (pb.AudioFormat(encoding=pb.AudioFormat.PCMU, sample_rate_hz=16000), "PCMU is G.711, which is 8 kHz only"),
    (pb.AudioFormat(encoding=pb.AudioFormat.PCMA, sample_rate_hz=48000, frame_ms=20), "PCMA is G.711, which is 8 kHz"),
    (pb.AudioFormat(encoding=pb.AudioFormat.L16, sample_rate_hz=12000),
     "sample_rate_hz 12000 is not supported; use 8000, 11025, 16000, 22050, 24000, 32000, 44100 or 48000"),
    (pb.AudioFormat(encoding=pb.AudioFormat.L16, sample_rate_hz=11025, frame_ms=20),
     "frame_ms 20 at 11025 Hz is 220.5 samples, not a whole number; use 40"),
    (pb.AudioFormat(encoding=pb.AudioFormat.L16, sample_rate_hz=22050, frame_ms=30), "use 20, 40 or 60"),
])
async def test_formats_not_offered_are_refused_with_what_to_ask_for(tiny_server, audio, needle):
    config = pb.ClientEvent(config=pb.SessionConfig(audio=audio, pacing=pb.Pacing(mode=pb.Pacing.ASAP)))
    async with stub_for(tiny_server.port) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as conv:
            await collect(stub.Converse(iter([config, text_event(TEXT), end_event()])))
        with pytest.raises(grpc.aio.AioRpcError) as synth:
            await collect(stub.Synthesize(pb.SynthesizeRequest(text=TEXT, audio=audio)))
    for err in (conv.value, synth.value):
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in err.details(), err.details()
    assert tiny_server.admission.active == 0
