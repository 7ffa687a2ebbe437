"""SSML fed in pieces: the same events whatever the split, text released as soon as it is final; fuzzing."""

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.ssml import SsmlError, SsmlLimits, SsmlStream, TextPiece, parse_ssml

DOCS = [
    """<?xml version="1.0"?>
<speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis" xml:lang="zh-CN">
  <p><s>您好，请拨打<say-as interpret-as="telephone">135 0123 4567</say-as>。</s>
  <s>您是我们的<say-as interpret-as="ordinal">3</say-as>位客户<break time="600ms"/>请稍候<mark name="m1"/>。</s></p>
  <prosody rate="slow" volume="+6dB">金额<say-as interpret-as="currency">¥13.5</say-as></prosody>
  <sub alias="世界卫生组织">WHO</sub> &amp; <phoneme alphabet="pinyin" ph="chao2 yang2">朝阳</phoneme>
  <!-- a comment --><voice name="x">好的 &#x4E2D; ok</voice><break time="3600s"/><emphasis>VIP  客户</emphasis>
</speak>""",
    "<speak>\r\n A  b\r\n\r\nc<mark name='x'/> d <break/> e </speak>",
    "<speak><p>Press 1</p><p> for\tsales </p><prosody rate='x-fast'><prosody volume='silent'>嘘</prosody></prosody></speak>",
    # SSML written for other platforms: Aliyun's speak attributes and py pinyin, Polly's undeclared amazon:, Azure's
    # sapi pinyin and bookmark, Google's par/media with a nested speak, the extra say-as classes
    """<speak rate="-125" volume="80" pitch="20">请<say-as interpret-as="name">单田芳</say-as>先生
  <amazon:effect name="whispered"><phoneme alphabet="py" ph="chao2 yang2">朝阳</phoneme></amazon:effect>
  <bookmark mark="b1"/><phoneme alphabet="sapi" ph="chang2 an1">长安</phoneme><soundEvent src="x.wav"/>
  <par><media><speak>金额<say-as interpret-as="fraction">3/4</say-as></speak></media></par>
  <say-as interpret-as="date" format="mdy">11/22/2026</say-as><emotion category="happy">好的</emotion>
  <say-as interpret-as="measure">5kg</say-as><say-as interpret-as="duration" format="ms">1:30</say-as></speak>""",
]


def coalesced(events):
    """Events with adjacent TextPieces merged: the split-independent form of an event list."""
    out = []
    for ev in events:
        if isinstance(ev, TextPiece) and out and isinstance(out[-1], TextPiece) and not ev.spans and not ev.phonemes \
                and not out[-1].spans and not out[-1].phonemes:
            out[-1] = TextPiece(out[-1].start, out[-1].text + ev.text)
        else:
            out.append(ev)
    return out


def run(pieces):
    """(coalesced events, document, text released after each piece) or the error."""
    stream = SsmlStream()
    events, released = [], []
    try:
        for piece in pieces:
            events += stream.feed(piece)
            released.append(stream.document.text)
        events += stream.close()
    except SsmlError as exc:
        return ("error", str(exc))
    return coalesced(events), stream.document, released


def split(doc, cuts):
    cuts = sorted(set(c % (len(doc) + 1) for c in cuts))
    bounds = [0, *cuts, len(doc)]
    return [doc[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc_index=st.integers(0, len(DOCS) - 1), cuts=st.lists(st.integers(0, 10_000), max_size=40))
def test_any_split_gives_the_same_events(doc_index, cuts):
    doc = DOCS[doc_index]
    whole_events, whole_doc, _ = run([doc])
    events, document, released = run(split(doc, cuts))
    assert events == whole_events
    assert document == whole_doc
    for text in released:  # what was released is always a prefix of the final text: nothing is taken back
        assert whole_doc.text.startswith(text)


def test_char_by_char_releases_text_as_soon_as_it_is_read():
    stream = SsmlStream()
    stream.feed("<speak>")
    assert [e.text for e in stream.feed("您")] == ["您"]
    assert [e.text for e in stream.feed("好<say-as interpret-as='digits'>1")] == ["好"]  # 1 held: span open
    (piece,) = stream.feed("2</say-as>")
    assert piece.text == "12" and piece.spans[0].start == 2
    assert stream.feed("&am") == [] and [e.text for e in stream.feed("p;")] == ["&"]


def test_byte_identical_results_for_every_single_split_point():
    doc = DOCS[0]
    whole = run([doc])
    for k in range(len(doc) + 1):
        assert run([doc[:k], doc[k:]])[:2] == whole[:2], k


# -- fuzzing: hostile or random input gives a document or an SsmlError, fast and bounded ---------------------

TAGS = ["<speak>", "</speak>", "<s>", "</s>", "<p>", "</p>", "<break time='5s'/>", "<mark name='m'/>",
        "<say-as interpret-as='digits'>", "</say-as>", "<prosody rate='fast'>", "</prosody>", "<sub alias='甲'>",
        "</sub>", "<phoneme alphabet='pinyin' ph='hao3'>", "</phoneme>", "<!DOCTYPE x>", "<!ENTITY a 'b'>",
        "&amp;", "&lol;", "&#0;", "<?xml version='1.0'?>", "<!--", "-->", "<![CDATA[", "]]>", "<", ">", "&", "'",
        '"', "=", "/", "<amazon:effect>", "</amazon:effect>", "<mstts:silence/>", "<bookmark mark='b'/>",
        "<speak rate='100' volume='20'>", "<par>", "</par>", "<media>", "</media>", "<x:y xmlns:x='urn:x'>", "</x:y>",
        "<say-as interpret-as='name'>", "<phoneme alphabet='sapi' ph='hao 3'>"]
TOKENS = st.one_of(st.sampled_from(TAGS), st.text(alphabet=string.printable + "您好一二。，", max_size=6))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tokens=st.lists(TOKENS, max_size=60), cuts=st.lists(st.integers(0, 1000), max_size=10))
def test_fuzz_random_markup(tokens, cuts):
    doc = "".join(tokens)
    whole = run([doc])
    pieces = run(split(doc, cuts))
    assert (whole[0] == "error") == (pieces[0] == "error")
    if whole[0] != "error":
        assert pieces[:2] == whole[:2]
        assert len(whole[1].text) <= len(doc)


@settings(max_examples=50, deadline=None)
@given(depth=st.integers(0, 200), repeat=st.integers(0, 3000))
def test_fuzz_nesting_and_repetition_is_bounded(depth, repeat):
    doc = "<speak>" + "<s>" * depth + "<break time='1s'/>好" * repeat + "</s>" * depth + "</speak>"
    limits = SsmlLimits()
    try:
        result = parse_ssml(doc, limits)
    except SsmlError as exc:
        assert "deeper" in str(exc) or "elements" in str(exc) or "longer than" in str(exc)
    else:
        assert sum(c.pause_ms for c in result.cuts) <= limits.max_total_break_ms
        assert len(result.text) == repeat
