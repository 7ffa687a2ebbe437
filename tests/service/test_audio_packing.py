"""Several audio frames per ServerEvent (SessionConfig.frames_per_event): the same frames, seqs, pts and event order
as one frame per event; an event only groups frames whose release time has come; old clients see no change."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from clients.conversation import Audio, TurnDone, event_from_proto, events_from_proto
from protos.voxpool.v1 import tts_pb2 as pb
from service.call.outbox import Outbox
from service.paced_sender import PacedSender
from service.pacing import MAX_FRAMES_PER_EVENT, Action, Pacer, packed_margin_ms
from tests.service.conftest import (
    assert_same_l16_frames, collect, config_event, end_event, flush_event, pcm_close, stub_for, text_event,
)
from tests.service.virtual_time import run_virtual

TEXT = "您好，欢迎致电客户服务中心。"


def flat(events: list[pb.ServerEvent]) -> list[tuple[str, pb.ServerEvent | pb.AudioFrame]]:
    """Every event, an audio_batch opened into its frames: (kind, message), as one frame per event would be."""
    out = []
    for e in events:
        kind = e.WhichOneof("event")
        if kind == "audio_batch":
            out += [("audio", f) for f in e.audio_batch.frames]
        else:
            out.append((kind, getattr(e, kind)))
    return out


def frames_of(events) -> list[pb.AudioFrame]:
    return [m for k, m in flat(events) if k == "audio"]


def kinds_of(events) -> list[str]:
    return [k for k, _ in flat(events)]


def speech_kinds(events) -> list[str]:
    """kinds_of without the silence frames (pre-roll, underrun fill)."""
    return [k for k, m in flat(events) if not (k == "audio" and m.silence)]


# ---------------------------------------------------------------------------------------------------
# the release rule, on a virtual clock: Outbox + PacedSender + Pacer
# ---------------------------------------------------------------------------------------------------


class _Wire:
    """A gRPC context stand-in: records (virtual time, event) of every write."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, pb.ServerEvent]] = []

    async def write(self, event: pb.ServerEvent) -> None:
        self.writes.append((asyncio.get_running_loop().time(), event))


def _run_paced(frame_ms: int, lead_ms: int, n: int, script) -> tuple[list[tuple[float, pb.ServerEvent]], Pacer,
                                                                    dict[int, float]]:
    released: dict[int, float] = {}  # seq → when the pacer released the frame

    async def main():
        wire = _Wire()
        outbox = Outbox(wire, stall_timeout_s=10.0)
        outbox.pack_audio(n)
        pacer: Pacer[int] = Pacer(frame_ms, lead_ms, clock=asyncio.get_running_loop().time)
        margin_s = packed_margin_ms(frame_ms, lead_ms, n) / 1000

        async def send(action: Action) -> None:
            released[action.seq] = action.at_s
            play_s = pacer.play_time_s(action.pts_ms)
            frame = pb.AudioFrame(payload=bytes([action.seq % 256]), seq=action.seq, pts_ms=action.pts_ms,
                                  duration_ms=frame_ms, silence=action.item is None)
            await outbox.write_audio(frame, play_s - margin_s)
            if action.item is not None and action.item % 7 == 6:  # an event due after this frame (a mark)
                await outbox.write(pb.ServerEvent(mark_reached=pb.MarkReached(name=str(action.item))))

        sender = PacedSender(pacer, send, held=outbox)
        task = asyncio.create_task(sender.run())
        await script(sender)
        while sender.unsent_frames:
            await asyncio.sleep(0.001)
        sender.close()
        await task
        return wire.writes, pacer

    writes, pacer = run_virtual(main())
    return writes, pacer, released


def _check_release_rule(writes, pacer: Pacer, released: dict[int, float], frame_ms: int, lead_ms: int, n: int
                        ) -> None:
    """Each frame leaves no earlier than its release time (play − lead) and, when the pacer released it before its
    play time minus the packed margin (≥ one frame), no later than that; an event holds at most n frames."""
    margin_s = packed_margin_ms(frame_ms, lead_ms, n) / 1000
    for at_s, event in writes:
        if event.HasField("audio_batch"):
            frames = list(event.audio_batch.frames)
            assert 1 <= len(frames) <= n
            for f in frames:
                play_s = pacer.play_time_s(f.pts_ms)
                assert at_s >= play_s - lead_ms / 1000 - 1e-9, (at_s, f.seq)
                assert at_s <= max(released[f.seq], play_s - margin_s) + 1e-6, (at_s, f.seq)


