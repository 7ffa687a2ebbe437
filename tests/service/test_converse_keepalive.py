"""Keepalive: a client with nothing to say keeps its stream past the idle timeout without starting a turn, and a flood
of keepalives is limited exactly as a flood of any other control message is."""

from __future__ import annotations

import asyncio

import grpc

from protos.voxpool.v1 import tts_pb2 as pb
from tests.service.conftest import (
    config_event,
    end_event,
    flush_event,
    kinds,
    running_server,
    stub_for,
    text_event,
)

KEEPALIVE = pb.ClientEvent(keepalive=pb.Keepalive())


class Feeder:
    """A request iterator the test drives: put() events, close() to end the client side."""

    def __init__(self, *first: pb.ClientEvent):
        self.q: asyncio.Queue = asyncio.Queue()
        for event in first:
            self.q.put_nowait(event)

    def put(self, event: pb.ClientEvent) -> None:
        self.q.put_nowait(event)

    def __aiter__(self) -> "Feeder":
        return self

    async def __anext__(self) -> pb.ClientEvent:
        item = await self.q.get()
        if item is None:
            raise StopAsyncIteration
        return item


async def read_all(call) -> tuple[list[pb.ServerEvent], grpc.StatusCode]:
    events = []
    try:
        async for ev in call:
            events.append(ev)
    except grpc.aio.AioRpcError:
        pass
    return events, await call.code()


async def test_keepalives_hold_an_idle_stream_open_and_start_no_turn():
    async with running_server(limits={"idle_timeout_s": 1.5}) as server, stub_for(server.port) as stub:
        kept = Feeder(config_event())
        kept_call = stub.Converse(kept)
        kept_events: list[pb.ServerEvent] = []
        reader = asyncio.create_task(read_all(kept_call))

        async def keep_alive() -> None:
            while True:
                kept.put(KEEPALIVE)
                await asyncio.sleep(0.1)

        pinger = asyncio.create_task(keep_alive())
        try:
            for _ in range(2):  # two quiet calls in a row end by the idle timeout while the kept one lives on
                quiet_events, quiet_code = await asyncio.wait_for(read_all(stub.Converse(Feeder(config_event()))), 30)
                assert quiet_code == grpc.StatusCode.OK and kinds(quiet_events) == ["started"]
                assert not reader.done()
        finally:
            pinger.cancel()
        for event in (text_event("您好。", "k1"), flush_event("k1"), end_event()):
            kept.put(event)
        kept_events, code = await asyncio.wait_for(reader, 30)
    assert code == grpc.StatusCode.OK
    seen = kinds(kept_events)
    assert seen[0] == "started" and "audio" in seen
    # the keepalives started nothing: the only turn is the one the text opened
    assert [e.turn_done.turn_id for e in kept_events if e.HasField("turn_done")] == ["k1"]
    assert {e.audio.turn_id for e in kept_events if e.HasField("audio")} == {"k1"}


async def flood_outcome(stub, event: pb.ClientEvent, count: int) -> tuple[grpc.StatusCode, list[str]]:
    """The call's status and its in-band error codes after `count` copies of `event` sent at once, then a turn."""
    events, code = await asyncio.wait_for(read_all(stub.Converse(iter(
        [config_event(), *[event] * count, text_event("好的。", "after"), flush_event("after"), end_event()]))), 30)
    return code, sorted({pb.Error.Code.Name(e.error.code) for e in events if e.HasField("error")})


async def test_a_keepalive_flood_is_limited_like_a_flush_flood():
    async with running_server(limits={"max_control_per_s": 5.0}) as server, stub_for(server.port) as stub:
        within = await flood_outcome(stub, KEEPALIVE, 4)
        keepalive_flood = await flood_outcome(stub, KEEPALIVE, 60)
        flush_flood = await flood_outcome(stub, flush_event(), 60)
    assert within == (grpc.StatusCode.OK, [])
    assert keepalive_flood != within  # the flood was limited
    assert keepalive_flood == flush_flood  # the same way any control message is
