"""Lexicon problems as the proto promises: a bad SessionConfig.lexicon entry is skipped with a
`lexicon_entry_invalid` warning and the others apply; a bad reading inside a turn (an SSML <phoneme>) fails that
turn with INVALID_LEXICON; the call goes on either way."""

from __future__ import annotations

from protos.voxpool.v1 import tts_pb2 as pb
from service.call.session import LEXICON_ENTRY_INVALID, MAX_LEXICON_WARNINGS
from tests.service.conftest import (
    assert_same_l16_frames, collect, config_event, end_event, flush_event, running_server, stub_for, text_event,
)

GOOD = {"银行": "yin2 xing2"}  # a reading the text would not get without the lexicon
BAD = {
    "重庆": "chong2",  # one syllable for two characters
    "朝阳": "chao yang",  # no tone numbers
    "VIP": "wei1 ai1 pi1",  # graphemes are matched on Hanzi only
}
L16 = dict(encoding=pb.AudioFormat.L16)


def warnings(events, code: str = LEXICON_ENTRY_INVALID) -> list[pb.Warning]:
    return [e.warning for e in events if e.HasField("warning") and e.warning.code == code]


def audio(events, turn_id: str = "a") -> list[pb.AudioFrame]:
    return [e.audio for e in events if e.HasField("audio") and e.audio.turn_id == turn_id]


async def speak(stub, lexicon: dict, text: str = "银行。") -> list[pb.ServerEvent]:
    return await collect(stub.Converse(iter([
        config_event(lexicon=lexicon, **L16), text_event(text, "a"), flush_event("a"), end_event()])))


async def test_a_bad_entry_is_skipped_with_a_warning_and_the_others_apply():
    async with running_server() as server, stub_for(server.port) as stub:
        mixed = await speak(stub, {**BAD, **GOOD})
        good_only = await speak(stub, GOOD)
        none = await speak(stub, {})
    assert dict(mixed[0].started.effective_config.lexicon) == GOOD  # the entries in use
    got = warnings(mixed)
    assert [e.WhichOneof("event") for e in mixed[1:1 + len(BAD)]] == ["warning"] * len(BAD)  # right after started
    assert len(got) == len(BAD) and all(w.turn_id == "" for w in got)  # call-scoped
    by_entry = {grapheme: w.message for grapheme, w in zip(sorted(BAD), got)}  # in grapheme order
    for grapheme, message in by_entry.items():
        assert message.startswith(f"lexicon entry {grapheme!r}") and "this entry is skipped" in message
    assert "one syllable per character" in by_entry["重庆"] and "tone-numbered" in by_entry["朝阳"]
    assert "only Hanzi" in by_entry["VIP"]
    assert not any(e.HasField("error") for e in mixed)
    assert [e.turn_done.turn_id for e in mixed if e.HasField("turn_done")] == ["a"]
    assert_same_l16_frames(audio(mixed), audio(good_only))  # the good entry is read as without the bad ones
    assert [f.payload for f in audio(none)] != [f.payload for f in audio(good_only)]  # and it does change the reading
    assert not warnings(good_only)


async def test_many_bad_entries_give_a_bounded_number_of_warnings():
    bad = {f"好{'好' * i}": "hao" for i in range(MAX_LEXICON_WARNINGS + 5)}
    async with running_server() as server, stub_for(server.port) as stub:
        events = await speak(stub, bad, text="你好。")
    got = warnings(events)
    assert len(got) == MAX_LEXICON_WARNINGS + 1
    assert got[-1].message.startswith("5 more lexicon entries are invalid and skipped")
    assert dict(events[0].started.effective_config.lexicon) == {}
    assert audio(events)


async def test_synthesize_skips_a_bad_entry_with_a_warning():
    async with running_server() as server, stub_for(server.port) as stub:
        request = pb.SynthesizeRequest(text="银行。", lexicon={**BAD, **GOOD},
                                       audio=pb.AudioFormat(encoding=pb.AudioFormat.L16))
        events = await collect(stub.Synthesize(request))
    assert len(warnings(events)) == len(BAD)
    assert audio(events, "synthesize") and events[-1].HasField("turn_done")


async def test_a_bad_phoneme_reading_fails_its_turn_with_invalid_lexicon():
    ssml = '<speak>去<phoneme alphabet="pinyin" ph="chao yang">朝阳</phoneme></speak>'
    async with running_server() as server, stub_for(server.port) as stub:
        events = await collect(stub.Converse(iter([
            config_event(), pb.ClientEvent(text=pb.TextDelta(
                text=ssml, turn_id="a", turn_options=pb.TurnOptions(text_format=pb.TurnOptions.SSML))),
            flush_event("a"), text_event("再见。", "b"), flush_event("b"), end_event()])))
    errors = [e.error for e in events if e.HasField("error")]
    assert [(e.code, e.turn_id) for e in errors] == [(pb.Error.INVALID_LEXICON, "a")]
    assert "line 1, column 9" in errors[0].message and "'chao' is not tone-numbered pinyin" in errors[0].message
    assert not audio(events, "a") and audio(events, "b")  # the call went on
    assert [e.turn_done.turn_id for e in events if e.HasField("turn_done")] == ["b"]
