"""Streaming segmenter: cut rules, caps, spans, idle timeout, and independence from how deltas are split."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.frontend import Segment, Segmenter, SegmenterError, Span
from models.frontend.segmenter import spans_in_segment


def cuts(text: str, deltas: list[str] | None = None, spans=(), **kw) -> list[Segment]:
    seg = Segmenter(**kw)
    out: list[Segment] = []
    for i, d in enumerate(deltas if deltas is not None else [text]):
        out += seg.push(d, spans=spans if i == 0 else ())
    out += seg.flush()
    return out


def texts(segments: list[Segment]) -> list[str]:
    return [s.text for s in segments]


SAMPLE = (
    "您好，欢迎致电客户服务中心！请问有什么可以帮您？价格是3.5元。共1,000元，时间10:30。"
    "请拨打13501234567。Hello world. I paid 3.5 dollars; OK?\n"
    "好的👍🏽👨‍👩‍👧，再见。"
)


def test_sentence_and_first_clause_cuts() -> None:
    segs = cuts(SAMPLE)
    assert texts(segs) == [
        "您好，",
        "欢迎致电客户服务中心！",
        "请问有什么可以帮您？",
        "价格是3.5元。",
        "共1,000元，时间10:30。",
        "请拨打13501234567。",
        "Hello world.",
        " I paid 3.5 dollars;",
        " OK?",
        "\n好的👍🏽👨‍👩‍👧，再见。",
    ]
    assert [s.reason for s in segs[:3]] == ["clause", "sentence", "sentence"]
    # offsets are exact and contiguous here (nothing unspeakable was dropped)
    assert all(SAMPLE[s.start:s.end] == s.text for s in segs)
    assert segs[0].start == 0 and segs[-1].end == len(SAMPLE)
    assert all(a.end == b.start for a, b in zip(segs, segs[1:]))


def test_first_clause_cut_can_be_disabled_and_needs_min_chars() -> None:
    assert texts(cuts("您好，欢迎致电。", first_clause_cut=False)) == ["您好，欢迎致电。"]
    assert texts(cuts("嗯，您好，欢迎致电。", min_first_chars=2)) == ["嗯，您好，", "欢迎致电。"]
    # only the first segment is cut at a clause mark
    assert texts(cuts("好的。您好，欢迎致电。")) == ["好的。", "您好，欢迎致电。"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("价格3.5元", ["价格3.5元"]),
        ("共1,000元", ["共1,000元"]),
        ("十点10:30开始", ["十点10:30开始"]),
        ("version 3. Next", ["version 3.", " Next"]),
        ("e.g.so", ["e.g.so"]),
        ("Done.", ["Done."]),
    ],
)
def test_ascii_period_and_numbers(text: str, expected: list[str]) -> None:
    assert texts(cuts(text, first_clause_cut=False)) == expected


def test_period_waits_for_the_next_delta() -> None:
    seg = Segmenter()
    assert seg.push("价格是3.") == []
    assert texts(seg.push("5元。")) == ["价格是3.5元。"]
    assert seg.push("Done.") == []  # could be "Done.5" or "Done. …"
    assert texts(seg.push(" Next")) == ["Done."]
    assert texts(seg.flush()) == [" Next"]


def test_comma_after_digit_waits_then_does_not_cut_a_number() -> None:
    seg = Segmenter()
    assert seg.push("共1,") == []
    assert seg.push("000元") == []
    assert texts(seg.push("，好的。")) == ["共1,000元，", "好的。"]


def test_punctuation_only_text_joins_the_next_segment_or_is_dropped_at_flush() -> None:
    segs = cuts("“好。”“你好！”。。")
    assert texts(segs) == ["“好。", "”“你好！"]
    assert segs[1].start == 3
    assert cuts("。。！") == []


def test_cap_prefers_clause_then_space_then_word_boundary() -> None:
    text = "我们今天一起去公园散步，然后去吃饭再回家看电视然后睡觉。"
    segs = cuts(text, max_chars=16, first_clause_cut=False)
    assert texts(segs)[0] == "我们今天一起去公园散步，"
    text = "aaaa bbbb cccc dddd eeee ffff gggg"
    segs = cuts(text, max_chars=12)
    assert texts(segs) == ["aaaa bbbb ", "cccc dddd ", "eeee ffff ", "gggg"]
    text = "今天天气很好我们一起去公园散步然后去吃饭"
    segs = cuts(text, max_chars=10)
    assert all(len(s.text) <= 10 for s in segs)
    assert "".join(texts(segs)) == text
    # cut at a jieba word boundary, not inside 公园 / 散步 / 吃饭
    for s in segs[:-1]:
        assert text[s.end - 1:s.end + 1] not in ("公园", "散步", "吃饭", "天气", "一起")


def test_cap_never_cuts_inside_a_digit_or_latin_run() -> None:
    text = "号码" + "13501234567" * 2 + "元"
    segs = cuts(text, max_chars=10)
    assert texts(segs) == ["号码", "1350123456713501234567", "元"]
    text = "请访问" + "abcdefghijklmnop" + "网站"
    segs = cuts(text, max_chars=8)
    assert "abcdefghijklmnop" in texts(segs)


def test_hard_limit_bounds_absurd_runs() -> None:
    segs = cuts("1" * 100, max_chars=10, hard_max_chars=40)
    assert [len(s.text) for s in segs] == [40, 40, 20]


def test_protected_span_is_never_cut() -> None:
    text = "您的地址是北京市，朝阳区。好的。"
    span = (5, 12)  # "北京市，朝阳区" is one say-as span: the clause mark inside must not cut
    assert texts(cuts(text, spans=[span], first_clause_cut=True)) == ["您的地址是北京市，朝阳区。", "好的。"]
    assert texts(cuts(text, first_clause_cut=True, min_first_chars=2)) == ["您的地址是北京市，", "朝阳区。", "好的。"]
    # the cap respects it too
    long_text = "一" * 8 + "二" * 8
    segs = cuts(long_text, spans=[(5, 12)], max_chars=10)
    assert all(not (5 < s.end < 12) for s in segs)


def test_spans_are_rebased_to_their_segment() -> None:
    text = "好的。请拨打13501234567。"
    span = Span(6, 17, "telephone")
    segs = cuts(text, spans=[span])
    assert texts(segs) == ["好的。", "请拨打13501234567。"]
    assert spans_in_segment(segs[1], [span]) == [Span(3, 14, "telephone")]
    assert spans_in_segment(segs[0], [span]) == []


def test_idle_timeout_with_injected_clock() -> None:
    now = [100.0]
    seg = Segmenter(idle_timeout_s=0.5, clock=lambda: now[0])
    assert seg.push("您好，欢迎") == [Segment("您好，", 0, 3, "clause")]
    now[0] = 100.3
    assert seg.poll_idle() == []
    now[0] = 100.6
    assert seg.poll_idle() == [Segment("欢迎", 3, 5, "idle")]
    assert seg.poll_idle() == []
    assert seg.push("致电。", now_s=101.0) == [Segment("致电。", 5, 8, "sentence")]
    assert seg.poll_idle(now_s=200.0) == []  # nothing pending


def test_settings_and_inputs_are_validated() -> None:
    with pytest.raises(SegmenterError):
        Segmenter(max_chars=1)
    with pytest.raises(SegmenterError):
        Segmenter(max_chars=50, hard_max_chars=10)
    with pytest.raises(SegmenterError):
        Segmenter(idle_timeout_s=0)
    with pytest.raises(SegmenterError):
        Segmenter().push(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(SegmenterError):
        Segmenter().push("x", spans=[(5, 2)])


# -- split invariance -----------------------------------------------------------------------------

INVARIANCE_TEXTS = [
    SAMPLE,
    "嗯，" + "今天天气很好我们一起去公园散步然后去吃饭" * 3 + "3.5元1,000元10:30。done. 13501234567abc def",
]


@pytest.mark.parametrize("text", INVARIANCE_TEXTS)
@pytest.mark.parametrize("max_chars", [12, 80])
def test_every_two_way_split_gives_the_same_segments(text: str, max_chars: int) -> None:
    whole = cuts(text, max_chars=max_chars)
    for i in range(1, len(text)):
        assert cuts(text, [text[:i], text[i:]], max_chars=max_chars) == whole, f"split at {i}"


@pytest.mark.parametrize("text", INVARIANCE_TEXTS)
def test_char_by_char_gives_the_same_segments(text: str) -> None:
    assert cuts(text, list(text), max_chars=12) == cuts(text, max_chars=12)


_alphabet = st.sampled_from(list("您好欢迎致电一二三四五六七八九零abc XYZ0123456789.,，。！？；：、!?;:\n👍🏽\u200d"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(alphabet=_alphabet, max_size=60),
    cuts_at=st.lists(st.integers(min_value=0, max_value=60), max_size=8),
    max_chars=st.integers(min_value=4, max_value=30),
    first=st.booleans(),
)
def test_random_splits_give_the_same_segments(text: str, cuts_at: list[int], max_chars: int, first: bool) -> None:
    points = sorted({min(c, len(text)) for c in cuts_at})
    pieces = [text[a:b] for a, b in zip([0] + points, points + [len(text)])]
    kw = {"max_chars": max_chars, "first_clause_cut": first}
    whole = cuts(text, **kw)
    assert cuts(text, pieces, **kw) == whole
    for s in whole:
        assert text[s.start:s.end] == s.text and any(c.isalnum() for c in s.text)
        # never between two digits, unless the hard limit forced it
        if 0 < s.end < len(text) and len(s.text) < 4 * max_chars:
            assert not (text[s.end - 1].isdigit() and text[s.end].isdigit())
