"""SSML turns on a real server (tiny voice): breaks as exact silence, marks at their media time, say-as/sub/phoneme
read as the spans and lexicon they stand for, prosody volume, heard text and word timings over the text content."""

import asyncio
import contextlib

import grpc
import numpy as np
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from tests.service.conftest import (
    assert_same_l16_frames,
    collect,
    config_event,
    end_event,
    flush_event,
    kinds,
    running_server,
    stub_for,
    text_event,
    wait_for,
)

SSML = pb.TurnOptions(text_format=pb.TurnOptions.SSML)
L16 = dict(encoding=pb.AudioFormat.L16, rate=8000, seed=7)


def ssml_event(text: str, turn_id: str = "", **options) -> pb.ClientEvent:
    opts = pb.TurnOptions(text_format=pb.TurnOptions.SSML, **options)
    return pb.ClientEvent(text=pb.TextDelta(text=text, turn_id=turn_id, turn_options=opts))


async def converse(port: int, *events: pb.ClientEvent, config: pb.ClientEvent | None = None) -> list[pb.ServerEvent]:
    async with stub_for(port) as stub:
        return await collect(stub.Converse(iter([config or config_event(**L16), *events, flush_event(), end_event()])))


def speech(events, turn_id: str | None = None) -> list[pb.AudioFrame]:
    return [e.audio for e in events if e.HasField("audio") and not e.audio.silence
            and (turn_id is None or e.audio.turn_id == turn_id)]


def samples(events) -> np.ndarray:
    return np.concatenate([np.frombuffer(f.payload, "<i2") for f in speech(events)]).astype(np.int64)


def of(events, kind: str) -> list:
    return [getattr(e, kind) for e in events if e.HasField(kind)]


@contextlib.asynccontextmanager
async def live_call(port: int):
    """A Converse call fed as the test goes: yields (send(*events), the events received so far); on exit the input
    closes and the call is read to its end."""
    async with stub_for(port) as stub:
        q: asyncio.Queue = asyncio.Queue()

        async def requests():
            while (e := await q.get()) is not None:
                yield e

        events: list[pb.ServerEvent] = []

        async def read():
            async for e in stub.Converse(requests()):
                events.append(e)

        async def send(*evs: pb.ClientEvent) -> None:
            for e in evs:
                await q.put(e)

        reader = asyncio.create_task(read())
        try:
            yield send, events
        finally:
            await q.put(None)
            await reader


async def test_a_600_ms_break_adds_600_ms_of_silence(tiny_server):
    docs = {ms: f'<speak>您好<break time="{ms}ms"/>欢迎致电</speak>' for ms in (0, 600)}
    runs = {ms: await converse(tiny_server.port, ssml_event(doc, "a")) for ms, doc in docs.items()}
    frame_ms = 20
    for ms, events in runs.items():
        done = of(events, "turn_done")[0]
        frames = speech(events, "a")
        assert done.audio_ms == len(frames) * frame_ms  # the break is the turn's audio, not flagged silence
        assert [f.pts_ms for f in frames] == sorted(f.pts_ms for f in frames)
    added_ms = of(runs[600], "turn_done")[0].audio_ms - of(runs[0], "turn_done")[0].audio_ms
    assert abs(added_ms - 600) <= frame_ms, added_ms
    # the speech on both sides is the same: the silence sits between the two segments' audio
    short, long_ = samples(runs[0]), samples(runs[600])
    added = len(long_) - len(short)
    assert abs(added - 600 * 8) <= 160
    zero_run = max(len(r) for r in np.split(long_, np.flatnonzero(long_ != 0)) if len(r))
    assert zero_run >= 600 * 8 - 160, zero_run


MIXED_DOC = ('<speak>您好&amp;<break time="300ms"/><say-as interpret-as="digits">2026</say-as>'
             '<mark name="m1"/><prosody volume="-6dB">欢迎致电</prosody>。</speak>')


def marks(events) -> list[tuple[str, int]]:
    return [(m.name, m.pts_ms) for m in of(events, "mark_reached")]


