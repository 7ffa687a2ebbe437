"""A turn whose text has nothing to read aloud (only emoji, punctuation or symbols): Converse answers an in-band
`nothing_to_say` warning and an empty turn_done, and goes on; Synthesize answers INVALID_ARGUMENT."""

from __future__ import annotations

import grpc
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from service.call.produce import NOTHING_TO_SAY
from tests.service.conftest import (
    collect, config_event, end_event, flush_event, kinds, running_server, stub_for, text_event,
)

UNSPEAKABLE = ["😀😀！", "。。。", "……", "👨‍👩‍👧‍👦", "ก"]  # the last has a letter the voice cannot read


def ssml_event(text: str, turn_id: str) -> pb.ClientEvent:
    return pb.ClientEvent(text=pb.TextDelta(text=text, turn_id=turn_id,
                                            turn_options=pb.TurnOptions(text_format=pb.TurnOptions.SSML)))


def turn_events(events, turn_id: str) -> list[str]:
    """Kinds of the events of one turn, in order (a warning, an audio frame, turn_done)."""
    out = []
    for e in events:
        kind = e.WhichOneof("event")
        if getattr(getattr(e, kind), "turn_id", None) == turn_id:
            out.append(kind)
    return out


async def test_converse_warns_and_sends_an_empty_turn_done_then_goes_on():
    async with running_server() as server, stub_for(server.port) as stub:
        for text in UNSPEAKABLE:
            events = await collect(stub.Converse(iter([
                config_event(), text_event(text, "a"), flush_event("a"), text_event("好。", "b"), flush_event("b"),
                end_event()])))
            warnings = [e.warning for e in events if e.HasField("warning") and e.warning.code == NOTHING_TO_SAY]
            assert [w.turn_id for w in warnings] == ["a"], text
            assert "'a'" in warnings[0].message and "send text with Chinese characters" in warnings[0].message
            assert turn_events(events, "a")[-2:] == ["warning", "turn_done"]  # the warning comes before turn_done
            assert "audio" not in turn_events(events, "a")
            done = next(e.turn_done for e in events if e.HasField("turn_done") and e.turn_done.turn_id == "a")
            assert done.audio_ms == 0 and done.chunks == 0
            assert "audio" in turn_events(events, "b")  # the call went on
            assert not any(e.HasField("warning") and e.warning.turn_id == "b" for e in events)


async def test_ssml_turn_with_nothing_to_say_warns_too_but_a_break_alone_does_not():
    async with running_server() as server, stub_for(server.port) as stub:
        events = await collect(stub.Converse(iter([
            config_event(), ssml_event("<speak>😀！</speak>", "a"), flush_event("a"),
            ssml_event('<speak><break time="100ms"/></speak>', "b"), flush_event("b"), end_event()])))
    codes = [(e.warning.code, e.warning.turn_id) for e in events if e.HasField("warning")]
    assert (NOTHING_TO_SAY, "a") in codes and (NOTHING_TO_SAY, "b") not in codes
    assert [e.turn_done.turn_id for e in events if e.HasField("turn_done")] == ["a", "b"]


@pytest.mark.parametrize("request_", [
    pb.SynthesizeRequest(text="😀😀！"),
    pb.SynthesizeRequest(text="ก"),
    pb.SynthesizeRequest(text="<speak>！！</speak>", options=pb.TurnOptions(text_format=pb.TurnOptions.SSML)),
], ids=["emoji", "unreadable-letter", "ssml"])
async def test_synthesize_answers_invalid_argument(tiny_server, request_):
    async with stub_for(tiny_server.port) as stub:
        call = stub.Synthesize(request_)
        got = []
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for e in call:
                got.append(e)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "nothing to say" in err.value.details() and "send text with Chinese characters" in err.value.details()
    assert "audio" not in kinds(got) and "turn_done" not in kinds(got)
