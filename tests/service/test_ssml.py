"""SSML subset: elements mapped onto text, spans, cuts, marks and prosody; errors name line, column and the fix."""

import pytest

from models.frontend.normalize import Span
from service.ssml import Cut, MarkAt, Phoneme, ProsodyAt, SsmlError, SsmlLimits, SsmlStream, parse_ssml


def speak(body: str) -> str:
    return f'<speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis" xml:lang="zh-CN">{body}</speak>'


def codes(doc) -> list[str]:
    return [w.code for w in doc.warnings]


def test_plain_text_content_and_whitespace():
    doc = parse_ssml(speak("\n  <p>\n    您好，\n    欢迎致电。\n  </p>\n  <p>Press  one\n for VIP.</p>\n"))
    assert doc.text == "您好，欢迎致电。Press one for VIP."
    # paragraph boundaries cut the text; no cut at 0 (nothing before it) and none twice at one place
    assert doc.cuts == [Cut(8, 0, "paragraph"), Cut(len(doc.text), 0, "paragraph")]
    assert doc.warnings == []


def test_xml_declaration_entities_and_character_references():
    doc = parse_ssml('<?xml version="1.0" encoding="UTF-8"?>' + speak("A&amp;B &lt;1&gt; &#x4E2D;&#22269;"))
    assert doc.text == "A&B <1>中国"  # a space next to Hanzi is layout, not a word gap


@pytest.mark.parametrize("interpret, kind", [
    ("telephone", "telephone"), ("digits", "digits"), ("cardinal", "cardinal"), ("number", "cardinal"),
    ("currency", "amount"), ("date", "date"), ("time", "time"), ("characters", "characters"),
    ("spell-out", "characters"), ("verbatim", "verbatim"),
])
def test_say_as_maps_to_frontend_span_kinds(interpret, kind):
    doc = parse_ssml(speak(f'号码<say-as interpret-as="{interpret}">2026-11-22</say-as>。'))
    assert doc.text == "号码2026-11-22。"
    assert doc.spans == [Span(2, 12, kind)]


def test_say_as_kinds_are_known_to_the_frontend():
    from models.frontend.normalize import SPAN_KINDS
    from service.ssml.values import SAY_AS_KINDS

    assert set(SAY_AS_KINDS.values()) <= SPAN_KINDS


def test_ordinal_reads_with_di():
    doc = parse_ssml(speak('您是<say-as interpret-as="ordinal">3</say-as>位，<say-as interpret-as="ordinal">第5</say-as>'))
    assert doc.text == "您是第3位，第5"
    assert doc.spans == [Span(2, 4, "cardinal"), Span(6, 8, "cardinal")]


def test_say_as_spans_normalize_as_typed_spans():
    from models.frontend import MandarinFrontend

    doc = parse_ssml(speak('请拨打<say-as interpret-as="telephone">13501234567</say-as>，'
                           '验证码<say-as interpret-as="digits">2026</say-as>。'))
    result = MandarinFrontend().to_ids(doc.text, doc.spans)
    assert "幺三五" in result.normalized.text and "二零二六" in result.normalized.text


def test_unknown_say_as_is_read_normally_with_a_warning():
    doc = parse_ssml(speak('<say-as interpret-as="expletive">abc</say-as>'))
    assert doc.text == "abc" and doc.spans == [] and codes(doc) == ["ssml_say_as_ignored"]


def test_sub_speaks_the_alias():
    doc = parse_ssml(speak('欢迎<sub alias="世界卫生组织">WHO</sub>的专家'))
    assert doc.text == "欢迎世界卫生组织的专家"


def test_phoneme_pinyin_is_validated_and_positioned():
    doc = parse_ssml(speak('去<phoneme alphabet="pinyin" ph="chao2  yang2">朝阳</phoneme>区'))
    assert doc.text == "去朝阳区"
    assert doc.phonemes == [Phoneme(1, 3, "chao2 yang2")]
    with pytest.raises(SsmlError) as err:
        parse_ssml(speak('\n<phoneme alphabet="pinyin" ph="chao7 yang2">朝阳</phoneme>'))
    assert err.value.line == 2 and err.value.column == 1 and "chao7" in str(err.value)
    with pytest.raises(SsmlError, match="one syllable per character"):
        parse_ssml(speak('<phoneme alphabet="pinyin" ph="chao2">朝阳</phoneme>'))


def test_phoneme_in_another_alphabet_is_read_normally_with_a_warning():
    doc = parse_ssml(speak('<phoneme alphabet="ipa" ph="tʃʰɑʊ">朝阳</phoneme>'))
    assert doc.text == "朝阳" and doc.phonemes == [] and codes(doc) == ["ssml_phoneme_ignored"]