async def test_markup_split_at_every_code_point_gives_the_same_audio(tiny_server):
    whole = await converse(tiny_server.port, ssml_event(MIXED_DOC, "a"))
    split = await converse(tiny_server.port, ssml_event(MIXED_DOC[0], "a"),
                           *[text_event(c, "a") for c in MIXED_DOC[1:]])
    assert not of(split, "error") and not of(whole, "error")
    assert_same_l16_frames(speech(split), speech(whole))
    assert marks(split) == marks(whole)


async def test_the_same_document_vocoded_in_short_chunks_is_the_same_audio_and_marks(tiny_server):
    """A loaded host makes the scheduler vocode a starving stream in short chunks (8 frames): the audio is the
    same up to float rounding, frame for frame, and the marks are at the same media times. Byte equality is not
    promised: here, deterministically, a few samples land one 16-bit step apart (hog run 10 on 03e2fc3 hit this
    by chance, docs/reliability.md §3)."""
    eight = dict(first_chunk_frames=8, chunk_frames=8, max_chunk_frames=8, min_chunk_frames=8)
    default = await converse(tiny_server.port, ssml_event(MIXED_DOC, "a"))
    async with running_server(engine=eight) as short_chunks_server:
        short = await converse(short_chunks_server.port, ssml_event(MIXED_DOC, "a"))
    assert not of(short, "error") and not of(default, "error")
    assert_same_l16_frames(speech(short), speech(default))
    assert marks(short) == marks(default)


async def test_segments_are_synthesized_before_the_document_ends(tiny_server):
    """The first sentence plays while the rest of the document has not arrived yet."""
    async with live_call(tiny_server.port) as (send, events):
        await send(config_event(**L16), ssml_event("<speak><s>您好，欢迎致电。</s><s>请", "a"))
        await wait_for(lambda: len(speech(events)) >= 5, 20.0)
        await send(text_event("稍候。</s></speak>", "a"), flush_event("a"), end_event())
    assert of(events, "turn_done") and not of(events, "error")


async def test_mark_reached_at_the_media_time_of_its_position(tiny_server):
    events = await converse(tiny_server.port, ssml_event(
        '<speak>您好<mark name="before-break"/><break time="1s"/><mark name="after-break"/>欢迎致电</speak>', "a"))
    marks = {m.name: m.pts_ms for m in of(events, "mark_reached")}
    frames = speech(events, "a")
    silent = [f.pts_ms for f in frames if not np.frombuffer(f.payload, "<i2").any()]
    assert len(silent) >= 49  # the break: 1 s of zero frames (the resampler's tail may reach into the first)
    assert silent[0] - 20 <= marks["before-break"] <= silent[0] + 20
    assert silent[-1] - 20 <= marks["after-break"] <= silent[-1] + 40
    assert kinds(events).index("mark_reached") < kinds(events).index("turn_done")


@pytest.mark.parametrize("ssml, plain, spans, lexicon", [
    ('<speak>请拨打<say-as interpret-as="telephone">13501234567</say-as></speak>', "请拨打13501234567",
     [pb.TextSpan(start=3, end=14, kind=pb.TextSpan.TELEPHONE)], {}),
    ('<speak>去<phoneme alphabet="pinyin" ph="chao2 yang2">朝阳</phoneme>区</speak>', "去朝阳区", [],
     {"朝阳": "chao2 yang2"}),
    ('<speak>欢迎致电<sub alias="世界卫生组织">WHO</sub></speak>', "欢迎致电世界卫生组织", [], {}),
])
async def test_say_as_phoneme_and_sub_read_as_the_spans_lexicon_and_alias(tiny_server, ssml, plain, spans, lexicon):
    by_ssml = await converse(tiny_server.port, ssml_event(ssml, "a"), config=config_event(lexicon=lexicon, **L16))
    by_plain = await converse(tiny_server.port, pb.ClientEvent(text=pb.TextDelta(text=plain, turn_id="a", spans=spans)),
                              config=config_event(lexicon=lexicon, **L16))
    assert not of(by_ssml, "error") and not of(by_ssml, "warning")
    assert_same_l16_frames(speech(by_ssml), speech(by_plain))


