"""Failover within the limits the new server announced: resent turns are cut at its per-delta limit and sent no
faster than its buffered text drains, so it refuses none of them; text refused for buffer space never enters the
journal, so a failover never speaks it twice. A proxy carries the call and, at the cut, leads to the second
server (with the limits named in each test)."""

from __future__ import annotations

import asyncio

from clients.client import Audio, Cleared, Failover, TurnDone, TurnError, VoxpoolClient, Words
from tests.tcp_proxy import TcpProxy
from tests.clients.test_failover import WAIT_S, assert_contiguous
from tests.service.conftest import running_server

SMALL = {"max_delta_chars": 20, "max_buffered_chars": 40}
A = "您好，这里是客户服务中心。您的业务正在办理中，请不要挂机。我们马上为您转接人工服务。感谢您的耐心等待。"
B = "请稍候，我们正在为您查询账户信息，马上就好。"


def words_after(events: list, at: int, turn_id: str) -> list:
    return [w for e in events[at:] if isinstance(e, Words) and e.turn_id == turn_id for w in e.words]


async def test_resent_turns_are_cut_and_paced_for_a_server_with_smaller_limits():
    async with running_server(decoder_steps=60) as first, running_server(decoder_steps=60, limits=SMALL) as second, \
            TcpProxy(first.port) as proxy:
        async with VoxpoolClient(proxy.target, service_config="") as client:
            conv = await asyncio.wait_for(client.converse(pacing="REALTIME", word_timestamps=True), WAIT_S)
            await conv.send_text(A, turn_id="a")  # one delta: within the first server's limits
            await conv.send_text(B, turn_id="b")
            await conv.flush("b")
            await conv.end()
            events, speech = [], 0
            async for ev in conv:
                events.append(ev)
                if isinstance(ev, Audio) and not ev.silence:
                    speech += 1
                    if speech == 30:
                        proxy.upstream_port = second.port  # the next connection reaches the other server
                        proxy.sever()
    assert not any(isinstance(e, TurnError) for e in events), [e for e in events if isinstance(e, TurnError)]
    records = {e.turn_id: e for e in events if isinstance(e, Failover)}
    assert set(records) == {"a", "b"}
    assert records["a"].heard_text + records["a"].resent_text == A and records["b"].resent_text == B
    # more than the server holds at once, and each turn longer than one delta: cut, and paced by what drained
    assert len(records["a"].resent_text) + len(B) > SMALL["max_buffered_chars"]
    assert len(records["a"].resent_text) > SMALL["max_delta_chars"]
    assert [e.turn_id for e in events if isinstance(e, TurnDone)] == ["a", "b"]
    for turn_id, text, heard in (("a", A, len(records["a"].heard_text)), ("b", B, 0)):
        at = events.index(records[turn_id])
        after = words_after(events, at, turn_id)
        assert all(text[w.start_char:w.end_char] == w.text and w.start_char >= heard for w in after)
        assert all(p.end_char <= w.start_char for p, w in zip(after, after[1:])), "each word once, in order"
        hanzi = {i for i in range(heard, len(text)) if "\u4e00" <= text[i] <= "\u9fff"}
        assert hanzi <= {i for w in after for i in range(w.start_char, w.end_char)}, "every resent word spoken"
    assert_contiguous(events)


async def test_text_refused_for_buffer_space_is_not_spoken_twice_after_a_failover():
    first_part, second_part, third = "您好，这里是客户服务中心。", "您的业务正在办理中，请不要挂机。", "我们马上为您转接人工服务。"
    text = first_part + second_part + third
    assert len(first_part + second_part) + len(third) > SMALL["max_buffered_chars"]
    async with running_server(decoder_steps=60, limits=SMALL) as first, \
            running_server(decoder_steps=60, limits=SMALL) as second, TcpProxy(first.port) as proxy:
        async with VoxpoolClient(proxy.target, service_config="") as client:
            conv = await asyncio.wait_for(client.converse(pacing="REALTIME", word_timestamps=True), WAIT_S)
            await conv.send_text(first_part, turn_id="a")
            await conv.send_text(second_part, turn_id="a")
            await conv.send_text(third, turn_id="a")  # 42 characters would wait: refused, retryable
            events: list = []
            refused = retry_due = verdict_due = False
            accepted_at, cut = None, False
            async for ev in conv:
                events.append(ev)
                if verdict_due:  # a refusal is answered at once: the event after the retry tells
                    verdict_due = False
                    if isinstance(ev, TurnError):
                        retry_due = True
                        continue
                    accepted_at = len(events)
                    await conv.flush("a")
                    await conv.end()
                if isinstance(ev, TurnError):
                    assert ev.code == "TEXT_TOO_LONG" and ev.retryable and ev.turn_id == "a", ev
                    refused = retry_due = True
                elif isinstance(ev, Words) and retry_due:  # audio went out: room again, maybe
                    retry_due = False
                    verdict_due = True
                    await conv.send_text(third, turn_id="a")
                elif isinstance(ev, Audio) and not ev.silence and accepted_at is not None and not cut:
                    if sum(isinstance(e, Audio) and not e.silence for e in events[accepted_at:]) == 20:
                        cut = True
                        proxy.upstream_port = second.port
                        proxy.sever()
    assert refused and cut and accepted_at is not None
    fo = [e for e in events if isinstance(e, Failover)]
    assert len(fo) == 1 and fo[0].turn_id == "a"
    assert fo[0].heard_text + fo[0].resent_text == text  # the refused copy was never journaled
    at = events.index(fo[0])
    after = words_after(events, at, "a")
    assert all(text[w.start_char:w.end_char] == w.text for w in after)
    assert all(p.end_char <= w.start_char for p, w in zip(after, after[1:]))
    assert not any(isinstance(e, TurnError) for e in events[accepted_at:])
    assert [e.turn_id for e in events if isinstance(e, TurnDone)] == ["a"]
    assert_contiguous(events)


async def test_a_clear_does_not_wait_behind_text_held_for_buffer_space():
    async with running_server(decoder_steps=60) as first, running_server(decoder_steps=60, limits=SMALL) as second, \
            TcpProxy(first.port) as proxy:
        async with VoxpoolClient(proxy.target, service_config="") as client:
            conv = await asyncio.wait_for(client.converse(pacing="REALTIME"), WAIT_S)
            await conv.send_text(A, turn_id="a")
            await conv.send_text(B, turn_id="b")
            await conv.flush("b")
            events, speech = [], 0
            async for ev in conv:
                events.append(ev)
                if isinstance(ev, Audio) and not ev.silence:
                    speech += 1
                    if speech == 10:
                        proxy.upstream_port = second.port
                        proxy.sever()
                if isinstance(ev, Failover) and ev.turn_id == "a":
                    # a's remainder fills the new server's 40 characters: b is held back, all of it
                    await conv.clear("b")
                    await conv.end()
    cleared = [e for e in events if isinstance(e, Cleared)]
    assert len(cleared) == 1 and cleared[0].turn_id == "b"
    assert cleared[0].text_spoken == "" and cleared[0].text_remaining == B
    assert [e.turn_id for e in events if isinstance(e, TurnDone)] == ["a"]
    assert not any(isinstance(e, Audio) and e.turn_id == "b" for e in events)
    assert not any(isinstance(e, TurnError) for e in events), [e for e in events if isinstance(e, TurnError)]