def test_frames_are_grouped_only_once_their_release_time_has_come() -> None:
    frame_ms, lead_ms, n = 20, 100, 5

    async def script(sender: PacedSender) -> None:
        for i in range(40):
            sender.push(i)
        sender.finish()

    writes, pacer, released = _run_paced(frame_ms, lead_ms, n, script)
    _check_release_rule(writes, pacer, released, frame_ms, lead_ms, n)
    events = [e for _, e in writes]
    frames = frames_of(events)
    assert [f.seq for f in frames] == list(range(40)) and [f.pts_ms for f in frames] == [20 * k for k in range(40)]
    assert not any(e.HasField("audio") for e in events)
    sizes = [len(e.audio_batch.frames) for e in events if e.HasField("audio_batch")]
    assert len(sizes) < 40 / 2  # packed: far fewer events than frames
    # a mark after frame 6, 13, 20, ... comes right after that frame, before the next one: the order of single frames
    ks = kinds_of(events)
    for i, k in enumerate(ks):
        if k == "mark_reached":
            before = [m for kk, m in flat(events)[:i] if kk == "audio"]
            assert before[-1].seq % 7 == 6 and int(flat(events)[i][1].name) == before[-1].seq


def test_held_frames_leave_by_their_deadline_when_synthesis_stalls() -> None:
    frame_ms, lead_ms, n = 20, 100, 5

    async def script(sender: PacedSender) -> None:
        for i in range(8):  # the lead's worth and a few more
            sender.push(i)
        await asyncio.sleep(0.5)  # synthesis stalls: underrun fill (silence) runs on the same rule
        for i in range(8, 12):
            sender.push(i)
        sender.finish()

    writes, pacer, released = _run_paced(frame_ms, lead_ms, n, script)
    _check_release_rule(writes, pacer, released, frame_ms, lead_ms, n)
    frames = frames_of([e for _, e in writes])
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert any(f.silence for f in frames) and sum(not f.silence for f in frames) == 12


def test_the_first_frames_of_a_run_are_not_held_back() -> None:
    async def script(sender: PacedSender) -> None:
        sender.push(0)
        sender.push(1)
        sender.finish()

    writes, _, _ = _run_paced(20, 100, 5, script)
    # the run's first frames play now: written at once (t = 0), not held for three more
    assert writes[0][0] == 0.0 and [f.seq for f in writes[0][1].audio_batch.frames] == [0, 1]


# ---------------------------------------------------------------------------------------------------
# end to end (tiny voice over gRPC)
# ---------------------------------------------------------------------------------------------------


def _l16(**kw) -> pb.AudioFormat:
    return pb.AudioFormat(encoding=pb.AudioFormat.L16, sample_rate_hz=8000, frame_ms=20, **kw)


async def test_synthesize_packed_carries_the_same_frames(tiny_server) -> None:
    async with stub_for(tiny_server.port) as stub:
        single = await collect(stub.Synthesize(pb.SynthesizeRequest(text=TEXT, audio=_l16(), word_timestamps=True)))
        packed = await collect(stub.Synthesize(pb.SynthesizeRequest(text=TEXT, audio=_l16(), word_timestamps=True,
                                                                    frames_per_event=8)))
    assert not any(e.HasField("audio_batch") for e in single)  # the default: one frame per event, as before
    assert single[0].started.effective_config.frames_per_event == 1
    assert packed[0].started.effective_config.frames_per_event == 8
    assert packed[0].started.limits.max_frames_per_event == MAX_FRAMES_PER_EVENT
    batches = [len(e.audio_batch.frames) for e in packed if e.HasField("audio_batch")]
    assert batches and max(batches) == 8 and not any(e.HasField("audio") for e in packed)
    assert len(packed) < len(single) / 3
    assert kinds_of(packed) == kinds_of(single)  # words, frames and turn_done in the same order
    assert_same_l16_frames(frames_of(packed), frames_of(single))
    assert [(f.seq, f.pts_ms, f.duration_ms, f.turn_id, f.silence) for f in frames_of(packed)] == \
        [(f.seq, f.pts_ms, f.duration_ms, f.turn_id, f.silence) for f in frames_of(single)]


