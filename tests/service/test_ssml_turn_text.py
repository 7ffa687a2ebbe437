"""An SSML turn cut into segments: breaks and prosody changes end segments, spans, lexicon and pauses per segment."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.frontend.normalize import Span
from models.frontend.segmenter import Segmenter
from service.ssml import MarkAt, Pause, SsmlError, SsmlSegment, SsmlStream, SsmlTurnText, SsmlWarning

DOC = ('<speak><break time="200ms"/>您好<break time="600ms"/>请拨打<say-as interpret-as="telephone">13501234567</say-as>'
       '<mark name="after-number"/><prosody rate="slow">去<phoneme alphabet="pinyin" ph="chao2 yang2">朝阳</phoneme>'
       '区</prosody>办理。<break time="1s"/></speak>')


def segmenter() -> Segmenter:
    return Segmenter(max_chars=80, clock=lambda: 0.0)


def run(pieces, base_speaking_rate=1.0):
    turn = SsmlTurnText(segmenter(), SsmlStream(base_speaking_rate=base_speaking_rate))
    items = []
    for piece in pieces:
        items += turn.push(piece)
    items += turn.complete()
    return turn, items


def of(items, kind):
    return [i for i in items if isinstance(i, kind)]


def test_segments_pauses_and_marks_in_document_order():
    # a mark comes as soon as it is read (its position is known), before the segment that its position ends
    turn, items = run([DOC])
    assert turn.text == "您好请拨打13501234567去朝阳区办理。"
    order = [(type(i).__name__, getattr(i, "text", None) or getattr(i, "ms", None) or getattr(i, "name", None))
             for i in items if not isinstance(i, SsmlWarning)]
    assert order == [("Pause", 200), ("SsmlSegment", "您好"), ("Pause", 600), ("MarkAt", "after-number"),
                     ("SsmlSegment", "请拨打13501234567"), ("SsmlSegment", "去朝阳区"), ("SsmlSegment", "办理。"), ("Pause", 1000)]
    segs = of(items, SsmlSegment)
    assert [(p.pos, p.ms) for p in of(items, Pause)] == [(0, 200), (2, 600), (23, 1000)]
    assert segs[1].spans == (Span(3, 14, "telephone"),)
    assert dict(segs[2].lexicon) == {"朝阳": "chao2 yang2"} and segs[2].speaking_rate == 0.8
    assert [p.speaking_rate for p in segs] == [1.0, 1.0, 0.8, 1.0]
    assert [(m.pos, m.name) for m in of(items, MarkAt)] == [(16, "after-number")]
    assert [s.text for s in segs] == [turn.text[s.start:s.end] for s in segs]


def test_a_prosody_rate_is_carried_by_its_segments_not_warned():
    _, items = run([DOC])  # the engine applies rates: a <prosody rate> is no warning
    assert not [w for w in of(items, SsmlWarning) if "rate" in w.code]
    assert 0.8 in [s.speaking_rate for s in of(items, SsmlSegment)]


def test_the_turns_rate_is_the_base():
    _, items = run([DOC], base_speaking_rate=1.5)
    assert [p.speaking_rate for p in of(items, SsmlSegment)] == [1.5, 1.5, pytest.approx(0.8), 1.5]


def test_volume_and_silent_segments():
    _, items = run(['<speak>您好<prosody volume="-6dB">欢迎</prosody><prosody volume="silent">致电</prosody></speak>'])
    assert [(s.text, s.volume_db) for s in of(items, SsmlSegment)] == [("您好", 0.0), ("欢迎", -6.0), ("致电", None)]


def test_frontend_reads_each_segment():
    from models.frontend import MandarinFrontend

    _, items = run([DOC])
    fe = MandarinFrontend()
    results = [fe.to_ids(s.text, s.spans, dict(s.lexicon) or None) for s in of(items, SsmlSegment)]
    assert "幺三五" in results[1].normalized.text
    assert results[2].pinyin[1:3] == ["chao2", "yang2"]


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(0, len(DOC)), max_size=30))
def test_same_items_whatever_the_split(cuts):
    bounds = [0, *sorted(set(cuts)), len(DOC)]
    pieces = [DOC[a:b] for a, b in zip(bounds, bounds[1:])]
    assert run(pieces)[1] == run([DOC])[1]


def test_bad_ssml_raises_at_push_or_complete():
    turn = SsmlTurnText(segmenter())
    turn.push("<speak>您好")
    with pytest.raises(SsmlError, match="close every element"):
        turn.complete()
    with pytest.raises(SsmlError):
        SsmlTurnText(segmenter()).push("<speak><blink>")