async def test_prosody_volume_is_a_gain_on_its_segment(tiny_server):
    loud = samples(await converse(tiny_server.port, ssml_event("<speak>您好</speak>", "a")))
    soft = samples(await converse(tiny_server.port, ssml_event('<speak><prosody volume="-6dB">您好</prosody></speak>', "a")))
    silent = samples(await converse(tiny_server.port, ssml_event('<speak><prosody volume="silent">您好</prosody></speak>', "a")))
    assert len(loud) == len(soft) == len(silent) and np.abs(loud).max() > 1000
    assert np.abs(soft - loud * 10 ** (-6 / 20)).max() <= 1.5
    assert not silent.any()  # silent: the text's time passes as silence


async def test_turn_volume_is_the_base_of_relative_prosody(tiny_server):
    plain = samples(await converse(tiny_server.port, ssml_event("<speak>您好</speak>", "a")))
    louder = samples(await converse(tiny_server.port, ssml_event('<speak><prosody volume="+6dB">您好</prosody></speak>',
                                                                 "a", volume_db=-6.0)))
    assert np.abs(louder - plain).max() <= 1.5  # -6 dB for the turn, +6 dB inside: the voice's level


async def test_prosody_rate_is_applied_and_parser_warnings_reach_the_client(tiny_server):
    events = await converse(tiny_server.port, ssml_event(
        '<speak><emphasis>您好</emphasis><prosody rate="slow" pitch="high">欢迎</prosody><break time="3600s"/></speak>', "a"))
    warnings = [(w.code, w.turn_id) for w in of(events, "warning")]
    assert ("ssml_emphasis_ignored", "a") in warnings and ("ssml_prosody_ignored", "a") in warnings
    assert ("ssml_break_clamped", "a") in warnings
    assert not [code for code, _ in warnings if code == "speaking_rate_not_applied"]  # the engine applies it
    assert of(events, "turn_done") and not of(events, "error")
    slow = of(await converse(tiny_server.port, ssml_event('<speak><prosody rate="50%">欢迎</prosody></speak>', "b")),
              "turn_done")[0].audio_ms
    fast = of(await converse(tiny_server.port, ssml_event('<speak><prosody rate="200%">欢迎</prosody></speak>', "b")),
              "turn_done")[0].audio_ms
    assert slow > 2 * fast  # 4x the audio at half the rate vs double, less a frame of rounding per segment


async def test_word_timestamps_refer_to_the_text_content(tiny_server):
    doc = ('<speak>\n  <p>欢迎致电<sub alias="世界卫生组织">WHO</sub>，</p>\n  <break time="200ms"/>'
           '<p>请拨打<say-as interpret-as="digits">95588</say-as>。</p>\n</speak>')
    content = "欢迎致电世界卫生组织，请拨打95588。"
    events = await converse(tiny_server.port, ssml_event(doc, "a"), config=config_event(word_timestamps=True, **L16))
    words = [w for ws in of(events, "words") for w in ws.words]
    assert words and not of(events, "error")
    for w in words:
        assert w.text == content[w.start_char:w.end_char] and w.start_char < w.end_char <= len(content)
        assert "<" not in w.text and ">" not in w.text
    assert [w.start_char for w in words] == sorted(w.start_char for w in words)
    assert {k for w in words for k in range(w.start_char, w.end_char)} >= {k for k, c in enumerate(content) if c.isalnum()}


async def test_clear_during_a_break_reports_the_heard_text_content(tiny_server):
    doc = '<speak>您好<break time="5s"/><prosody volume="-3dB">欢迎<sub alias="世界卫生组织">WHO</sub></prosody></speak>'
    async with live_call(tiny_server.port) as (send, events):
        await send(config_event(word_timestamps=True, pacing=pb.Pacing.REALTIME, **L16), ssml_event(doc, "a"),
                   flush_event("a"))
        # the tiny voice speaks 您好 for about 1 s: 75 frames (1.5 s) are well into the 5 s break
        await wait_for(lambda: len(speech(events)) >= 75, 20.0)
        await send(pb.ClientEvent(clear=pb.Clear()))
        await wait_for(lambda: bool(of(events, "cleared")), 10.0)
        await send(end_event())
    cleared = of(events, "cleared")[0]
    assert (cleared.text_spoken, cleared.text_remaining) == ("您好", "欢迎世界卫生组织")
    assert len(speech(events)) * 20 < 1000 + 5000  # the break did not play out
    words = [w for ws in of(events, "words") for w in ws.words]
    assert words and all(w.end_char <= 2 for w in words)  # only words of the heard text
    assert not of(events, "turn_done")