def test_breaks_time_and_strength():
    doc = parse_ssml(speak('一<break time="600ms"/>二<break time="1.5s"/>三<break strength="strong"/>四<break/>五'
                           '<break strength="none"/>六<break strength="x-weak" time="20ms"/>七'))
    assert doc.text == "一二三四五六七"
    assert doc.cuts == [Cut(1, 600, "break"), Cut(2, 1500, "break"), Cut(3, 700, "break"), Cut(4, 400, "break"),
                        Cut(6, 20, "break")]
    assert doc.pause_ms_at(2) == 1500


def test_one_hour_break_is_clamped_with_a_warning():
    doc = parse_ssml(speak('请稍候<break time="3600s"/>好的'))
    assert doc.cuts == [Cut(3, 10_000, "break")] and codes(doc) == ["ssml_break_clamped"]
    many = parse_ssml(speak('<break time="10s"/>' * 8 + "好"))
    assert sum(c.pause_ms for c in many.cuts) == 60_000 and "ssml_break_clamped" in codes(many)


@pytest.mark.parametrize("bad", ['time="fast"', 'time="-5ms"', 'strength="huge"'])
def test_bad_break_values_are_errors(bad):
    with pytest.raises(SsmlError, match="break"):
        parse_ssml(speak(f"<break {bad}/>"))


def test_marks_at_text_positions():
    doc = parse_ssml(speak('您好<mark name="greeting"/>，请问<mark name="q"/>'))
    assert doc.marks == [MarkAt(2, "greeting"), MarkAt(5, "q")]
    with pytest.raises(SsmlError, match="needs a name"):
        parse_ssml(speak("<mark/>"))


@pytest.mark.parametrize("rate, factor", [
    ("x-slow", 0.6), ("slow", 0.8), ("medium", 1.0), ("fast", 1.25), ("x-fast", 1.6), ("80%", 0.8),
    ("150%", 1.5), ("+20%", 1.2), ("-10%", 0.9), ("1.1", 1.1),
])
def test_prosody_rate(rate, factor):
    doc = parse_ssml(speak(f'前<prosody rate="{rate}">中</prosody>后'))
    if factor == 1.0:
        assert doc.prosody == [] and doc.cuts == []
        return
    assert doc.prosody == [ProsodyAt(1, pytest.approx(factor), 0.0), ProsodyAt(2, 1.0, 0.0)]
    assert doc.cuts == [Cut(1, 0, "prosody"), Cut(2, 0, "prosody")]
    assert doc.prosody_at(1)[0] == pytest.approx(factor) and doc.prosody_at(2)[0] == 1.0


def test_prosody_rate_is_clamped_and_relative_to_the_enclosing_and_base_rate():
    doc = parse_ssml(speak('<prosody rate="400%">快</prosody><prosody rate="slow"><prosody rate="+50%">慢</prosody></prosody>'),
                     base_speaking_rate=1.2)
    # slow (0.8) + 50 % = 1.2 = the turn's rate: no change at 1; one change per place, no empty ranges
    assert doc.prosody == [ProsodyAt(0, 2.0, 0.0), ProsodyAt(1, pytest.approx(1.2), 0.0)]
    assert doc.cuts == [Cut(1, 0, "prosody")]
    assert codes(doc) == ["ssml_rate_clamped"]


@pytest.mark.parametrize("volume, db", [
    ("silent", None), ("x-soft", -12.0), ("soft", -6.0), ("loud", 6.0), ("x-loud", 10.0), ("+3dB", 3.0),
    ("-6.5dB", -6.5),
])
def test_prosody_volume(volume, db):
    doc = parse_ssml(speak(f'<prosody volume="{volume}">中</prosody>'))
    assert doc.prosody[0] == ProsodyAt(0, 1.0, db)


def test_prosody_volume_clamped_and_pitch_warned():
    doc = parse_ssml(speak('<prosody volume="+30dB" pitch="+2st">中</prosody>'))
    assert doc.prosody[0].volume_db == 12.0
    assert codes(doc) == ["ssml_volume_clamped", "ssml_prosody_ignored"]


def test_elements_spoken_with_warnings():
    doc = parse_ssml(speak('<voice name="other">一</voice><audio src="http://x/a.wav">二<desc>铃声</desc></audio>'
                           '<emphasis level="strong">三</emphasis><emphasis>四</emphasis><lang xml:lang="en-US">OK</lang>'
                           "<meta name='a' content='b'/><metadata>不读</metadata><w>五</w>"))
    assert doc.text == "一二三四OK五"
    assert codes(doc) == ["ssml_voice_ignored", "ssml_audio_not_played", "ssml_emphasis_ignored", "ssml_language_ignored"]


