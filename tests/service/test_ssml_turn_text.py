"""An SSML turn cut into segments: breaks and prosody changes end segments, spans, lexicon and pauses per segment."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.frontend.normalize import Span
from models.frontend.segmenter import Segmenter
from service.ssml import SsmlError, SsmlStream, SsmlTurnText

DOC = ('<speak><break time="200ms"/>您好<break time="600ms"/>请拨打<say-as interpret-as="telephone">13501234567</say-as>'
       '<mark name="after-number"/><prosody rate="slow">去<phoneme alphabet="pinyin" ph="chao2 yang2">朝阳</phoneme>'
       '区</prosody>办理。<break time="1s"/></speak>')


def segmenter() -> Segmenter:
    return Segmenter(max_chars=80, clock=lambda: 0.0)


def run(pieces, base_rate=1.0):
    turn = SsmlTurnText(segmenter(), SsmlStream(base_rate=base_rate))
    segments, marks = [], []
    for piece in pieces:
        segments += turn.push(piece)
        marks += turn.take_marks()
    segments += turn.complete()
    marks += turn.take_marks()
    plans, prev = [], -1
    for seg in segments:
        plans.append(turn.plan(seg, prev))
        prev = seg.start
    return turn, plans, marks


def test_segments_plans_and_marks():
    turn, plans, marks = run([DOC])
    assert turn.text == "您好请拨打13501234567去朝阳区办理。"
    assert [p.segment.text for p in plans] == ["您好", "请拨打13501234567", "去朝阳区", "办理。"]
    assert [p.pause_before_ms for p in plans] == [200, 600, 0, 0]
    assert turn.trailing_pause_ms == 1000
    assert plans[1].spans == (Span(3, 14, "telephone"),)
    assert plans[2].lexicon == {"朝阳": "chao2 yang2"} and plans[2].rate == 0.8
    assert [p.rate for p in plans] == [1.0, 1.0, 0.8, 1.0]
    assert [(m.pos, m.name) for m in marks] == [(16, "after-number")]


def test_the_turns_rate_is_the_base():
    _, plans, _ = run([DOC], base_rate=1.5)
    assert [p.rate for p in plans] == [1.5, 1.5, pytest.approx(0.8), 1.5]


def test_frontend_reads_each_plan():
    from models.frontend import MandarinFrontend

    _, plans, _ = run([DOC])
    fe = MandarinFrontend()
    results = [fe.to_ids(p.segment.text, p.spans, p.lexicon or None) for p in plans]
    assert "幺三五" in results[1].normalized.text
    assert results[2].pinyin[1:3] == ["chao2", "yang2"]


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(0, len(DOC)), max_size=30))
def test_same_segments_whatever_the_split(cuts):
    bounds = [0, *sorted(set(cuts)), len(DOC)]
    pieces = [DOC[a:b] for a, b in zip(bounds, bounds[1:])]
    assert run(pieces)[1:] == run([DOC])[1:]


def test_bad_ssml_raises_at_push_or_complete():
    turn = SsmlTurnText(segmenter())
    turn.push("<speak>您好")
    with pytest.raises(SsmlError, match="close every element"):
        turn.complete()
    with pytest.raises(SsmlError):
        SsmlTurnText(segmenter()).push("<speak><blink>")
