"""Hostile input: fuzzed Converse event orders and texts (hypothesis), huge and split deltas, control characters,
emoji, right-to-left text, floods of marks and clears, invalid UTF-8 and corrupt messages. Every call completes or
ends with a defined status, the server never crashes, and a REALTIME canary call beside them keeps completing (its
on-time check is a timing check: tests/load/test_hostile_canary.py)."""

from __future__ import annotations

import os
import threading
import time

import grpc
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc
from tests.reliability.conftest import ServerThread, config_event, end_event, flush_event, lateness, text_event

EXAMPLES = int(os.environ.get("VOXPOOL_FUZZ_EXAMPLES", "200"))
CALL_TIMEOUT_S = 30.0  # every call here is short (well under 1 s): one still open after this hung; the margin is for a slow shared CI host
DEFINED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}
CANARY_TEXT = "您好，这里是客服中心。请问有什么可以帮您？我们马上为您处理。"
# pieces that break naive text handling: controls, zero-width and bidi marks, emoji (ZWJ, flags, skin tones),
# combining marks, right-to-left scripts, full-width digits, punctuation of both widths, a BOM, U+FFFD
FRAGMENTS = [
    "\x00", "\x07", "\x1b[31m", "\r\n", "\t", "\u200b", "\u200d", "\u202e", "\u2066", "\ufeff", "\ufffd",
    "😀", "👨‍👩‍👧‍👦", "🇨🇳", "👍🏽", "e\u0301", "ก\u0e49", "مرحبا بكم", "שלום", "１２３", "①Ⅻ", "，", "。", "！", "？",
    "；", "、", "…", ",", ".", "?", "你好", "一二三", "13800138000", "3.14", "100%", "https://a.b/c?d=e", "<speak>",
]


def hostile_text(max_pieces: int = 12) -> st.SearchStrategy[str]:
    piece = st.one_of(st.sampled_from(FRAGMENTS), st.text(st.characters(codec="utf-8"), max_size=6))
    return st.lists(piece, max_size=max_pieces).map("".join)


# markup for SSML turns: well-formed pieces, hostile ones (DTD, entities), and pieces that cut tags in two
SSML_FRAGMENTS = [
    "<speak>", "</speak>", "<p>", "</p>", "<s>", "</s>", '<break time="300ms"/>', '<break strength="strong"/>',
    '<break time="3600s"/>', '<mark name="m"/>', '<prosody rate="fast" volume="-6dB">', '<prosody volume="silent">',
    "</prosody>", '<say-as interpret-as="digits">', '<say-as interpret-as="telephone">', "</say-as>",
    '<sub alias="世界卫生组织">', "</sub>", '<phoneme alphabet="pinyin" ph="chao2 yang2">', "</phoneme>",
    "<emphasis>", "</emphasis>", "&amp;", "&#x4E2D;", "&lol;", '<!DOCTYPE speak [<!ENTITY lol "lol">]>',
    "<?xml version=\"1.0\"?>", "<!-- c -->", "<speak", ' xml:lang="zh-CN">', "<say-as interpret-", '="', "</",
]


def hostile_ssml(max_pieces: int = 16) -> st.SearchStrategy[str]:
    piece = st.one_of(st.sampled_from(SSML_FRAGMENTS), st.sampled_from(FRAGMENTS), st.text(max_size=4))
    return st.lists(piece, max_size=max_pieces).map("".join)


def ssml_event(text: str, turn_id: str = "") -> pb.ClientEvent:
    return pb.ClientEvent(text=pb.TextDelta(text=text, turn_id=turn_id,
                                            turn_options=pb.TurnOptions(text_format=pb.TurnOptions.SSML)))


TURN_IDS = st.sampled_from(["", "", "a", "b", "t" * 300, "🙂", "\u202eevil", "\x00"])


@st.composite
def session_config(draw) -> pb.ClientEvent:
    audio = pb.AudioFormat(
        encoding=draw(st.sampled_from([0, 1, 2, 3, 7])),  # includes unset and an unknown enum value
        sample_rate_hz=draw(st.sampled_from([0, 8000, 16000, 24000, 44100, 123])),
        frame_ms=draw(st.sampled_from([0, 10, 20, 60, 7, 1000])),
    )
    pacing = pb.Pacing(mode=draw(st.sampled_from([pb.Pacing.ASAP, pb.Pacing.ASAP, pb.Pacing.REALTIME, 9])))
    if draw(st.booleans()):
        pacing.lead_ms = draw(st.sampled_from([0, 60, 500, 501, 100000]))
    return pb.ClientEvent(config=pb.SessionConfig(
        audio=audio, pacing=pacing, voice=draw(st.sampled_from(["", "", "tiny", "nope", "\x00"])),
        preroll_ms=draw(st.sampled_from([0, 0, 20, 15, 100000])),
    ))