def test_foreign_namespace_elements_are_spoken_with_a_warning():
    doc = parse_ssml('<speak xmlns:mstts="http://www.w3.org/2001/mstts"><mstts:express-as style="cheerful">好的'
                     "</mstts:express-as></speak>")
    assert doc.text == "好的" and codes(doc) == ["ssml_element_ignored"]


@pytest.mark.parametrize("document, line, column, fix", [
    ("<speak>您好", 1, 10, "close every element"),
    ("<speak>\n  <s>您好</p></speak>", 2, 10, "</p> closes no open element; the innermost open element is <s> "
                                             "(line 2, column 3): close it with </s> or remove </p>"),
    ("<speak>A & B</speak>", 1, 11, "&amp;"),
    ("<speak>1 < 2</speak>", 1, 11, "&lt;"),
    ("<speak>&nbsp;</speak>", 1, 8, "&#x4E2D;"),
    ("<speak>a</speak><speak>b</speak>", 1, 17, "one <speak>"),
    ("您好", 1, 1, "start with <speak>"),
    ("<p>您好</p>", 1, 1, "one <speak> element"),
    ("<speak><blink>x</blink></speak>", 1, 8, "supported:"),
    ("<speak><speak>x</speak></speak>", 1, 8, "<p>, <s>"),
    ('<speak><say-as interpret-as="digits">1<mark name="m"/>2</say-as></speak>', 1, 39, "move it outside"),
    ("<speak><say-as>12</say-as></speak>", 1, 8, "interpret-as"),
    ("<speak><sub>WHO</sub></speak>", 1, 8, "alias"),
    ("<speak><break>x</break></speak>", 1, 15, "empty"),
    ('<speak><emphasis level="loud">x</emphasis></speak>', 1, 8, "strong, moderate"),
])
def test_errors_name_line_column_and_the_fix(document, line, column, fix):
    with pytest.raises(SsmlError) as err:
        parse_ssml(document)
    assert (err.value.line, err.value.column) == (line, column), str(err.value)
    assert fix in str(err.value)
    assert str(err.value).startswith(f"SSML line {line}, column {column}: ")


def test_a_failed_stream_keeps_failing_and_refuses_text_after_close():
    stream = SsmlStream()
    stream.feed("<speak>好")
    with pytest.raises(SsmlError):
        stream.feed("</p>")
    with pytest.raises(SsmlError):
        stream.feed("</speak>")
    done = SsmlStream()
    done.feed(speak("好"))
    done.close()
    assert done.complete
    with pytest.raises(SsmlError, match="new turn"):
        done.feed("<speak/>")


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<speak>&lol3;</speak>"""


@pytest.mark.parametrize("document", [
    BILLION_LAUGHS,
    '<!DOCTYPE speak SYSTEM "http://example.com/ssml.dtd"><speak>x</speak>',
    '<!DOCTYPE speak [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><speak>&xxe;</speak>',
    '<!DOCTYPE speak [<!ENTITY % p SYSTEM "http://example.com/p.dtd"> %p;]><speak>x</speak>',
])
def test_dtds_and_entities_are_refused(document):
    with pytest.raises(SsmlError, match="DOCTYPE"):
        parse_ssml(document)


def test_limits_depth_elements_size():
    with pytest.raises(SsmlError, match="deeper than 24"):
        parse_ssml("<speak>" + "<s>" * 30 + "x" + "</s>" * 30 + "</speak>")
    with pytest.raises(SsmlError, match="more than 2000 elements"):
        parse_ssml(speak('<mark name="m"/>' * 10_000), limits=SsmlLimits(max_chars=10**6))
    with pytest.raises(SsmlError, match="longer than 100 characters") as err:
        parse_ssml(speak("好" * 200), limits=SsmlLimits(max_chars=100))
    assert err.value.column == 101
    with pytest.raises(SsmlError, match="longer than 256"):
        parse_ssml(speak(f'<mark name="{"m" * 300}"/>'))


def test_unclosed_tags_across_deltas_fail_at_close():
    stream = SsmlStream()
    for piece in ["<speak><s>您", "好<say-as interpret-as", '="digits">12', "3"]:
        stream.feed(piece)
    assert stream.document.text == "您好"  # the say-as text is held until its element closes
    with pytest.raises(SsmlError, match="close every element") as err:
        stream.close()
    assert err.value.line == 1
