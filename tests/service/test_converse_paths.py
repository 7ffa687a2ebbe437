"""Every Converse event path on a real server: turns, marks, clear, in-band errors, limits, admission, pacing."""

import asyncio
import time

import grpc
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from tests.service.conftest import (
    collect, config_event, end_event, flush_event, kinds, running_server, stub_for, text_event, wait_for,
)


class Feeder:
    """A request iterator the test drives: put() events, close() to end the client side."""

    def __init__(self):
        self.q: asyncio.Queue = asyncio.Queue()

    def put(self, event):
        self.q.put_nowait(event)

    def close(self):
        self.q.put_nowait(None)

    def __aiter__(self):
        return self

    async def __anext__(self):
        item = await self.q.get()
        if item is None:
            raise StopAsyncIteration
        return item


async def next_of(call, kind: str, timeout_s: float = 10.0):
    async def _next():
        async for ev in call:
            if ev.WhichOneof("event") == kind:
                return ev
        raise AssertionError(f"stream ended before {kind}")
    return await asyncio.wait_for(_next(), timeout_s)


async def test_two_turns_in_order_with_marks(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Converse(iter([
            config_event(),
            text_event("第一句。", turn_id="a"),
            pb.ClientEvent(mark=pb.Mark(name="after-a", turn_id="a")),
            flush_event("a"),
            text_event("第二句。", turn_id="b"),
            pb.ClientEvent(mark=pb.Mark(name="after-b", turn_id="b")),
            end_event(),
        ])))
    ks = kinds(events)
    turn_of_audio = [e.audio.turn_id for e in events if e.HasField("audio") and not e.audio.silence]
    first_b = turn_of_audio.index("b")
    assert set(turn_of_audio[:first_b]) == {"a"} and set(turn_of_audio[first_b:]) == {"b"}  # played in order
    marks = [e.mark_reached for e in events if e.HasField("mark_reached")]
    assert [m.name for m in marks] == ["after-a", "after-b"]
    done = [e.turn_done.turn_id for e in events if e.HasField("turn_done")]
    assert done == ["a", "b"]
    # the mark of a fires when a's last frame was released, before any audio of b
    assert ks.index("mark_reached") < [i for i, e in enumerate(events) if e.HasField("audio") and e.audio.turn_id == "b"][0]
    a_end = max(e.audio.pts_ms + e.audio.duration_ms for e in events if e.HasField("audio") and e.audio.turn_id == "a")
    assert marks[0].pts_ms == a_end


CLEAR_TEXT = "您好，这是第一句。这是第二句，还有第三句。最后一句话。"


async def clear_mid_turn(server) -> tuple[list[tuple[float, pb.ServerEvent]], float]:
    """A REALTIME turn cleared after its 10th frame: every event with its arrival time, and when Clear was sent."""
    feeder = Feeder()
    received: list[tuple[float, pb.ServerEvent]] = []
    async with stub_for(server.port) as stub:
        call = stub.Converse(feeder)

        async def read():
            async for ev in call:
                received.append((time.monotonic(), ev))

        reader = asyncio.create_task(read())
        feeder.put(config_event(pacing=pb.Pacing.REALTIME))  # lead 60 ms = 3 frames of 20 ms
        feeder.put(text_event(CLEAR_TEXT, turn_id="t"))
        feeder.put(flush_event("t"))
        await wait_for(lambda: sum(e.HasField("audio") for _, e in received) >= 10, timeout_s=30)
        t_clear = time.monotonic()
        feeder.put(pb.ClientEvent(clear=pb.Clear()))
        await wait_for(lambda: any(e.HasField("cleared") for _, e in received), timeout_s=30)
        await asyncio.sleep(0.3)  # anything of the turn would show up now
        feeder.put(end_event())
        await reader
    return received, t_clear


