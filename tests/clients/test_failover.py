"""Client-library failover on a loopback server: a connection cut mid-turn (a TCP proxy drops it) is carried to a new
stream; the application sees its turn finish once, a contiguous media clock, flagged silence through the gap and a
Failover record, never an error. With failover off, the same cut raises as before."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from clients.client import (Audio, Cleared, Failover, FailoverPolicy, MarkReached, ServerUnavailable, TurnDone,
                            VoxpoolClient, VoxpoolError, Words)
from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc
from tests.tcp_proxy import TcpProxy
from tests.service.conftest import config_event, running_server

TEXT = "您好，这里是客户服务中心。您的业务正在办理中，请不要挂机。我们马上为您转接人工服务。"
WAIT_S = 60


def assert_contiguous(events: list) -> None:
    """seq counts every frame and pts never goes back (a REALTIME server may jump it forward after a late frame).
    Across each failover the reported gap is the caller's media time from the end of the last frame the old server
    sent to the first frame after: the library's flagged silence fill (frame after frame, up to the new server's
    first frame, no overlap), after a jump by the slots already missed when the break was seen."""
    audio = [e for e in events if isinstance(e, Audio)]
    assert [a.seq for a in audio] == list(range(audio[0].seq, audio[0].seq + len(audio)))
    for prev, cur in zip(audio, audio[1:]):
        assert cur.pts_ms >= prev.pts_ms + prev.duration_ms, (prev, cur)
    for i, ev in enumerate(events):
        if not isinstance(ev, Failover):
            continue
        before = [e for e in events[:i] if isinstance(e, Audio)]
        after = next(e for e in events[i:] if isinstance(e, Audio))
        assert after.pts_ms == before[-1].pts_ms + before[-1].duration_ms, (before[-1], after)
        silent = 0  # the trailing run of silence frames: the fill is a tail of it
        while silent < len(before) and before[-1 - silent].silence:
            silent += 1
        seams = []
        for fill in range(silent + 1):  # the fill's first frame is before[-fill] (none when fill == 0)
            old = before[-1 - fill]
            tail = before[len(before) - fill:] + [after]
            if all(b.pts_ms == a.pts_ms + a.duration_ms for a, b in zip(tail, tail[1:])):
                seams.append(after.pts_ms - (old.pts_ms + old.duration_ms))
        assert ev.gap_ms in seams, (ev, seams)


async def cut_after_speech(conv, proxy: TcpProxy, frames: int, then=None) -> list:
    """Read the call to its end, severing the connection once `frames` speech frames arrived."""
    events, speech = [], 0
    async for ev in conv:
        events.append(ev)
        if isinstance(ev, Audio) and not ev.silence:
            speech += 1
            if speech == frames:
                proxy.sever()
                if then is not None:
                    await then()
    return events


async def test_cut_mid_turn_is_carried_over_without_an_error():
    async with running_server(decoder_steps=60) as server, TcpProxy(server.port) as proxy:
        async with VoxpoolClient(proxy.target, service_config="") as client:
            conv = await asyncio.wait_for(client.converse(pacing="REALTIME"), WAIT_S)
            await conv.send_text(TEXT)  # no turn id: the server's numbering ("t1") is kept
            await conv.flush()
            await conv.end()
            events = await asyncio.wait_for(cut_after_speech(conv, proxy, 90), WAIT_S)
    assert proxy.connections >= 2 and conv.failovers == 1
    assert not any(isinstance(e, Words) for e in events), "word timings asked for failover are not surfaced"
    fo = [e for e in events if isinstance(e, Failover)]
    assert len(fo) == 1 and fo[0].turn_id == "t1"
    assert fo[0].heard_text + fo[0].resent_text == TEXT and fo[0].heard_text and fo[0].resent_text
    assert fo[0].from_session_id != fo[0].to_session_id and fo[0].reason.startswith("UNAVAILABLE")
    audio = [e for e in events if isinstance(e, Audio)]
    assert_contiguous(events)
    at = events.index(fo[0])
    before = [e for e in events[:at] if isinstance(e, Audio)]
    # the gap is filled with flagged silence frames (assert_contiguous: with the slots missed before the break was
    # seen, exactly as long as reported)
    assert before[-1].silence and fo[0].gap_ms > 0
    done = [e for e in events if isinstance(e, TurnDone)]
    assert len(done) == 1 and done[0].turn_id == "t1" == audio[-1].turn_id
    assert done[0].audio_ms == sum(a.duration_ms for a in audio if not a.silence)
    assert events.index(done[0]) > at


async def test_words_marks_and_clear_after_a_failover_speak_of_the_whole_turn():
    async with running_server(decoder_steps=60) as server, TcpProxy(server.port) as proxy:
        async with VoxpoolClient(proxy.target, service_config="") as client:
            conv = await asyncio.wait_for(client.converse(pacing="REALTIME", word_timestamps=True), WAIT_S)
            await conv.send_text(TEXT[:13], turn_id="a")
            await conv.send_text(TEXT[13:], turn_id="a")
            await conv.mark("end", turn_id="a")
            await conv.flush("a")
            events, speech = [], 0
            async for ev in conv:
                events.append(ev)
                if isinstance(ev, Audio) and not ev.silence:
                    speech += 1
                    if speech == 90:
                        proxy.sever()
                if isinstance(ev, Failover):
                    resumed = []
                if isinstance(ev, Audio) and not ev.silence and any(isinstance(e, Failover) for e in events):
                    resumed.append(ev)
                    if len(resumed) == 10:
                        await conv.clear("a")
                if isinstance(ev, Cleared):
                    await conv.end()
    fo = next(e for e in events if isinstance(e, Failover))
    cleared = next(e for e in events if isinstance(e, Cleared))
    # offsets and text stay the application's: the new server's turn text was only the remainder
    assert cleared.text_spoken.startswith(fo.heard_text) and cleared.text_spoken + cleared.text_remaining == TEXT
    words = [w for e in events if isinstance(e, Words) for w in e.words]
    assert all(TEXT[w.start_char:w.end_char] == w.text for w in words)
    assert_contiguous(events)
    assert not any(isinstance(e, MarkReached) for e in events)  # cleared before the end of the text
    assert not any(isinstance(e, TurnDone) for e in events)


async def test_failover_off_raises_at_the_cut_as_before():
    async with running_server(decoder_steps=60) as server, TcpProxy(server.port) as proxy:
        async with VoxpoolClient(proxy.target, service_config="", failover=False) as client:
            conv = await asyncio.wait_for(client.converse(pacing="REALTIME"), WAIT_S)
            assert type(conv).__name__ == "Conversation"
            await conv.send_text(TEXT)
            await conv.flush()
            with pytest.raises(VoxpoolError):
                await asyncio.wait_for(cut_after_speech(conv, proxy, 10), WAIT_S)


async def test_no_server_left_ends_the_call_with_a_clear_error():
    policy = FailoverPolicy(max_attempts=3, first_backoff_s=0.01, timeout_s=5)
    async with running_server(decoder_steps=60) as server:
        proxy = TcpProxy(server.port)
        await proxy.__aenter__()
        async with VoxpoolClient(proxy.target, service_config="", failover=policy) as client:
            conv = await asyncio.wait_for(client.converse(pacing="REALTIME"), WAIT_S)
            await conv.send_text(TEXT)
            await conv.flush()

            async def gone():
                await proxy.__aexit__(None, None, None)  # nothing listens any more

            with pytest.raises(ServerUnavailable, match="failover gave up after 3 attempt"):
                await asyncio.wait_for(cut_after_speech(conv, proxy, 10, then=gone), WAIT_S)


async def test_queued_turns_and_their_marks_are_resent_in_order():
    async with running_server(decoder_steps=60) as server, TcpProxy(server.port) as proxy:
        async with VoxpoolClient(proxy.target, service_config="") as client:
            conv = await asyncio.wait_for(client.converse(pacing="REALTIME"), WAIT_S)
            await conv.send_text(TEXT, turn_id="a")
            await conv.send_text("请稍候。", turn_id="b")  # opens b: a is complete, b plays after it
            await conv.mark("mb", turn_id="b")
            await conv.send_text("好的。", turn_id="b")
            await conv.flush("b")
            await conv.end()
            events = await asyncio.wait_for(cut_after_speech(conv, proxy, 90), WAIT_S)
    records = {e.turn_id: e for e in events if isinstance(e, Failover)}
    assert set(records) == {"a", "b"}
    assert records["b"].heard_text == "" and records["b"].resent_text == "请稍候。好的。"
    order = [(type(e).__name__, e.turn_id) for e in events if isinstance(e, (TurnDone, MarkReached))]
    assert order == [("TurnDone", "a"), ("MarkReached", "b"), ("TurnDone", "b")]
    assert_contiguous(events)
    turn_of_audio = [e.turn_id for e in events if isinstance(e, Audio) and not e.silence]
    assert turn_of_audio == sorted(turn_of_audio)  # a's audio, then b's: never interleaved


def test_sync_client_fails_over_too():
    import threading

    from clients.client import SyncVoxpoolClient

    async def serve(ready, stop):
        async with running_server(decoder_steps=60) as server, TcpProxy(server.port) as proxy:
            ready.append(proxy)
            while not stop.is_set():
                await asyncio.sleep(0.05)

    ready, stop = [], threading.Event()
    t = threading.Thread(target=lambda: asyncio.run(serve(ready, stop)), daemon=True)
    t.start()
    try:
        while not ready:
            stop.wait(0.05)
        proxy = ready[0]
        with SyncVoxpoolClient(proxy.target, service_config="") as client:
            conv = client.converse(pacing="REALTIME")
            conv.send_text(TEXT)
            conv.flush()
            conv.end()
            events, speech = [], 0
            for ev in conv:
                events.append(ev)
                if isinstance(ev, Audio) and not ev.silence:
                    speech += 1
                    if speech == 90:
                        proxy._server.get_loop().call_soon_threadsafe(proxy.sever)
        assert sum(isinstance(e, Failover) for e in events) == 1
        assert sum(isinstance(e, TurnDone) for e in events) == 1
    finally:
        stop.set()
        t.join(30)


class DroppingTts(tts_pb2_grpc.TtsServicer):
    """Takes every call (`started`), then drops it with UNAVAILABLE before any audio: a crash-looping backend."""

    def __init__(self):
        self.calls = 0

    async def Converse(self, request_iterator, context):
        self.calls += 1
        await request_iterator.__anext__()  # the config
        yield pb.ServerEvent(started=pb.SessionStarted(session_id=f"drop-{self.calls}", frame_bytes=160,
                                                       effective_config=config_event().config))
        await context.abort(grpc.StatusCode.UNAVAILABLE, "backend crashed")


async def test_a_server_that_drops_every_stream_is_given_up_on():
    policy = FailoverPolicy(max_attempts=3, first_backoff_s=0.01)
    server = grpc.aio.server()
    servicer = DroppingTts()
    tts_pb2_grpc.add_TtsServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with VoxpoolClient(f"127.0.0.1:{port}", service_config="", failover=policy) as client:
            conv = await asyncio.wait_for(client.converse(pacing="REALTIME"), WAIT_S)
            await conv.send_text(TEXT)
            await conv.flush()
            with pytest.raises(ServerUnavailable, match="broke 4 times in a row without any audio"):
                await asyncio.wait_for(cut_after_speech(conv, None, 10**6), WAIT_S)
        assert servicer.calls == 4  # the first stream and three failovers
    finally:
        await server.stop(0)
