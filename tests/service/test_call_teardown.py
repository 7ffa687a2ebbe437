"""A call that ends (an error, the end of input) tears down every one of its tasks, whatever each was awaiting.

Regression (found by tests/reliability/test_hostile_input.py): on Python 3.11, `asyncio.wait_for` swallows a
cancellation that arrives while the awaited write completes; the call's producer task then carried on and waited
for a next turn that never came, so the handler never returned and the client waited for its deadline.
"""

from __future__ import annotations

import asyncio

import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from service.call import CallDeps, CallSession
from service.config import load_config
from service.errors import InvalidArgument
from service.paced_sender import PacedSender
from service.pacing import Pacer
from service.negotiation import VoiceEntry
from tests.service.conftest import config_event, flush_event

HANG_GUARD_S = 10.0  # only a hang detector: every await below completes within a few loop iterations


class HeldWrites:
    """A ServicerContext whose writes after `started` wait until the test releases them."""

    def __init__(self) -> None:
        self.events: list[pb.ServerEvent] = []
        self.release = asyncio.get_running_loop().create_future()
        self.holding = asyncio.Event()  # a write is waiting for `release`

    async def write(self, event: pb.ServerEvent) -> None:
        if not event.HasField("started"):
            self.holding.set()
            await self.release
        self.events.append(event)

    def time_remaining(self) -> None:
        return None


def _deps() -> CallDeps:
    cfg = load_config(None, environ={})
    voice = VoiceEntry(name="tiny", language="zh-CN", sample_rate_hz=24000, license="", description="",
                       is_default=True)
    return CallDeps(engine=None, frontend=None, executor=None, voices={"tiny": voice}, cfg=cfg)


async def test_a_write_completing_as_the_call_fails_does_not_keep_the_call_alive(caplog):
    context = HeldWrites()
    loop = asyncio.get_running_loop()

    async def events():
        yield config_event()
        yield pb.ClientEvent(mark=pb.Mark(name="m"))  # opens a turn with no text ...
        yield flush_event()  # ... completes it: the producer writes mark_reached and waits in that write
        await context.holding.wait()
        # the write completes in the same loop iteration as the call's teardown cancels the producer
        loop.call_soon(context.release.set_result, None)
        yield pb.ClientEvent()  # an empty event ends the call with INVALID_ARGUMENT

    session = CallSession(_deps(), context, "teardown-1", default_pacing="ASAP")
    with pytest.raises(InvalidArgument, match="empty ClientEvent"):
        await asyncio.wait_for(session.run(events()), HANG_GUARD_S)
    assert all(t.done() for t in asyncio.all_tasks() if t.get_name().startswith("teardown-1-"))
    assert "outlived a cancel" not in caplog.text  # every task honoured the first cancel


async def test_a_sender_woken_as_it_is_cancelled_ends():
    """PacedSender.run ends on a cancel even when a push wakes it in the same iteration."""
    pacer = Pacer(20, 60, mode="REALTIME")
    sender = PacedSender(pacer, send=lambda action: asyncio.sleep(0))
    for _ in range(10):
        sender.push(object())
    run = asyncio.ensure_future(sender.run())
    while pacer.stats.released_frames < 4:  # the lead is full: the sender now waits for the next release time
        await asyncio.sleep(0)
    sender.push(object())  # wakes it ...
    run.cancel()  # ... and the cancel lands in the same iteration
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run, HANG_GUARD_S)


async def test_a_producer_given_room_as_it_is_cancelled_ends():
    pacer = Pacer(20, 60, mode="REALTIME", max_ahead_ms=80)
    sender = PacedSender(pacer, send=lambda action: asyncio.sleep(0))
    for _ in range(5):  # more than max_ahead_ms queued: no room
        sender.push(object())
    waiting = asyncio.ensure_future(sender.wait_for_room())
    await asyncio.sleep(0)
    sender.clear()  # room again ...
    waiting.cancel()  # ... as the cancel lands
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, HANG_GUARD_S)