async def test_clear_stops_audio_and_reports_text(tiny_server):
    received, _ = await clear_mid_turn(tiny_server)
    events = [e for _, e in received]
    at = next(i for i, e in enumerate(events) if e.HasField("cleared"))
    cleared = events[at].cleared
    assert cleared.turn_id == "t"
    before = [e.audio for e in events[:at] if e.HasField("audio")]
    assert len(before) >= 10 and not any(e.HasField("audio") for e in events[at:])  # nothing of it after `cleared`
    # `cleared` reports the end of the last frame released, the fade-out: playback ends exactly there
    assert cleared.last_pts_ms == before[-1].pts_ms + before[-1].duration_ms
    assert cleared.text_spoken + cleared.text_remaining == CLEAR_TEXT
    assert cleared.text_remaining  # interrupted early: the end was never spoken
    # the audio synthesized ahead of playback and never released, in whole 20 ms frames: the tiny voice synthesizes
    # far faster than the REALTIME release, so frames were queued when Clear came (as in test_telemetry_trace.py)
    assert cleared.dropped_audio_ms > 0 and cleared.dropped_audio_ms % 20 == 0
    assert not any(e.HasField("turn_done") for e in events)
    await wait_for(lambda: tiny_server.engine.backend.live_count == 0)  # engine slots freed


async def test_in_band_errors_keep_the_call(tiny_server):
    limit = tiny_server.cfg.limits.max_delta_chars
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Converse(iter([
            config_event(),
            text_event("好" * (limit + 1), turn_id="big"),
            pb.ClientEvent(flush=pb.Flush(turn_id="nosuch")),
            text_event("还在。", turn_id="ok"),
            end_event(),
        ])))
    errors = [e.error for e in events if e.HasField("error")]
    assert [e.code for e in errors] == [pb.Error.TEXT_TOO_LONG, pb.Error.UNKNOWN_TURN]
    assert "smaller pieces" in errors[0].message
    assert [e.turn_done.turn_id for e in events if e.HasField("turn_done")] == ["ok"]  # the call went on


async def test_config_twice_and_empty_event():
    async with running_server() as server, stub_for(server.port) as stub:
        for extra, needle in [(config_event(), "only be the first"), (pb.ClientEvent(), "empty ClientEvent")]:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await collect(stub.Converse(iter([config_event(), extra, end_event()])))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in err.value.details()


async def test_admission_refuses_with_pushback():
    async with running_server(server={"max_calls": 1}) as server, stub_for(server.port) as stub:
        feeder = Feeder()
        first = stub.Converse(feeder)
        feeder.put(config_event())
        await next_of(first, "started")
        second = Feeder()  # a client that sends its config and waits for the answer
        second.put(config_event())
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await collect(stub.Converse(second))  # refused before any event (latency: tests/load/test_overload.py)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        pushback = dict(err.value.trailing_metadata() or ())
        assert 0 < int(pushback["grpc-retry-pushback-ms"]) <= 1000
        feeder.put(end_event())
        await collect(first)


async def test_disconnect_frees_engine_slot(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        feeder = Feeder()
        call = stub.Converse(feeder)
        feeder.put(config_event(pacing=pb.Pacing.REALTIME))
        feeder.put(text_event("这是一段很长的文字。" * 5))
        feeder.put(flush_event())
        await next_of(call, "audio")
        assert tiny_server.engine.backend.live_count >= 1
        call.cancel()
    await wait_for(lambda: tiny_server.engine.backend.live_count == 0 and tiny_server.admission.active == 0)


@pytest.mark.parametrize("encoding, rate, frame_ms, nbytes", [
    (pb.AudioFormat.PCMU, 8000, 20, 160), (pb.AudioFormat.PCMA, 8000, 20, 160), (pb.AudioFormat.PCMU, 8000, 10, 80),
    (pb.AudioFormat.L16, 16000, 30, 960), (pb.AudioFormat.L16, 8000, 20, 320), (pb.AudioFormat.L16, 16000, 20, 640),
    (pb.AudioFormat.L16, 24000, 60, 2880), (pb.AudioFormat.L16, 44100, 10, 882),
])
async def test_frame_bytes(tiny_server, encoding, rate, frame_ms, nbytes):
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Converse(iter([
            config_event(encoding=encoding, rate=rate, frame_ms=frame_ms), text_event("好。"), end_event()])))
    assert events[0].started.frame_bytes == nbytes
    audio = [e.audio for e in events if e.HasField("audio")]
    assert audio and all(len(a.payload) == nbytes and a.duration_ms == frame_ms for a in audio)
    # 40 steps × 25 ms = 1 s of speech, padded up to whole frames
    assert sum(a.duration_ms for a in audio) == pytest.approx(1000, abs=frame_ms)
