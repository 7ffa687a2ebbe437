"""Word timestamps on a real server (tiny voice): opt-in, in order, before their audio, over the turn's text."""

from protos.voxpool.v1 import tts_pb2 as pb
from tests.service.conftest import (collect, config_event, converse_and_clear, end_event, flush_event, kinds,
                                    stub_for, text_event)

TEXT = "您好，欢迎致电。请问有什么可以帮您？"


def _frame_of(events, pts_ms: int) -> int | None:
    """Index in `events` of the audio frame whose media time holds `pts_ms` (None: after the last frame)."""
    for i, e in enumerate(events):
        if e.HasField("audio") and e.audio.pts_ms <= pts_ms < e.audio.pts_ms + e.audio.duration_ms:
            return i
    return None


def _check_words_before_audio(events, turn_id: str, text: str) -> list[pb.WordTiming]:
    """Every word event precedes the frame holding its start, words over `text` in order; returns the words."""
    words: list[pb.WordTiming] = []
    for i, e in enumerate(events):
        if e.HasField("words"):
            assert e.words.turn_id == turn_id
            for w in e.words.words:
                frame = _frame_of(events, w.start_pts_ms)
                assert frame is None or i < frame, f"{w.text} announced after the frame holding its start"
            words += list(e.words.words)
    for w in words:
        assert w.text == text[w.start_char:w.end_char] and w.start_char < w.end_char
        assert w.start_pts_ms <= w.end_pts_ms
    assert [w.start_char for w in words] == sorted(w.start_char for w in words)
    assert all(a.end_char <= b.start_char for a, b in zip(words, words[1:])), "words overlap or go back"
    assert [w.start_pts_ms for w in words] == sorted(w.start_pts_ms for w in words)
    return words


async def test_word_timestamps_in_order_before_their_audio(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Converse(iter([
            config_event(word_timestamps=True), text_event(TEXT), flush_event(), end_event()])))
    assert events[0].started.effective_config.word_timestamps
    words = _check_words_before_audio(events, "t1", TEXT)
    assert words, kinds(events)
    assert sum(_frame_of(events, w.start_pts_ms) is not None for w in words) >= len(words) // 2
    # the words cover every letter of the text (punctuation is not a word)
    covered = {k for w in words for k in range(w.start_char, w.end_char)}
    assert {k for k, ch in enumerate(TEXT) if ch.isalnum()} <= covered
    assert kinds(events)[-1] == "turn_done"


async def test_synthesize_word_timestamps(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Synthesize(pb.SynthesizeRequest(text="请稍候，正在为您查询。", word_timestamps=True)))
    words = _check_words_before_audio(events, "synthesize", "请稍候，正在为您查询。")
    assert "".join(w.text for w in words) == "请稍候正在为您查询"


async def test_no_word_events_without_opt_in(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        events = await collect(stub.Converse(iter([config_event(), text_event(TEXT), flush_event(), end_event()])))
    assert "words" not in kinds(events)
    assert not events[0].started.effective_config.word_timestamps


async def test_cleared_turn_sends_no_timestamps_for_unheard_words(tiny_server):
    async with stub_for(tiny_server.port) as stub:
        events = await converse_and_clear(stub, [
            config_event(word_timestamps=True, pacing=pb.Pacing.REALTIME),
            text_event("您好，欢迎致电。请问有什么可以帮您？我们的工作时间是早上九点到晚上六点。"), flush_event()],
            lambda events: sum(e.HasField("audio") and not e.audio.silence for e in events) >= 20)
    cleared = next(e.cleared for e in events if e.HasField("cleared"))
    words = [w for e in events if e.HasField("words") for w in e.words.words]
    assert words and cleared.text_remaining
    for w in words:  # only words whose audio went out before the clear: part of the heard text
        assert w.start_pts_ms < cleared.last_pts_ms
        assert w.start_char < len(cleared.text_spoken), (w.text, cleared.text_spoken)
    assert max(w.end_char for w in words) < len(cleared.text_spoken) + len(cleared.text_remaining)
