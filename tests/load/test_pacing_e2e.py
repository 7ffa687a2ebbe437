"""REALTIME pacing measured on the client clock: never early beyond the lead, no burst after a stall; ASAP unheld."""

import time

from protos.voxpool.v1 import tts_pb2 as pb
from tests.service.conftest import config_event, end_event, flush_event, stub_for, text_event
from tests.service.test_pacing_e2e import StallingEngine

LEAD_MS = 60
FRAME_MS = 20


async def timed_events(stub, events):
    out = []
    async for ev in stub.Converse(iter(events)):
        out.append((time.monotonic(), ev))
    return out


def audio_timeline(received):
    return [(t, e.audio) for t, e in received if e.HasField("audio")]


async def test_realtime_release_follows_playback(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        received = await timed_events(stub, [
            config_event(pacing=pb.Pacing.REALTIME, lead_ms=LEAD_MS), text_event("您好，欢迎致电。"), flush_event(),
            end_event(),
        ])
    frames = audio_timeline(received)
    assert len(frames) >= 90  # ~2 s of audio
    t0, first = frames[0]
    early = []
    for t, a in frames:
        play_s = t0 + (a.pts_ms - first.pts_ms) / 1000.0
        early.append(play_s - t)  # how far ahead of its play time the frame arrived
    # never more than the lead ahead (small tolerance for scheduling jitter)
    assert max(early) <= LEAD_MS / 1000.0 + 0.015, max(early)
    # and the stream as a whole takes about as long as the audio it carries (paced, not a burst)
    span_s = frames[-1][0] - t0
    audio_s = sum(a.duration_ms for _, a in frames) / 1000.0
    assert span_s >= audio_s - LEAD_MS / 1000.0 - 0.05


async def test_underrun_sends_silence_and_no_burst_after(tiny_server):
    tiny_server.deps.engine = StallingEngine(tiny_server.deps.engine, stall_s=1.0)
    async with stub_for(tiny_server.port) as stub:
        received = await timed_events(stub, [
            config_event(pacing=pb.Pacing.REALTIME, lead_ms=LEAD_MS), text_event("好的。"), flush_event(), end_event(),
        ])
    frames = audio_timeline(received)
    silent = [i for i, (_, a) in enumerate(frames) if a.silence]
    assert silent, "a 1 s stall must be filled with flagged silence frames"
    assert all(len(a.payload) == 160 for _, a in frames)
    # ~1 s minus what the turn's start wait (audio.start_wait_ms, 300), the lead and the first chunk covered
    assert len(silent) >= 20
    # seq and pts stay contiguous through the silence
    assert [a.seq for _, a in frames] == list(range(len(frames)))
    assert [a.pts_ms for _, a in frames] == [FRAME_MS * i for i in range(len(frames))]
    # after the stall: no burst. In any 100 ms window at most 100/20 frames + the lead's worth arrive.
    after = [t for t, a in frames[silent[-1] + 1:]]
    worst = max(sum(1 for u in after if t <= u < t + 0.1) for t in after)
    assert worst <= 100 // FRAME_MS + LEAD_MS // FRAME_MS, worst
    done = next(e.turn_done for _, e in received if e.HasField("turn_done"))
    assert done.underruns == 1 and done.late_chunks >= 1


async def test_asap_sends_as_synthesized(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        t0 = time.monotonic()
        received = await timed_events(stub, [
            config_event(pacing=pb.Pacing.ASAP), text_event("您好，欢迎致电。"), flush_event(), end_event(),
        ])
    frames = audio_timeline(received)
    audio_s = sum(a.duration_ms for _, a in frames) / 1000.0
    assert frames[-1][0] - t0 < audio_s  # faster than real time: nothing held back
    assert not any(a.silence for _, a in frames)