async def test_bad_ssml_fails_its_turn_only(tiny_server):
    events = await converse(
        tiny_server.port,
        ssml_event("<speak>\n  您好<say-as interpret-as=\"digits\">12</s>\n</speak>", "bad"),
        text_event("欢迎致电。", "next"), flush_event("next"))
    errors = of(events, "error")
    assert [(e.code, e.turn_id) for e in errors] == [(pb.Error.INVALID_SSML, "bad")]
    assert "SSML line 2, column" in errors[0].message and "mismatched tag" in errors[0].message
    # the hint names the document's own tags: the stray </s> and the <say-as> still open (where it opened)
    assert "</s> closes no open element" in errors[0].message
    assert "<say-as> (line 2, column 5)" in errors[0].message and "close it with </say-as>" in errors[0].message
    assert [d.turn_id for d in of(events, "turn_done")] == ["next"]


async def test_the_rest_of_a_refused_document_never_becomes_a_plain_turn(tiny_server):
    """A streamed document refused half-way (turn id left empty): its later deltas are dropped, not read aloud."""
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Converse(iter([
            config_event(**L16), ssml_event("<speak>您好<blink>"), text_event("更多"), text_event("</blink></speak>"),
            flush_event(), text_event("欢迎致电。", "next"), flush_event("next"), end_event()])))
    assert [(e.code, e.turn_id) for e in of(events, "error")] == [(pb.Error.INVALID_SSML, "t1")]
    assert "<blink>" in of(events, "error")[0].message
    assert {f.turn_id for f in speech(events)} <= {"t1", "next"}
    assert [d.turn_id for d in of(events, "turn_done")] == ["next"]


async def test_a_turn_flushed_while_its_document_is_open_is_invalid_ssml(tiny_server):
    events = await converse(tiny_server.port, ssml_event("<speak>您好，欢迎致电。<s>请稍候", "a"), flush_event("a"))
    errors = of(events, "error")
    assert [(e.code, e.turn_id) for e in errors] == [(pb.Error.INVALID_SSML, "a")]
    assert "ends before </speak>" in errors[0].message
    assert not of(events, "turn_done")


async def test_spans_are_refused_in_an_ssml_turn(tiny_server):
    delta = pb.TextDelta(text="<speak>13501234567</speak>", turn_id="a", turn_options=SSML,
                         spans=[pb.TextSpan(start=0, end=5, kind=pb.TextSpan.DIGITS)])
    events = await converse(tiny_server.port, pb.ClientEvent(text=delta))
    assert [e.code for e in of(events, "error")] == [pb.Error.INVALID_SPAN]
    assert "say-as" in of(events, "error")[0].message
    assert of(events, "turn_done")


async def test_synthesize_ssml(tiny_server):
    doc = '<speak>您好<break time="400ms"/><mark name="m"/>欢迎致电。</speak>'
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Synthesize(pb.SynthesizeRequest(
            text=doc, options=SSML, audio=pb.AudioFormat(encoding=pb.AudioFormat.L16, sample_rate_hz=8000))))
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await collect(stub.Synthesize(pb.SynthesizeRequest(text="<speak>\n您好<break time='soon'/></speak>",
                                                               options=SSML)))
        with pytest.raises(grpc.aio.AioRpcError) as spans:
            await collect(stub.Synthesize(pb.SynthesizeRequest(
                text="<speak>12</speak>", options=SSML, spans=[pb.TextSpan(start=0, end=1, kind=pb.TextSpan.DIGITS)])))
    assert [m.name for m in of(events, "mark_reached")] == ["m"] and of(events, "turn_done")
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad.value.details().startswith("SSML line 2, column 3:") and '"600ms"' in bad.value.details()
    assert spans.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "say-as" in spans.value.details()


# SSML written for other platforms (docs/ssml.md, "SSML from other platforms"), through Converse.