def weighted(*choices: tuple[int, st.SearchStrategy]) -> st.SearchStrategy:
    """Pick a strategy with the given weights (st.one_of does not weight its branches)."""
    table = [s for weight, s in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def client_event() -> st.SearchStrategy[pb.ClientEvent]:
    text = weighted((3, st.builds(lambda t, i: text_event(t, turn_id=i), hostile_text(), TURN_IDS)),
                    (1, st.builds(lambda t, i: ssml_event(t, turn_id=i), hostile_ssml(), TURN_IDS)))
    control = st.one_of(
        st.builds(lambda i: flush_event(i), TURN_IDS),
        st.builds(lambda n, i: pb.ClientEvent(mark=pb.Mark(name=n, turn_id=i)), hostile_text(3), TURN_IDS),
        st.builds(lambda i: pb.ClientEvent(clear=pb.Clear(turn_id=i)), TURN_IDS),
    )
    # each of these ends the call at once (end: OK; an empty event or a second config: INVALID_ARGUMENT)
    terminal = st.one_of(st.just(end_event()), st.just(pb.ClientEvent()), session_config())
    return weighted((10, text), (6, control), (1, terminal))


def first_event() -> st.SearchStrategy[pb.ClientEvent]:
    """Mostly a usable config, so the fuzz reaches the turn logic; sometimes a hostile one, or anything."""
    usable = st.builds(
        lambda fmt, frame, pacing: config_event(encoding=fmt[0], rate=fmt[1], frame_ms=frame, pacing=pacing),
        st.sampled_from([(pb.AudioFormat.PCMU, 8000), (pb.AudioFormat.PCMA, 8000), (pb.AudioFormat.L16, 8000),
                         (pb.AudioFormat.L16, 16000), (pb.AudioFormat.L16, 24000), (pb.AudioFormat.L16, 48000)]),
        st.sampled_from([10, 20, 60]),
        st.sampled_from([pb.Pacing.ASAP, pb.Pacing.ASAP, pb.Pacing.ASAP, pb.Pacing.REALTIME]),
    )
    return weighted((8, usable), (1, session_config()), (1, client_event()))


SEQUENCES = st.tuples(first_event(), st.lists(client_event(), max_size=30)).map(lambda t: [t[0], *t[1]])


class Canary:
    """REALTIME calls back to back on their own thread; records (end time, chunks, late chunks, status) per call."""

    def __init__(self, port: int):
        self.port = port
        self.results: list[tuple[float, int, int, str]] = []
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._allowed = True  # False: no new call starts
        self._in_call = False
        self._thread = threading.Thread(target=self._run, name="canary", daemon=True)

    def pause(self) -> None:
        """Let the call in flight finish and start no new one (to check the server is otherwise idle)."""
        with self._cond:
            self._allowed = False
            self._cond.wait_for(lambda: not self._in_call, CALL_TIMEOUT_S)

    def resume(self) -> None:
        with self._cond:
            self._allowed = True
            self._cond.notify_all()

    def _run(self) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as ch:
            stub = tts_pb2_grpc.TtsStub(ch)
            while not self._stop.is_set():
                with self._cond:
                    if not self._allowed:
                        self._cond.wait(0.1)
                        continue
                    self._in_call = True
                frames = []
                events = [config_event(pacing=pb.Pacing.REALTIME), text_event(CANARY_TEXT), end_event()]
                try:
                    for ev in stub.Converse(iter(events), timeout=CALL_TIMEOUT_S):
                        if ev.HasField("audio"):
                            frames.append((time.monotonic(), ev.audio))
                    code = "OK"
                except grpc.RpcError as err:
                    code = err.code().name
                counted, late = lateness(frames)
                self.results.append((time.monotonic(), counted, late, code))
                with self._cond:
                    self._in_call = False
                    self._cond.notify_all()

    def __enter__(self) -> "Canary":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.resume()
        self._thread.join(CALL_TIMEOUT_S)

    def completed_since(self, t0: float) -> list[tuple[float, int, int, str]]:
        """The canary calls that ended after t0 (waits for one); asserts every one of them completed OK."""
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while not any(t > t0 for t, *_ in self.results) and time.monotonic() < deadline:
            time.sleep(0.05)  # at least one canary call overlapped the test
        window = [r for r in self.results if r[0] > t0]
        assert window and all(code == "OK" for *_, code in window), window
        return window


@pytest.fixture(scope="module")
def hostile():
    # 8 decoder steps = 0.2 s of audio per segment: long fuzzed texts stay quick to synthesize
    with ServerThread(decoder_steps=8) as srv, Canary(srv.server.port) as canary:
        with grpc.insecure_channel(f"127.0.0.1:{srv.server.port}") as ch:
            yield srv, canary, tts_pb2_grpc.TtsStub(ch), ch


@pytest.fixture
def checked(hostile):
    """Per test: the server is idle and serving afterwards, and the canary's calls meanwhile all completed."""
    srv, canary, stub, ch = hostile
    t0 = time.monotonic()
    yield stub, ch, srv
    canary.completed_since(t0)
    canary.pause()
    try:
        idle = srv.wait_idle()
        busy = ("admission_slots", "calls", "engine_live", "pool_requests", "call_tasks")
        assert not any(idle[k] for k in busy), idle
        assert srv.thread.is_alive() and srv.server.engine.backend.thread.is_alive()
    finally:
        canary.resume()


def converse(stub, events) -> tuple[grpc.StatusCode, str, list[pb.ServerEvent]]:
    out: list[pb.ServerEvent] = []
    try:
        for ev in stub.Converse(iter(events), timeout=CALL_TIMEOUT_S):
            out.append(ev)
        return grpc.StatusCode.OK, "", out
    except grpc.RpcError as err:
        return err.code(), err.details() or "", out


# `checked` runs once around all the examples (its checks are for the whole run)
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(events=SEQUENCES)
@example(events=[  # found by this test: a Clear before the turn's first segment boundary hung the call
    config_event(), text_event("\x00<speak>é\x00", turn_id=""), pb.ClientEvent(clear=pb.Clear(turn_id="")),
    text_event("Ù\x19\"Æ", turn_id="a"), text_event("碌，<speak>\ufeff\x00，按", turn_id=""),
    pb.ClientEvent(clear=pb.Clear(turn_id="🙂")), pb.ClientEvent(clear=pb.Clear(turn_id="")),
    pb.ClientEvent(mark=pb.Mark(name="，ê。", turn_id="a")),
])
def test_fuzzed_event_sequences(checked, events):
    stub, _, _ = checked
    code, details, out = converse(stub, events)
    event(f"status {code.name} {details[:50]}")  # pytest --hypothesis-show-statistics shows how the fuzz spread
    event(f"turns done {min(3, sum(e.HasField('turn_done') for e in out))}")
    assert code in DEFINED, (code, details)
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        assert details and "Traceback" not in details and "internal" not in details.lower()
    if code is grpc.StatusCode.OK and out:
        assert out[0].HasField("started")


def test_clear_before_the_first_segment_boundary_then_a_new_turn(checked):
    """Regression (found by the fuzz): a barge-in on a turn whose text had no segment boundary yet left the call
    waiting for that turn's next segment forever; no later turn was spoken and the call never ended."""
    stub, _, _ = checked
    code, details, out = converse(stub, [
        config_event(), text_event("我们正在为您查询", turn_id="a"), pb.ClientEvent(clear=pb.Clear(turn_id="a")),
        text_event("请稍候。", turn_id="b"), end_event()])
    assert code is grpc.StatusCode.OK, details
    assert [e.cleared.turn_id for e in out if e.HasField("cleared")] == ["a"]
    assert [e.turn_done.turn_id for e in out if e.HasField("turn_done")] == ["b"]


def test_nothing_of_a_cleared_turn_is_sent_after_cleared(checked):
    """Regression (found by the fuzz): a turn cleared while its segment was in the frontend was still synthesized
    and its first chunk sent after `cleared`."""
    stub, _, _ = checked
    for _ in range(5):  # the clear lands at varying points of the segment's way to the engine
        code, details, out = converse(stub, [
            config_event(), text_event("您好。欢迎致电。", turn_id="a"), pb.ClientEvent(clear=pb.Clear(turn_id="a")),
            end_event()])
        assert code is grpc.StatusCode.OK, details
        kinds = [(e.WhichOneof("event"), getattr(getattr(e, e.WhichOneof("event")), "turn_id", "")) for e in out]
        assert ("cleared", "a") in kinds
        after = kinds[kinds.index(("cleared", "a")) + 1:]
        assert not [k for k in after if k == ("audio", "a")]


def test_oversize_message_refused_before_work(checked, hostile):
    stub, _, srv = checked
    canary = hostile[1]
    canary.pause()  # count this call's engine requests alone
    try:
        submitted = srv.server.engine.counters().requests_submitted
        code, details, _ = converse(stub, [config_event(), text_event("好" * 100_000), end_event()])  # 300 KB
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, details  # the transport's 64 KiB message limit
        assert srv.server.engine.counters().requests_submitted == submitted  # refused before any work
    finally:
        canary.resume()


def test_hundred_thousand_characters_in_deltas(checked):
    stub, _, _ = checked
    text = ("您好，" + "".join(FRAGMENTS) + "欢迎致电。") * 1000
    text = text[:100_000]
    deltas = [text_event(text[i:i + 2000], turn_id="big") for i in range(0, len(text), 2000)]
    code, details, out = converse(stub, [config_event(), *deltas, pb.ClientEvent(clear=pb.Clear(turn_id="big")),
                                         end_event()])
    assert code is grpc.StatusCode.OK, details
    errors = [e.error for e in out if e.HasField("error")]
    assert errors and all(e.code == pb.Error.TEXT_TOO_LONG and e.retryable for e in errors)  # over the buffer
    assert [e.cleared.turn_id for e in out if e.HasField("cleared")] == ["big"]


def test_one_delta_per_character(checked):
    stub, _, _ = checked
    text = "您好，" + "".join(FRAGMENTS) + "这是逐字发送的一句话。"
    whole = converse(stub, [config_event(), text_event(text, turn_id="w"), end_event()])
    split = converse(stub, [config_event(), *[text_event(ch, turn_id="s") for ch in text], end_event()])
    assert whole[0] is split[0] is grpc.StatusCode.OK, (whole[1], split[1])
    done_whole = [e.turn_done for e in whole[2] if e.HasField("turn_done")]
    done_split = [e.turn_done for e in split[2] if e.HasField("turn_done")]
    assert len(done_whole) == len(done_split) == 1
    assert done_split[0].audio_ms == done_whole[0].audio_ms > 0  # same segments, same speech


@pytest.mark.parametrize("kind", ["mark", "clear"])
def test_control_floods_end_with_invalid_argument(checked, kind):
    stub, _, _ = checked
    event = (pb.ClientEvent(mark=pb.Mark(name="m")) if kind == "mark" else pb.ClientEvent(clear=pb.Clear()))
    code, details, _ = converse(stub, [config_event(), text_event("你好，"), *[event] * 3000, end_event()])
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "too many control messages" in details


def test_text_and_clear_alternating_within_the_rate(checked):
    stub, _, _ = checked
    events = [config_event()]
    for i in range(40):
        events += [text_event(f"第{i}句话。", turn_id=f"t{i}"), pb.ClientEvent(clear=pb.Clear(turn_id=f"t{i}"))]
    code, details, out = converse(stub, [*events, text_event("最后一句。", turn_id="last"), end_event()])
    assert code is grpc.StatusCode.OK, details
    assert [e.turn_done.turn_id for e in out if e.HasField("turn_done")] == ["last"]


def _raw_text_event(payload: bytes) -> bytes:
    marker = "\u0001MARK\u0001"
    wire = pb.ClientEvent(text=pb.TextDelta(text=marker)).SerializeToString()
    assert len(payload) == len(marker.encode())
    return wire.replace(marker.encode(), payload)


BAD_UTF8 = {
    "lone-surrogate": b"\xed\xa0\x80abc",
    "overlong": b"\xc0\xafabcd",
    "truncated": b"ab\xe4\xb8cd",
    "invalid-byte": b"\xff\xfeabcd",
}


@pytest.mark.parametrize("name", sorted(BAD_UTF8))
def test_invalid_utf8_is_invalid_argument(checked, name):
    stub, ch, _ = checked
    raw = ch.stream_stream("/voxpool.v1.Tts/Converse", request_serializer=lambda b: b,
                           response_deserializer=pb.ServerEvent.FromString)
    msgs = [config_event().SerializeToString(), _raw_text_event(BAD_UTF8[name]), end_event().SerializeToString()]
    with pytest.raises(grpc.RpcError) as err:
        list(raw(iter(msgs), timeout=CALL_TIMEOUT_S))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert "could not be parsed" in err.value.details()

    synth = ch.unary_stream("/voxpool.v1.Tts/Synthesize", request_serializer=lambda b: b,
                            response_deserializer=pb.ServerEvent.FromString)
    wire = pb.SynthesizeRequest(text="\u0001MARK\u0001").SerializeToString()
    with pytest.raises(grpc.RpcError) as err:
        list(synth(wire.replace("\u0001MARK\u0001".encode(), BAD_UTF8[name]), timeout=CALL_TIMEOUT_S))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, err.value.details()


@pytest.mark.parametrize("wire", [b"\xff\xff\xff\xff", b"\x0a\x05abc", b"\x08" + b"\xff" * 11])
def test_corrupt_messages_are_invalid_argument(checked, wire):
    _, ch, _ = checked
    raw = ch.stream_stream("/voxpool.v1.Tts/Converse", request_serializer=lambda b: b,
                           response_deserializer=pb.ServerEvent.FromString)
    with pytest.raises(grpc.RpcError) as err:
        list(raw(iter([wire]), timeout=CALL_TIMEOUT_S))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    normalize = ch.unary_unary("/voxpool.v1.Tts/Normalize", request_serializer=lambda b: b,
                               response_deserializer=pb.NormalizeResponse.FromString)
    with pytest.raises(grpc.RpcError) as err:
        normalize(wire, timeout=CALL_TIMEOUT_S)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, err.value.details()


BILLION_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE speak [<!ENTITY lol "lol">'
                  + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">' for i in range(1, 10))
                  + "]><speak>&lol9;</speak>")
HOSTILE_SSML = {  # document, the deltas' size, what the turn's INVALID_SSML error says
    "billion-laughs": (BILLION_LAUGHS, 7, "DOCTYPE"),
    "external-entity": ('<?xml version="1.0"?><!DOCTYPE speak [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
                        "<speak>&x;</speak>", 5, "DOCTYPE"),
    "dtd": ('<!DOCTYPE speak SYSTEM "http://example.com/ssml.dtd"><speak>您好</speak>', 3, "DOCTYPE"),
    "10000-tags": ("<speak>" + "<s>好</s>" * 10_000 + "</speak>", 1_000, "more than 2000 elements"),
    "deep-nesting": ("<speak>" + "<prosody>" * 200 + "好" + "</prosody>" * 200 + "</speak>", 50, "nest deeper than"),
    "unclosed-split": ('<speak>您好<say-as interpret-as="digits">1234</say-', 4, "ends inside a tag"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_SSML))
def test_hostile_ssml_fails_only_its_turn(checked, name):
    """Billion laughs, external entities, a DTD, 10 000 tags, deep nesting, a tag cut off at the end: an in-band
    INVALID_SSML for that turn (nothing expanded or fetched, no hang), and the next turn is spoken."""
    stub, _, _ = checked
    doc, size, says = HOSTILE_SSML[name]
    deltas = [ssml_event(doc[i:i + size], turn_id="x") for i in range(0, len(doc), size)]
    code, details, out = converse(stub, [config_event(), *deltas, flush_event("x"), text_event("您好。", turn_id="ok"),
                                         end_event()])
    assert code is grpc.StatusCode.OK, details
    errors = [e.error for e in out if e.HasField("error")]
    assert [(e.code, e.turn_id) for e in errors] == [(pb.Error.INVALID_SSML, "x")], errors
    assert says in errors[0].message and errors[0].message.startswith("SSML line 1, column ")
    assert "lollol" not in errors[0].message and "root:" not in errors[0].message
    assert [e.turn_done.turn_id for e in out if e.HasField("turn_done")] == ["ok"]
    if len(doc) <= 5_000:  # Synthesize takes at most 5 000 characters: refused before any audio
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Synthesize(pb.SynthesizeRequest(text=doc, options=pb.TurnOptions(
                text_format=pb.TurnOptions.SSML)), timeout=CALL_TIMEOUT_S))
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and says in err.value.details()


def test_an_hour_long_break_is_clamped_with_a_warning(checked):
    stub, _, _ = checked
    code, details, out = converse(stub, [
        config_event(), ssml_event('<speak>您好<break time="3600s"/>再见<break time="3600s"/></speak>', "x"),
        flush_event("x"), end_event()])
    assert code is grpc.StatusCode.OK, details
    warnings = [e.warning for e in out if e.HasField("warning")]
    assert [w.code for w in warnings] == ["ssml_break_clamped"] * 2 and "10000 ms" in warnings[0].message
    done = [e.turn_done for e in out if e.HasField("turn_done")]
    assert len(done) == 1 and 20_000 <= done[0].audio_ms <= 20_000 + 2 * 400  # two 10 s breaks and the speech
