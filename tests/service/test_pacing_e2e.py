"""REALTIME and ASAP over gRPC, by behaviour and order only: a stalled engine gives flagged silence frames with seq
and pts contiguous through the gap; ASAP sends no silence. (Client-clock timing of the same paths: tests/load/.)"""

import asyncio

from engine.request import AudioChunk
from protos.voxpool.v1 import tts_pb2 as pb
from tests.service.conftest import collect, config_event, end_event, flush_event, stub_for, text_event
from tests.service.engine_wrappers import EngineWrapper, StreamWrapper

LEAD_MS = 60
FRAME_MS = 20


class StallingEngine(EngineWrapper):
    """Wraps the engine: the 2nd chunk of every stream arrives `stall_s` late."""

    def __init__(self, engine, stall_s: float):
        super().__init__(engine)
        self.stall_s = stall_s

    def wrap(self, stream):
        chunks = 0

        async def stall_the_second_chunk(ev):
            nonlocal chunks
            if isinstance(ev, AudioChunk):
                chunks += 1
                if chunks == 2:
                    await asyncio.sleep(self.stall_s)
            return ev

        return StreamWrapper(stream, stall_the_second_chunk)


async def test_underrun_sends_flagged_silence_with_contiguous_seq_and_pts(tiny_server):
    tiny_server.deps.engine = StallingEngine(tiny_server.deps.engine, stall_s=1.0)
    async with stub_for(tiny_server.port) as stub:
        received = await collect(stub.Converse(iter([
            config_event(pacing=pb.Pacing.REALTIME, lead_ms=LEAD_MS), text_event("好的。"), flush_event(), end_event(),
        ])))
    frames = [e.audio for e in received if e.HasField("audio")]
    silent = [i for i, a in enumerate(frames) if a.silence]
    # a 1 s stall is filled but for what the turn's start wait (audio.start_wait_ms, 300), the lead and the first
    # chunk covered; a slower machine adds more
    assert len(silent) >= 20, "a 1 s stall must be filled with flagged silence frames"
    assert all(len(a.payload) == 160 for a in frames)
    assert 0 < silent[0] and silent[-1] < len(frames) - 1  # between speech: the gateway's cadence held
    assert [a.seq for a in frames] == list(range(len(frames)))
    assert [a.pts_ms for a in frames] == [FRAME_MS * i for i in range(len(frames))]
    done = next(e.turn_done for e in received if e.HasField("turn_done"))
    assert done.underruns >= 1 and done.late_chunks >= 1
    assert done.audio_ms == sum(a.duration_ms for a in frames if not a.silence)


async def test_asap_sends_speech_only_contiguously(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        received = await collect(stub.Converse(iter([
            config_event(pacing=pb.Pacing.ASAP), text_event("您好，欢迎致电。"), flush_event(), end_event(),
        ])))
    frames = [e.audio for e in received if e.HasField("audio")]
    assert frames and not any(a.silence for a in frames)
    assert [a.pts_ms for a in frames] == [FRAME_MS * i for i in range(len(frames))]
    done = next(e.turn_done for e in received if e.HasField("turn_done"))
    assert done.underruns == 0 and done.audio_ms == FRAME_MS * len(frames)


class RecordingEngine(EngineWrapper):
    """Wraps the engine: keeps every request the call submits."""

    def __init__(self, engine):
        super().__init__(engine)
        self.requests = []

    def submit(self, request):
        self.requests.append(request)
        return super().submit(request)


async def test_engine_is_told_how_early_the_pacer_needs_audio(tiny_server):
    """REALTIME: each segment's request carries the pacer's deadline margin (lead − grace + one frame: 60 − 10 + 20
    ms at lead 60, 20 ms frames), so the engine's buffer model matches where the pacer fills; ASAP: none."""
    engine = tiny_server.deps.engine
    try:
        for pacing, lead_ms, margin_ms in ((pb.Pacing.REALTIME, LEAD_MS, 70.0), (pb.Pacing.REALTIME, 200, 210.0),
                                           (pb.Pacing.ASAP, LEAD_MS, 0.0)):
            recording = tiny_server.deps.engine = RecordingEngine(engine)
            async with stub_for(tiny_server.port) as stub:
                received = await collect(stub.Converse(iter([
                    config_event(pacing=pacing, lead_ms=lead_ms), text_event("您好，欢迎致电。"), flush_event(),
                    end_event(),
                ])))
            assert any(e.HasField("turn_done") for e in received)
            assert recording.requests and {r.options.deadline_margin_ms for r in recording.requests} == {margin_ms}
    finally:
        tiny_server.deps.engine = engine
