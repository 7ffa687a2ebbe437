"""Control events over Limits.max_control_per_s: dropped and answered in-band (RATE_LIMITED), the call goes on; a
flood that ignores the errors ends the call once its budget of drops is spent."""

from __future__ import annotations

import re

import grpc
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from service.call.input import FLOOD_BUDGET_S
from tests.service.conftest import collect, config_event, end_event, flush_event, running_server, stub_for, text_event

RATE_PER_S = 1.0  # a limit this low gives a burst of 2: the drops do not depend on how fast the host is
BURST = 2
CONTROL_KINDS = [f.name for f in pb.ClientEvent.DESCRIPTOR.oneofs_by_name["event"].fields
                 if f.name not in ("config", "text", "end")]


def mark_event(name: str, turn_id: str = "") -> pb.ClientEvent:
    return pb.ClientEvent(mark=pb.Mark(name=name, turn_id=turn_id))


def control_event(kind: str) -> pb.ClientEvent:
    """A default event of any control kind (whatever kinds the proto has)."""
    field = pb.ClientEvent.DESCRIPTOR.fields_by_name[kind]
    return pb.ClientEvent(**{kind: getattr(pb, field.message_type.name)()})


def rate_limited(events) -> list[pb.Error]:
    return [e.error for e in events if e.HasField("error") and e.error.code == pb.Error.RATE_LIMITED]


async def test_started_publishes_the_control_limit():
    async with running_server(limits={"max_control_per_s": 7.5}) as server, stub_for(server.port) as stub:
        events = await collect(stub.Converse(iter([config_event(), end_event()])))
    assert events[0].started.limits.max_control_per_s == 7.5


async def test_marks_over_the_limit_are_dropped_in_band_and_the_call_goes_on():
    names = [f"m{i}" for i in range(8)]
    marks = [mark_event(n, turn_id="a" if i % 2 else "") for i, n in enumerate(names)]  # named turn, or the open one
    async with running_server(limits={"max_control_per_s": RATE_PER_S}) as server, stub_for(server.port) as stub:
        events = await collect(stub.Converse(iter([
            config_event(), text_event("你好。", turn_id="a"), *marks, flush_event("a"),
            text_event("再见。", turn_id="b"), end_event(),
        ])))
    errors = rate_limited(events)
    assert errors and all(e.turn_id == "a" for e in errors)
    for e in errors:
        assert "1 per second, bursts of 2 (Limits.max_control_per_s)" in e.message and "send fewer" in e.message
    dropped = [m.group(1) for e in errors if (m := re.match(r"mark '(\w+)' dropped", e.message))]
    reached = [e.mark_reached.name for e in events if e.HasField("mark_reached")]
    assert reached[:BURST] == names[:BURST]  # the burst is applied
    assert sorted(reached + dropped) == sorted(names) and not set(reached) & set(dropped)  # each mark one way
    assert len(dropped) >= 1
    # the call went on: both turns spoke and ended (a dropped flush is made up for by the next turn)
    assert [e.turn_done.turn_id for e in events if e.HasField("turn_done")] == ["a", "b"]
    assert {e.audio.turn_id for e in events if e.HasField("audio")} == {"a", "b"}


async def test_every_control_kind_counts():
    """The limit is over control events in general: any kind but config, text and end spends it."""
    assert {"flush", "mark", "clear"} <= set(CONTROL_KINDS)
    async with running_server(limits={"max_control_per_s": RATE_PER_S}) as server, stub_for(server.port) as stub:
        for kind in CONTROL_KINDS:
            events = await collect(stub.Converse(iter([
                config_event(), text_event("你好", turn_id="a"), *[control_event(kind)] * (BURST + 4), end_event()])))
            errors = rate_limited(events)
            assert errors and all(e.message.startswith(f"{kind} dropped") for e in errors), kind
            assert {e.turn_id for e in errors} <= {"a", ""}  # the open turn, or the one still playing ("" once none is)


async def test_a_flood_ends_the_call_only_after_its_budget_of_drops():
    budget = int(FLOOD_BUDGET_S * RATE_PER_S)
    async with running_server(limits={"max_control_per_s": RATE_PER_S}) as server, stub_for(server.port) as stub:
        call = stub.Converse(iter([config_event(), text_event("你好", turn_id="a"),
                                   *[mark_event(f"m{i}") for i in range(BURST + budget + 40)], end_event()]))
        events = []
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for e in call:
                events.append(e)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "too many control messages" in err.value.details() and "RATE_LIMITED" in err.value.details()
    assert len(rate_limited(events)) >= budget  # every drop within the budget was answered in-band first
