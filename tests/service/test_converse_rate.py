"""Speaking rate on a real server (tiny voice): applied per session, per turn and in Synthesize, no Warning, range-checked;
heard text on Clear and word times follow the time-scaled audio."""

import grpc
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from tests.service.conftest import (collect, config_event, converse_and_clear, end_event, flush_event, stub_for,
                                    text_event)

TEXT = "您好，欢迎致电。"
LONG = "您好，欢迎致电。请问有什么可以帮您？我们的工作时间是早上九点到晚上六点。"
CHUNK_MS = 200  # the longest engine chunk of the tiny server: 96 frames × 2 ms, plus a step


def _speech_frames(events) -> int:
    return sum(1 for e in events if e.HasField("audio") and not e.audio.silence)


async def _turn(stub, session_rate=None, turn_rate=None, text=TEXT, **cfg) -> list[pb.ServerEvent]:
    config = config_event(seed=7, **cfg) if session_rate is None else config_event(seed=7, speaking_rate=session_rate, **cfg)
    options = pb.TurnOptions() if turn_rate is None else pb.TurnOptions(speaking_rate=turn_rate)
    delta = pb.ClientEvent(text=pb.TextDelta(text=text, turn_id="a", turn_options=options))
    return await collect(stub.Converse(iter([config, delta, flush_event("a"), end_event()])))


async def test_rate_two_gives_half_the_audio_and_no_warning(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        natural = await _turn(stub)
        fast = await _turn(stub, session_rate=2.0)
        slow_turn = await _turn(stub, session_rate=2.0, turn_rate=0.5)  # the turn's rate overrides the session's
        synth = await collect(stub.Synthesize(pb.SynthesizeRequest(text=TEXT, seed=7,
                                                                   options=pb.TurnOptions(speaking_rate=2.0))))
    n = _speech_frames(natural)
    assert n >= 20
    assert abs(_speech_frames(fast) - n / 2) <= 2  # 20 ms frames; the engine's length is ⌈N / rate⌉ mel frames
    assert abs(_speech_frames(slow_turn) - 2 * n) <= 2
    assert abs(_speech_frames(synth) - n / 2) <= 2
    assert fast[0].started.effective_config.speaking_rate == 2.0
    for events in (natural, fast, slow_turn, synth):
        assert not any(e.HasField("warning") for e in events), [e.warning for e in events if e.HasField("warning")]
        assert any(e.HasField("turn_done") for e in events)


async def test_out_of_range_rates_still_refused(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await collect(stub.Converse(iter([config_event(speaking_rate=2.5)])))
        events = await _turn(stub, turn_rate=0.3)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "0.5 to 2" in err.value.details()
    errors = [e.error for e in events if e.HasField("error")]
    assert errors[0].code == pb.Error.INVALID_OPTIONS and "0.5 to 2" in errors[0].message  # (then: flush of no turn)
    assert not any(e.HasField("audio") and not e.audio.silence for e in events)


def _words(events) -> list[pb.WordTiming]:
    return [w for e in events if e.HasField("words") for w in e.words.words]


@pytest.mark.parametrize("rate", [0.5, 2.0])
async def test_heard_text_on_clear_matches_the_time_scaled_audio(tiny_server, rate):
    async with stub_for(tiny_server.port) as stub:
        whole = _words(await collect(stub.Converse(iter([
            config_event(seed=7, word_timestamps=True, speaking_rate=rate), text_event(LONG), flush_event(),
            end_event()]))))
        natural = _words(await collect(stub.Converse(iter([
            config_event(seed=7, word_timestamps=True), text_event(LONG), flush_event(), end_event()]))))
        events = await converse_and_clear(stub, [
            config_event(seed=7, word_timestamps=True, speaking_rate=rate, pacing=pb.Pacing.REALTIME),
            text_event(LONG), flush_event()], lambda events: _speech_frames(events) >= 15)
    # word times scale with the rate (the same words, the time-scaled audio): within a step and a frame
    assert [(w.start_char, w.end_char) for w in whole] == [(w.start_char, w.end_char) for w in natural]
    for w, n in zip(whole, natural):
        assert abs(w.start_pts_ms - n.start_pts_ms / rate) <= 4 / rate + 2, (w, n)
    cleared = next(e.cleared for e in events if e.HasField("cleared"))
    spoken = len(cleared.text_spoken)
    assert cleared.text_remaining and spoken > 0
    for w in whole:  # a word whose audio all went out is heard; one that starts a chunk after the cut is not
        if w.end_pts_ms <= cleared.last_pts_ms:
            assert w.end_char <= spoken, (w.text, cleared.text_spoken, cleared.last_pts_ms)
        if w.start_pts_ms > cleared.last_pts_ms + CHUNK_MS:
            assert w.start_char >= spoken, (w.text, cleared.text_spoken, cleared.last_pts_ms)
    for w in _words(events):  # words sent before the clear start within the audio released (the strict form,
        # start < last_pts and inside text_spoken, also flakes at rate 1 on main: test_converse_words, reported)
        assert w.start_pts_ms <= cleared.last_pts_ms and w.start_char <= spoken