def warnings_of(events) -> list[tuple[str, str]]:
    return [(w.code, w.turn_id) for w in of(events, "warning")]


async def test_aliyun_speak_rate_and_volume_sound_as_the_same_prosody(tiny_server):
    aliyun = await converse(tiny_server.port, ssml_event('<speak rate="-125" volume="25" pitch="100">您好</speak>', "a"))
    w3c = await converse(tiny_server.port, ssml_event(
        '<speak><prosody rate="80%" volume="-6.020599913279624dB">您好</prosody></speak>', "a"))
    plain = await converse(tiny_server.port, ssml_event("<speak>您好</speak>", "a"))
    assert not of(aliyun, "error") and of(aliyun, "turn_done")
    assert warnings_of(aliyun) == [("ssml_prosody_ignored", "a")]  # the pitch, said in-band
    assert_same_l16_frames(speech(aliyun), speech(w3c))
    assert of(aliyun, "turn_done")[0].audio_ms > of(plain, "turn_done")[0].audio_ms  # 0.8×: longer


async def test_polly_effect_without_a_namespace_declaration_is_spoken_with_a_warning(tiny_server):
    polly = await converse(tiny_server.port, ssml_event(
        '<speak><amazon:effect name="whispered">您好</amazon:effect></speak>', "a"))
    plain = await converse(tiny_server.port, text_event("您好", "a"))
    assert not of(polly, "error") and of(polly, "turn_done")
    assert warnings_of(polly) == [("ssml_element_ignored", "a")]
    assert "amazon:effect" in of(polly, "warning")[0].message
    assert_same_l16_frames(speech(polly), speech(plain))


@pytest.mark.parametrize("ssml, plain, lexicon", [
    ('<speak>您好，<say-as interpret-as="name">单田芳</say-as>。</speak>', "您好，单田芳。", {"单田芳": "shan4 tian2 fang1"}),
    ('<speak><say-as interpret-as="fraction">11/22</say-as></speak>', "二十二分之十一", {}),
    ('<speak><say-as interpret-as="date" format="mdy">11/22/2026</say-as></speak>', "2026年11月22日", {}),
    ('<speak>去<phoneme alphabet="sapi" ph="chao 2 yang 2">朝阳</phoneme>区</speak>', "去朝阳区", {"朝阳": "chao2 yang2"}),
])
async def test_vendor_say_as_and_pinyin_read_as_their_plain_equivalent(tiny_server, ssml, plain, lexicon):
    by_ssml = await converse(tiny_server.port, ssml_event(ssml, "a"))
    by_plain = await converse(tiny_server.port, text_event(plain, "a"), config=config_event(lexicon=lexicon, **L16))
    assert not of(by_ssml, "error") and not of(by_ssml, "warning")
    assert_same_l16_frames(speech(by_ssml), speech(by_plain))


async def test_azure_bookmark_reaches_the_client_as_a_mark(tiny_server):
    doc = ('<speak version="1.0" xmlns="http://www.w3.org/2001/10/synthesis" '
           'xmlns:mstts="https://www.w3.org/2001/mstts"><mstts:express-as style="cheerful">'
           '您好<bookmark mark="greeted"/>欢迎</mstts:express-as></speak>')
    events = await converse(tiny_server.port, ssml_event(doc, "a"))
    assert [m.name for m in of(events, "mark_reached")] == ["greeted"]
    assert warnings_of(events) == [("ssml_element_ignored", "a")] and of(events, "turn_done")


async def test_a_malformed_vendor_element_is_refused_with_line_and_column(tiny_server):
    events = await converse(
        tiny_server.port,
        ssml_event('<speak>\n<amazon:effect name="whispered">您好</amazon:effec></speak>', "bad"),
        text_event("欢迎致电。", "next"), flush_event("next"))
    errors = of(events, "error")
    assert [(e.code, e.turn_id) for e in errors] == [(pb.Error.INVALID_SSML, "bad")]
    assert errors[0].message.startswith("SSML line 2, column 37: mismatched tag: </amazon:effec> closes no open")
    assert "<amazon:effect> (line 2, column 1)" in errors[0].message
    assert [d.turn_id for d in of(events, "turn_done")] == ["next"]