async def test_converse_realtime_packed_keeps_events_in_place(tiny_server) -> None:
    def events(n: int) -> list[pb.ClientEvent]:
        return [config_event(encoding=pb.AudioFormat.L16, pacing=pb.Pacing.REALTIME, lead_ms=100, preroll_ms=40,
                             word_timestamps=True, frames_per_event=n),
                text_event("您好，欢迎致电。", "a"), pb.ClientEvent(mark=pb.Mark(name="m1", turn_id="a")),
                text_event("请问有什么可以帮您？", "a"), flush_event("a"), end_event()]

    async with stub_for(tiny_server.port) as stub:
        single = await collect(stub.Converse(iter(events(1))))
        packed = await collect(stub.Converse(iter(events(5))))
    # underrun fill depends on the machine's load: compare the speech frames and the events between them
    assert speech_kinds(packed) == speech_kinds(single)
    fp, fs = frames_of(packed), frames_of(single)
    assert [f.seq for f in fp] == list(range(len(fp)))
    assert all(b.pts_ms >= a.pts_ms + 20 for a, b in zip(fp, fp[1:]))
    assert sum(f.silence for f in fp[:2]) == 2  # the pre-roll
    speech_p, speech_s = [f for f in fp if not f.silence], [f for f in fs if not f.silence]
    assert [len(f.payload) for f in speech_p] == [len(f.payload) for f in speech_s]
    assert all(pcm_close(a.payload, b.payload) for a, b in zip(speech_p, speech_s))
    assert any(len(e.audio_batch.frames) > 1 for e in packed if e.HasField("audio_batch"))
    assert max(len(e.audio_batch.frames) for e in packed if e.HasField("audio_batch")) <= 5


@pytest.mark.parametrize("config, needle", [
    (dict(pacing=pb.Pacing.REALTIME, lead_ms=60, frames_per_event=5), "lead_ms of at least 100"),
    (dict(pacing=pb.Pacing.REALTIME, frames_per_event=4), "lead_ms of at least 80"),  # the default lead, 60
    (dict(frames_per_event=MAX_FRAMES_PER_EVENT + 1), f"use 1-{MAX_FRAMES_PER_EVENT}"),
])
async def test_packing_that_cannot_keep_the_lead_is_refused(tiny_server, config, needle) -> None:
    async with stub_for(tiny_server.port) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await collect(stub.Converse(iter([config_event(**config), end_event()])))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in info.value.details() and "frames_per_event" in info.value.details()


async def test_asap_packs_at_any_lead(tiny_server) -> None:
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Converse(iter([
            config_event(pacing=pb.Pacing.ASAP, lead_ms=0, frames_per_event=50), text_event("您好。"),
            flush_event(), end_event()])))
    assert any(e.HasField("audio_batch") for e in events) and events[-1].HasField("turn_done")


# ---------------------------------------------------------------------------------------------------
# the Python client library reads both forms as the same records
# ---------------------------------------------------------------------------------------------------


def test_client_opens_a_batch_into_audio_records() -> None:
    frames = [pb.AudioFrame(payload=b"\xff" * 160, seq=s, pts_ms=20 * s, duration_ms=20, turn_id="t1",
                            silence=s == 0) for s in range(3)]
    batch = pb.ServerEvent(audio_batch=pb.AudioBatch(frames=frames))
    got = events_from_proto(batch, 2.5)
    assert got == [Audio(b"\xff" * 160, s, 20 * s, 20, "t1", s == 0, 2.5) for s in range(3)]
    assert events_from_proto(pb.ServerEvent(audio=frames[1]), 2.5) == [event_from_proto(pb.ServerEvent(audio=frames[1]),
                                                                                         2.5)]
    with pytest.raises(ValueError, match="events_from_proto"):
        event_from_proto(batch)
    with pytest.raises(ValueError, match="empty"):
        events_from_proto(pb.ServerEvent(audio_batch=pb.AudioBatch()))


async def test_client_library_yields_the_same_events_packed_or_not(tiny_server) -> None:
    from clients.client import VoxpoolClient

    def strip(evs):
        return [(type(e).__name__, e.seq, e.pts_ms, e.silence, len(e.payload)) if isinstance(e, Audio)
                else type(e).__name__ for e in evs]

    async with VoxpoolClient(f"127.0.0.1:{tiny_server.port}", failover=False) as client:
        single = [e async for e in client.synthesize(TEXT)]
        packed = [e async for e in client.synthesize(TEXT, frames_per_event=6)]
        conv = await client.converse(pacing="ASAP", frames_per_event=6)
        await conv.send_text(TEXT)
        await conv.flush()
        await conv.end()
        conversed = [e async for e in conv]
    assert strip(packed) == strip(single)
    assert strip(conversed) == strip(single)[1:]  # Synthesize's `started` aside
    assert isinstance(packed[-1], TurnDone) and packed[-1].ttfs_ms >= packed[-1].ttfa_ms