async def test_a_frame_being_sent_counts_as_unsent():
    """The call ends once no frame is unsent. The frame whose send is in progress counts: a cleared turn's fade-out
    frame is written, then its `cleared`, and the call (its producer saw nothing queued, no turn active) had ended
    in between, cancelling the send, so `cleared` was lost (seen beside a CPU hog, where writes are slow)."""
    gate = asyncio.Event()
    sent: list[int] = []

    async def send(action) -> None:
        await gate.wait()
        sent.append(action.seq)

    sender = PacedSender(Pacer(20, 60, mode="ASAP"), send)
    task = asyncio.create_task(sender.run())
    sender.push("frame")
    sender.finish()
    for _ in range(10):  # let the sender take the frame and start its send
        await asyncio.sleep(0)
    assert sender.pacer.queued_frames == 0 and sender.unsent_frames == 1 and not sent
    gate.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert sent == [0] and sender.unsent_frames == 0
    sender.close()
    await asyncio.wait_for(task, HANG_GUARD_S)


async def test_clear_then_end_with_slow_writes_still_sends_cleared(tiny_server, monkeypatch):
    """Clear, then End at once, with every audio write slow (a loaded host): the fade-out frame and `cleared` both
    reach the client before the call ends."""
    from service.call.outbox import Outbox
    from tests.service.conftest import end_event, stub_for, text_event

    write = Outbox.write

    async def slow_write(self, event):
        if event.HasField("audio"):
            await asyncio.sleep(0.1)
        await write(self, event)

    monkeypatch.setattr(Outbox, "write", slow_write)
    async with stub_for(tiny_server.port) as stub:
        call = stub.Converse()
        await call.write(config_event(pacing=pb.Pacing.ASAP))
        await call.write(text_event("您好，欢迎致电客服中心，请问有什么可以帮您？", turn_id="t1"))
        await call.write(flush_event())
        received = []
        async for event in call:
            received.append(event)
            if event.HasField("audio") and not event.audio.silence:
                await call.write(pb.ClientEvent(clear=pb.Clear(turn_id="t1")))
                await call.write(end_event())
                await call.done_writing()
                break
        received += [e async for e in call]
    assert [e.cleared.turn_id for e in received if e.HasField("cleared")] == ["t1"]


async def test_a_refused_config_lets_the_clients_next_write_land_first():
    """A config refused at once (unknown voice) still reads what the client already sent (its End) before the call
    ends with INVALID_ARGUMENT: a Python aio client whose write is still in flight when the status comes reports
    INTERNAL "Internal error from Core" instead (grpc/grpc#36066; seen beside a CPU hog)."""
    read: list[str] = []

    async def events():
        for event in (config_event(voice="nope"), pb.ClientEvent(end=pb.End())):
            read.append(event.WhichOneof("event"))
            yield event

    session = CallSession(_deps(), HeldWrites(), "refused-1", default_pacing="ASAP")
    with pytest.raises(InvalidArgument, match="voice"):
        await asyncio.wait_for(session.run(events()), HANG_GUARD_S)
    assert read == ["config", "end"]


@pytest.mark.parametrize("extra, needle", [(config_event(), "only be the first"), (pb.ClientEvent(), "empty ClientEvent")])
async def test_a_call_refused_mid_stream_lets_the_clients_next_write_land_first(extra, needle):
    """The same for a call refused after its config (a second config, an empty event): its End, already sent, is read
    before INVALID_ARGUMENT ends the call (found beside the CPU hog: `test_config_twice_and_empty_event` saw
    INTERNAL "Internal error from Core")."""
    read: list[str] = []

    async def events():
        for event in (config_event(), extra, pb.ClientEvent(end=pb.End())):
            read.append(event.WhichOneof("event") or "empty")
            yield event

    session = CallSession(_deps(), HeldWrites(), "refused-2", default_pacing="ASAP")
    with pytest.raises(InvalidArgument, match=needle):
        await asyncio.wait_for(session.run(events()), HANG_GUARD_S)
    assert read[-1] == "end" and len(read) == 3
