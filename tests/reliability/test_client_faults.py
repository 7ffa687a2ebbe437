"""Client faults: disconnect, cancel, deadline, a reader that stops, a writer that never reads. Each frees its call
slot, its engine request and its per-call objects (state created == state released, as Triton's cleanup test)."""

import asyncio

import grpc
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from tests.reliability.conftest import (
    Feeder, channel_to, config_event, counters, settled, serving, stub, text_event, tracked_state,
)

LONG_TEXT = "这是一通很长的电话，我们会一直说下去。" * 8  # 8 segments x 1 s (tiny voice)
STALL_S = 1.0
# a gateway with a small HTTP/2 receive window: without BDP probing a stream's window stays at 64 KiB, so a
# client that stops reading blocks the server's writes after ~1.3 s of 24 kHz L16 audio (with the default
# window growth it takes minutes of audio; the mechanism is the same)
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0)]


def wide_config(pacing=pb.Pacing.REALTIME) -> pb.ClientEvent:
    return config_event(encoding=pb.AudioFormat.L16, rate=24000, frame_ms=60, pacing=pacing)


async def first_audio(call) -> None:
    async def _next():
        async for ev in call:
            if ev.HasField("audio") and not ev.audio.silence:
                return
        raise AssertionError("call ended before audio")
    await asyncio.wait_for(_next(), 10)


async def busy(server) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + 10
    while counters(server)["engine_live"] == 0 or counters(server)["admission_slots"] == 0:
        assert loop.time() < end, "the call never reached the engine"
        await asyncio.sleep(0.01)


@pytest.fixture
async def server():
    async with serving({"limits": {"stall_timeout_s": STALL_S}}) as s:
        yield s


async def test_disconnect_mid_stream(server):
    baseline = tracked_state(server)
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    feeder = Feeder(config_event(pacing=pb.Pacing.REALTIME), text_event(LONG_TEXT))
    call = stub(ch).Converse(feeder)
    await first_audio(call)
    await busy(server)
    cancelled_before = server.engine.counters().requests_cancelled
    await ch.close()  # the connection goes away mid-audio
    after = await settled(server, baseline)
    assert after == baseline
    assert server.engine.counters().requests_cancelled > cancelled_before  # the engine dropped the request


async def test_cancel(server):
    baseline = tracked_state(server)
    async with channel_to(server.port) as ch:
        feeder = Feeder(config_event(pacing=pb.Pacing.REALTIME), text_event(LONG_TEXT))
        call = stub(ch).Converse(feeder)
        await first_audio(call)
        await busy(server)
        call.cancel()
        assert await call.code() == grpc.StatusCode.CANCELLED
        assert await settled(server, baseline) == baseline


async def test_deadline_exceeded(server):
    baseline = tracked_state(server)
    async with channel_to(server.port) as ch:
        feeder = Feeder(config_event(pacing=pb.Pacing.REALTIME), text_event(LONG_TEXT))
        call = stub(ch).Converse(feeder, timeout=1.5)
        heard_ms = 0
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for ev in call:
                heard_ms += ev.audio.duration_ms if ev.HasField("audio") else 0
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert heard_ms < 8000  # the deadline ended it, not the end of the 8 s of audio (REALTIME pacing)
        assert await settled(server, baseline) == baseline


@pytest.mark.parametrize("reads_before_stopping", [3, 0], ids=["stops-reading", "never-reads"])
async def test_client_that_does_not_read(server, reads_before_stopping):
    baseline = tracked_state(server)
    async with channel_to(server.port, SMALL_WINDOW) as ch:
        feeder = Feeder(wide_config(), text_event(LONG_TEXT))
        call = stub(ch).Converse(feeder)
        for _ in range(reads_before_stopping):
            await call.read()
        await busy(server)
        # the server gives up after the stall timeout and frees the slot, the engine request and the call's
        # state while this client still reads nothing
        state = await settled(server, {**baseline, "rpc_tasks": 1}, timeout_s=10)
        assert state == {**baseline, "rpc_tasks": 1}, state  # only the gRPC stream itself waits for the reader
        # when it reads again it gets the audio already sent, then the reason
        with pytest.raises(grpc.aio.AioRpcError) as err:
            while await call.read() is not grpc.aio.EOF:
                pass
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "did not read" in err.value.details()
        assert "grpc-retry-pushback-ms" not in dict(err.value.trailing_metadata() or ())  # no retry for a stall
    assert await settled(server, baseline) == baseline
