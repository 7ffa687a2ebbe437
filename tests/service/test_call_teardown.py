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
from service.session import VoiceEntry
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
