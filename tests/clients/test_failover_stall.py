"""A server that freezes mid-turn (its connection stays open, nothing arrives: a stopped process, a partition) is
left for another once REALTIME frames stop for longer than the bound; the caller's gap counts from the last frame
received. Between turns, and while an open turn waits for text (the server sends silence then), nothing is
missing and the call stays where it is. Two proxies in front of one in-process server stand for two servers."""

from __future__ import annotations

import asyncio

from clients.client import Audio, Failover, FailoverPolicy, TurnDone, TurnError, VoxpoolClient, Words
from tests.tcp_proxy import TcpProxy
from tests.clients.test_failover import TEXT, WAIT_S, assert_contiguous
from tests.service.conftest import running_server

STALL_S = 0.5
FRAME_MS = 20


async def client_over(*proxies: TcpProxy, policy: FailoverPolicy) -> VoxpoolClient:
    """A client balancing round robin over the proxies, each with a ready connection."""
    target = "ipv4:" + ",".join(p.target for p in proxies)
    client = VoxpoolClient(target, options=[("grpc.use_local_subchannel_pool", 1)], failover=policy)
    await client.wait_ready(WAIT_S)
    for _ in range(10):
        await client.list_voices()
    return client


async def test_a_frozen_server_mid_turn_is_left_and_the_gap_counts_from_the_last_frame():
    policy = FailoverPolicy(stall_timeout_s=STALL_S)
    async with running_server(decoder_steps=60) as server, TcpProxy(server.port) as a, TcpProxy(server.port) as b:
        client = await client_over(a, b, policy=policy)
        try:
            conv = await asyncio.wait_for(client.converse(pacing="REALTIME", word_timestamps=True), WAIT_S)
            down = {a: a.bytes_down, b: b.bytes_down}
            await conv.send_text(TEXT, turn_id="t1")
            await conv.flush("t1")
            await conv.end()
            events, speech, frozen = [], 0, None

            async def read() -> None:
                nonlocal speech, frozen
                async for ev in conv:
                    events.append(ev)
                    if isinstance(ev, Audio) and not ev.silence:
                        speech += 1
                        if speech == 60:  # mid-turn: freeze the proxy that carries the call
                            frozen = max((a, b), key=lambda p: p.bytes_down - down[p])
                            frozen.freeze()

            await asyncio.wait_for(read(), WAIT_S)
        finally:
            await client.close()
    assert frozen is not None and conv.failovers == 1
    fo = [e for e in events if isinstance(e, Failover)]
    assert len(fo) == 1 and fo[0].turn_id == "t1"
    assert fo[0].reason.startswith("UNAVAILABLE: no message from the server"), fo[0].reason
    assert fo[0].heard_text + fo[0].resent_text == TEXT and fo[0].resent_text
    at = events.index(fo[0])
    # the silence the caller had: the slots missed while the server was silent, then the fill; the break cannot
    # have been seen before the bound ran out after the last message
    assert fo[0].gap_ms >= STALL_S * 1000 - 2 * FRAME_MS
    assert_contiguous(events)
    assert not any(isinstance(e, TurnError) for e in events)
    done = [e for e in events if isinstance(e, TurnDone)]
    assert len(done) == 1 and events[-1] is done[0] and events.index(done[0]) > at
    assert done[0].audio_ms == sum(e.duration_ms for e in events if isinstance(e, Audio) and not e.silence)
    words_after = [w for e in events[at:] if isinstance(e, Words) for w in e.words]
    assert words_after and all(w.start_char >= len(fo[0].heard_text) for w in words_after)
    assert all(TEXT[w.start_char:w.end_char] == w.text for w in words_after)


async def test_no_failover_between_turns_nor_while_an_open_turn_waits_for_text():
    policy = FailoverPolicy(stall_timeout_s=0.3)
    async with running_server(decoder_steps=60) as server, TcpProxy(server.port) as a:
        client = await client_over(a, policy=policy)
        try:
            conv = await asyncio.wait_for(client.converse(pacing="REALTIME"), WAIT_S)
            events: list = []
            got_done, got_speech = asyncio.Event(), asyncio.Event()

            async def read() -> None:
                async for ev in conv:
                    events.append(ev)
                    if isinstance(ev, TurnDone) and ev.turn_id == "a":
                        got_done.set()
                    if isinstance(ev, Audio) and not ev.silence and ev.turn_id == "b":
                        got_speech.set()

            reader = asyncio.create_task(read())
            await conv.send_text("您好，这里是客户服务中心。", turn_id="a")
            await conv.flush("a")
            await asyncio.wait_for(got_done.wait(), WAIT_S)
            await asyncio.sleep(1.0)  # between turns: no frame is owed, the reader waits on a quiet stream
            await conv.send_text("您的业务正在办理中，", turn_id="b")  # open: the server fills silence after it
            await asyncio.wait_for(got_speech.wait(), WAIT_S)

            async def waiting_in_silence() -> None:  # the clause was spoken: the turn waits for text, in fill frames
                while not all(isinstance(e, Audio) and e.silence and e.turn_id == "b" for e in events[-10:]):
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(waiting_in_silence(), WAIT_S)
            await asyncio.sleep(1.0)
            await conv.send_text("请不要挂机。", turn_id="b")
            await conv.flush("b")
            await conv.end()
            await asyncio.wait_for(reader, WAIT_S)
        finally:
            await client.close()
    assert conv.failovers == 0 and a.connections == 1
    assert not any(isinstance(e, Failover) for e in events)
    assert [e.turn_id for e in events if isinstance(e, TurnDone)] == ["a", "b"]
    silence_in_b = [e for e in events if isinstance(e, Audio) and e.silence and e.turn_id == "b"]
    assert len(silence_in_b) >= 1000 // FRAME_MS // 2  # the open turn was kept alive by fill frames
