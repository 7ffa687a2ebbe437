"""A turn is one stream to the engine: the next segment is prepared while the current one plays, on its clock."""

from __future__ import annotations

import asyncio

from models.frontend.segmenter import Segment, Segmenter
from service.call.ahead import SegmentsAhead
from service.call.turn import Turn
from service.ssml import Pause, SsmlError


class Stream:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Prepared:
    def __init__(self, seg: Segment, request_id: str) -> None:
        self.segment, self.request_id, self.stream = seg, request_id, Stream()

    def close(self, turn: Turn) -> None:
        turn.detach_stream(self.stream)
        self.stream.close()


class FakeSynthesis:
    """Records every preparation (segment text, what it follows, the gap) in the order they start."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def prepare(self, turn: Turn, seg: Segment, follows: str = "", gap_ms: float = 0.0) -> Prepared:
        self.calls.append((seg.text, follows, gap_ms))
        await self.release.wait()
        prepared = Prepared(seg, f"req-{seg.text}")
        turn.attach_stream(prepared.stream)
        return prepared


def seg(text: str, start: int = 0) -> Segment:
    return Segment(text, start, start + len(text), "clause")


def new_turn() -> Turn:
    return Turn("t1", Segmenter())


async def test_the_next_segment_is_prepared_ahead_following_the_current_one_with_the_breaks_as_gap() -> None:
    turn, synth = new_turn(), FakeSynthesis()
    a, b, c = seg("您好，"), seg("请稍候。", 3), seg("再见。", 7)
    for item in (a, Pause(3, 300), Pause(3, 200), b, c, None):
        turn.segments.put_nowait(item)
    ahead = SegmentsAhead(turn, synth)
    assert await ahead.next_item() is a
    first = await ahead.prepared(a, "")
    ahead.look_ahead(first.request_id)  # while a plays
    ahead.look_ahead(first.request_id)  # one ahead at most: no second preparation
    await asyncio.sleep(0)
    assert synth.calls == [("您好，", "", 0.0), ("请稍候。", "req-您好，", 500.0)]
    # the breaks are still handed out in order (their silence is queued by the producer), then b, prepared already
    assert [await ahead.next_item() for _ in range(3)] == [Pause(3, 300), Pause(3, 200), b]
    second = await ahead.prepared(b, first.request_id)
    assert second.request_id == "req-请稍候。" and len(synth.calls) == 2
    ahead.look_ahead(second.request_id)
    await asyncio.sleep(0)
    assert synth.calls[-1] == ("再见。", "req-请稍候。", 0.0)
    assert await ahead.next_item() is c and await ahead.next_item() is None


async def test_a_segment_not_yet_queued_is_prepared_when_it_arrives() -> None:
    """LLM tokens: the next clause arrives while the first plays; the first went out alone, the next follows it."""
    turn, synth = new_turn(), FakeSynthesis()
    a, b = seg("您好，"), seg("请稍候。", 3)
    turn.segments.put_nowait(a)
    ahead = SegmentsAhead(turn, synth)
    first = await ahead.prepared(await ahead.next_item(), "")
    ahead.look_ahead(first.request_id)
    assert len(synth.calls) == 1  # nothing queued yet
    turn.segments.put_nowait(b)
    ahead.look_ahead(first.request_id)
    await asyncio.sleep(0)
    assert synth.calls[-1] == ("请稍候。", "req-您好，", 0.0)


async def test_a_refused_document_or_an_ended_turn_drops_the_work_ahead() -> None:
    turn, synth = new_turn(), FakeSynthesis()
    a, b, c = seg("您好，"), seg("请稍候。", 3), seg("再见。", 7)
    for item in (a, b, c):
        turn.segments.put_nowait(item)
    ahead = SegmentsAhead(turn, synth)
    first = await ahead.prepared(await ahead.next_item(), "")
    ahead.look_ahead(first.request_id)
    await asyncio.sleep(0)
    prepared_b = [s for s in turn.streams if s is not first.stream]
    assert len(prepared_b) == 1
    error = SsmlError("bad markup", 1, 1)
    turn.reject(error)  # closes every stream of the turn, empties its queue and queues the error
    assert prepared_b[0].closed
    assert await ahead.next_item() is error  # b, taken early, is not handed out any more
    # an ended turn: a preparation still running is cancelled and what it submits is closed
    turn2, synth2 = new_turn(), FakeSynthesis()
    for item in (a, b):
        turn2.segments.put_nowait(item)
    ahead2 = SegmentsAhead(turn2, synth2)
    first2 = await ahead2.prepared(await ahead2.next_item(), "")
    synth2.release.clear()
    ahead2.look_ahead(first2.request_id)
    await asyncio.sleep(0)
    ahead2.close()
    await asyncio.sleep(0)
    assert turn2.streams == {first2.stream}


async def test_a_calls_segments_reach_the_engine_as_one_chain_and_a_clear_leaves_nothing_behind() -> None:
    """Over gRPC with the tiny voice: each segment of a turn follows the one before it, the SSML break between two
    is its gap, a turn after a barge-in starts its own chain, and the clear leaves no engine request behind."""
    from protos.voxpool.v1 import tts_pb2 as pb
    from tests.service.conftest import config_event, converse_and_clear, running_server, stub_for, text_event, \
        wait_for

    async with running_server() as server, stub_for(server.port) as stub:
        submitted: list = []
        submit = server.deps.engine.submit

        def recording_submit(request):
            submitted.append(request)
            return submit(request)

        server.deps.engine.submit = recording_submit
        ssml = pb.TurnOptions(text_format=pb.TurnOptions.TextFormat.SSML)
        events = await converse_and_clear(stub, [
            config_event(),
            pb.ClientEvent(text=pb.TextDelta(turn_id="s", text='<speak>您好，请稍候。<break time="300ms"/>'
                                             '正在为您转接。</speak>', turn_options=ssml)),
            pb.ClientEvent(flush=pb.Flush(turn_id="s")),
            text_event("这是第一句。这是第二句，还有第三句。最后一句话。", turn_id="t"),
        ], clear_when=lambda evs: any(e.HasField("turn_done") for e in evs)
                      and sum(e.HasField("audio") and e.audio.turn_id == "t" for e in evs) >= 5)
        await wait_for(lambda: server.engine.backend.live_count == 0)  # nothing submitted ahead is left running
    assert any(e.HasField("cleared") and e.cleared.turn_id == "t" for e in events)
    by_turn: dict[str, list] = {}
    for request in submitted:
        by_turn.setdefault(request.request_id.split("/")[1], []).append(request)
    s_chain = by_turn["s"]
    assert [r.options.follows for r in s_chain] == ["", *(r.request_id for r in s_chain[:-1])]
    assert [r.options.gap_ms for r in s_chain][-1] == 300.0  # the break before 正在为您转接
    t_chain = by_turn["t"]
    assert len(t_chain) >= 2  # the rest of the turn was in the engine already when the clear came
    assert all(r.options.follows == prev.request_id for prev, r in zip(t_chain, t_chain[1:]))
