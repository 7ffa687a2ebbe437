"""SSML written for Azure, Google, Polly, Aliyun and Tencent: every construct of docs/ssml.md's platform tables is
either honoured (the expected spans, lexicon, rate, volume, marks and reading, no warning) or skipped (its warning,
the text spoken); none refuses the document. Malformed vendor markup is still refused with line and column."""

import math

import pytest

from models.frontend import MandarinFrontend
from models.frontend.normalize import Span
from service.ssml import MarkAt, Phoneme, ProsodyAt, SsmlError, parse_ssml

AZURE = ('<speak version="1.0" xmlns="http://www.w3.org/2001/10/synthesis" xmlns:mstts="https://www.w3.org/2001/mstts" '
         'xml:lang="zh-CN"><voice name="zh-CN-XiaoxiaoNeural">{}</voice></speak>')
GOOGLE = "<speak>{}</speak>"
POLLY = '<speak xmlns:amazon="http://www.amazon.com/2017/ssml">{}</speak>'
ALIYUN = "<speak>{}</speak>"
TENCENT = "<speak>{}</speak>"


@pytest.fixture(scope="module")
def fe() -> MandarinFrontend:
    return MandarinFrontend()


def codes(doc) -> list[str]:
    return [w.code for w in doc.warnings]


# (platform wrapper, body, text content, spans, normalized reading of the text)
MAPPED_SAY_AS = [
    (AZURE, '<say-as interpret-as="number_digit">2026</say-as>', "2026", "digits", "二零二六"),
    (AZURE, '<say-as interpret-as="fraction">3/4</say-as>', "3/4", "fraction", "四分之三"),
    (AZURE, '<say-as interpret-as="date" format="mdy">11/22/2026</say-as>', "11/22/2026", "date_mdy",
     "二零二六年十一月二十二日"),
    (AZURE, '<say-as interpret-as="date" format="dmy">22.11.2026</say-as>', "22.11.2026", "date_dmy",
     "二零二六年十一月二十二日"),
    (AZURE, '<say-as interpret-as="date" format="dm">22/11</say-as>', "22/11", "date_dm", "十一月二十二日"),
    (AZURE, '<say-as interpret-as="date" format="my">11/2026</say-as>', "11/2026", "date_my", "二零二六年十一月"),
    (AZURE, '<say-as interpret-as="date" format="ydm">2026-22-11</say-as>', "2026-22-11", "date_ydm",
     "二零二六年十一月二十二日"),
    (AZURE, '<say-as interpret-as="date" format="d">22</say-as>', "22", "date_d", "二十二日"),
    (AZURE, '<say-as interpret-as="date" format="m">11</say-as>', "11", "date_m", "十一月"),
    (AZURE, '<say-as interpret-as="duration" format="hms">1:02:05</say-as>', "1:02:05", "duration_hms",
     "一小时两分钟五秒"),
    (AZURE, '<say-as interpret-as="duration" format="hm">1:30</say-as>', "1:30", "duration_hm", "一小时三十分钟"),
    (AZURE, '<say-as interpret-as="duration" format="ms">1:30</say-as>', "1:30", "duration_ms", "一分钟三十秒"),
    (AZURE, '<say-as interpret-as="address">深南大道10000号3单元304室</say-as>', "深南大道10000号3单元304室", "address",
     "深南大道一万号三单元三零四室"),
    (AZURE, '<say-as interpret-as="name">单田芳</say-as>', "单田芳", "name", "单田芳"),
    (GOOGLE, '<say-as interpret-as="unit">10 foot</say-as>', "10 foot", "measure", "十英尺"),
    (GOOGLE, '<say-as interpret-as="date" format="yyyymmdd">20261122</say-as>', "20261122", "date_ymd",
     "二零二六年十一月二十二日"),
    (GOOGLE, '<say-as interpret-as="duration" format="h:m:s">2:00:30</say-as>', "2:00:30", "duration_hms",
     "两小时三十秒"),
    (GOOGLE, '<say-as interpret-as="duration">12:30</say-as>', "12:30", "duration", "十二分钟三十秒"),
    (POLLY, '<say-as interpret-as="fraction">1 1/2</say-as>', "1 1/2", "fraction", "一又二分之一"),
    (POLLY, '<say-as interpret-as="unit">1/2inch</say-as>', "1/2inch", "measure", "二分之一英寸"),
    (POLLY, '<say-as interpret-as="time">1\'21"</say-as>', "1'21\"", "duration", "一分钟二十一秒"),
    (POLLY, '<say-as interpret-as="date" format="md">11-22</say-as>', "11-22", "date_md", "十一月二十二日"),
    (POLLY, '<say-as interpret-as="date" format="y">2026</say-as>', "2026", "date_y", "二零二六年"),
    (POLLY, '<say-as interpret-as="date" format="ym">2026/11</say-as>', "2026/11", "date_ym", "二零二六年十一月"),
    (POLLY, '<say-as interpret-as="address">3-2-301</say-as>', "3-2-301", "address", "三杠二杠三零幺"),
    (ALIYUN, '<say-as interpret-as="measure">5kg</say-as>', "5kg", "measure", "五公斤"),
    (ALIYUN, '<say-as interpret-as="measure">-3°C</say-as>', "-3°C", "measure", "零下三摄氏度"),
    (ALIYUN, '<say-as interpret-as="id">AB12</say-as>', "AB12", "characters", "诶比幺二"),
    (ALIYUN, '<say-as interpret-as="punctuation">#*</say-as>', "#*", "characters", "井号星号"),
    (ALIYUN, '<say-as interpret-as="date" format="ymd">2026年11月22日</say-as>', "2026年11月22日", "date_ymd",
     "二零二六年十一月二十二日"),
    (TENCENT, '<say-as interpret-as="address">3栋2单元</say-as>', "3栋2单元", "address", "三栋二单元"),
    (TENCENT, '<say-as interpret-as="characters">b_u</say-as>', "b_u", "characters", "比下划线优"),
]


@pytest.mark.parametrize("wrapper, body, text, kind, reading", MAPPED_SAY_AS)
def test_say_as_classes_are_mapped_to_their_readings(fe, wrapper, body, text, kind, reading):
    doc = parse_ssml(wrapper.format("请听" + body + "。"))
    assert doc.text == "请听" + text + "。"
    assert doc.spans == [Span(2, 2 + len(text), kind)]
    assert not [c for c in codes(doc) if c.startswith("ssml_say_as")]
    result = fe.to_ids(doc.text, doc.spans)
    assert result.normalized.text == "请听" + reading + "。"
    assert not [w for w in result.warnings if "span" in w]


@pytest.mark.parametrize("name, surname", [
    ("单田芳", ["shan4"]), ("解晓东", ["xie4"]), ("仇英", ["qiu2"]), ("曾志伟", ["zeng1"]), ("查良镛", ["zha1"]),
    ("区小姐", ["ou1"]), ("朴树", ["piao2"]), ("繁华", ["po2"]), ("尉迟恭", ["yu4", "chi2"]), ("万俟卨", ["mo4", "qi2"]),
    ("乐嘉", ["yue4"]), ("华佗", ["hua4"]), ("任盈盈", ["ren2"]), ("盖聂", ["ge3"]), ("缪杰", ["miao4"]),
    ("翟志刚", ["zhai2"]), ("覃明", ["qin2"]), ("种师道", ["chong2"]), ("员半千", ["yun4"]), ("召忽", ["shao4"]),
    ("尉缭", ["wei4"]),
])
def test_say_as_name_reads_the_surname(fe, name, surname):
    doc = parse_ssml(TENCENT.format(f'她叫<say-as interpret-as="name">{name}</say-as>。'))
    pinyin = fe.to_ids(doc.text, doc.spans).pinyin
    assert pinyin[2:2 + len(surname)] == surname, pinyin


def test_say_as_name_reads_each_name_and_leaves_other_text_alone(fe):
    doc = parse_ssml(ALIYUN.format('<say-as interpret-as="name">单田芳、曾志伟</say-as>的订单'))
    pinyin = fe.to_ids(doc.text, doc.spans).pinyin
    assert pinyin[0] == "shan4" and pinyin[3] == "zeng1"
    assert pinyin[-2:] == ["ding4", "dan1"]  # 订单 outside the name keeps its reading
    plain = fe.to_ids("单田芳").pinyin
    assert plain[0] != "shan4"  # without the say-as the surname reading is not guessed here


@pytest.mark.parametrize("wrapper, body, pinyin", [
    (ALIYUN, '<phoneme alphabet="py" ph="cheng2 zhang3">成长</phoneme>', "cheng2 zhang3"),
    (TENCENT, '<phoneme alphabet="py" ph="shan4">单</phoneme>', "shan4"),
    (AZURE, '<phoneme alphabet="sapi" ph="chao 2 yang 2">朝阳</phoneme>', "chao2 yang2"),
    (POLLY, '<phoneme alphabet="x-amazon-pinyin" ph="chao2yang2">朝阳</phoneme>', "chao2 yang2"),
    (GOOGLE, '<phoneme alphabet="pinyin" ph="cháo yáng">朝阳</phoneme>', "chao2 yang2"),
    (GOOGLE, '<phoneme py="zhang3">长</phoneme>', "zhang3"),
    (TENCENT, '<phoneme ph="chao2 yang2">朝阳</phoneme>', "chao2 yang2"),  # no alphabet: tone-numbered pinyin
])
def test_pinyin_alphabets_are_lexicon_entries(fe, wrapper, body, pinyin):
    doc = parse_ssml(wrapper.format("去" + body))
    assert doc.phonemes == [Phoneme(1, len(doc.text), pinyin)]
    assert not [c for c in codes(doc) if c == "ssml_phoneme_ignored"]
    word = doc.text[1:]
    assert fe.to_ids(doc.text, lexicon={word: pinyin}).pinyin[1:] == pinyin.split()


def test_a_bad_pinyin_is_refused_naming_it():
    with pytest.raises(SsmlError, match="chao7"):
        parse_ssml(ALIYUN.format('<phoneme alphabet="py" ph="chao7 yang2">朝阳</phoneme>'))


def test_aliyun_speak_rate_and_volume_apply_to_the_document():
    doc = parse_ssml('<speak rate="-125" volume="25">您好</speak>')
    assert doc.prosody == [ProsodyAt(0, pytest.approx(0.8), pytest.approx(20 * math.log10(0.5)))]
    assert codes(doc) == []
    fast = parse_ssml('<speak rate="500" volume="100"><prosody rate="-20%">慢</prosody>快</speak>')
    assert [(p.pos, round(p.speaking_rate, 3)) for p in fast.prosody] == [(0, 1.6), (1, 2.0)]  # prosody is relative to it
    assert fast.prosody[1].volume_db == pytest.approx(20 * math.log10(2))
    silent = parse_ssml('<speak volume="0">嘘</speak>')
    assert silent.prosody == [ProsodyAt(0, 1.0, None)]
    assert parse_ssml('<speak rate="0" volume="50">好</speak>').prosody == []  # the defaults change nothing


def test_aliyun_speak_rate_is_relative_to_the_turns_rate_and_clamped():
    doc = parse_ssml('<speak rate="300">好</speak>', base_speaking_rate=1.5)
    assert doc.prosody[0].speaking_rate == 2.0 and codes(doc) == ["ssml_rate_clamped"]


@pytest.mark.parametrize("attributes, code", [
    ('pitch="100"', "ssml_prosody_ignored"),
    ('voice="xiaoyun"', "ssml_attribute_ignored"),
    ('effect="robot"', "ssml_attribute_ignored"),
    ('bgm="http://x/a.wav" backgroundMusicVolume="30"', "ssml_attribute_ignored"),
    ('encodeType="mp3" sampleRate="16000"', "ssml_attribute_ignored"),
])
def test_aliyun_speak_attributes_without_an_effect_are_warned(attributes, code):
    doc = parse_ssml(f"<speak {attributes}>您好</speak>")
    assert doc.text == "您好" and codes(doc) == [code] and doc.prosody == []


def test_aliyun_bad_speak_volume_is_an_error_at_the_speak_tag():
    with pytest.raises(SsmlError) as err:
        parse_ssml('<speak volume="loud">好</speak>')
    assert (err.value.line, err.value.column) == (1, 1) and "0-100" in str(err.value)


def test_azure_bookmark_is_a_mark():
    doc = parse_ssml(AZURE.format('您好<bookmark mark="greeting"/>，请问'))
    assert doc.marks == [MarkAt(2, "greeting")]
    with pytest.raises(SsmlError, match="needs a mark"):
        parse_ssml(AZURE.format("<bookmark/>"))


# (wrapper, body, text content spoken, the warning)
SKIPPED = [
    (AZURE, '<mstts:express-as style="cheerful">好的</mstts:express-as>', "好的", "ssml_element_ignored"),
    (AZURE, '好<mstts:silence type="Sentenceboundary" value="200ms"/>的', "好的", "ssml_element_ignored"),
    (AZURE, '<mstts:backgroundaudio src="http://x/a.wav"/>好的', "好的", "ssml_element_ignored"),
    (AZURE, '<mstts:viseme type="redlips_front"/>好的', "好的", "ssml_element_ignored"),
    (AZURE, '<mstts:audioduration value="5s"/>好的', "好的", "ssml_element_ignored"),
    (AZURE, '<prosody pitch="+10%" contour="(0%,+20Hz)">好的</prosody>', "好的", "ssml_prosody_ignored"),
    (AZURE, '<phoneme alphabet="ipa" ph="xɑʊ">好</phoneme>的', "好的", "ssml_phoneme_ignored"),
    (AZURE, '<phoneme alphabet="ups" ph="H AU">好</phoneme>的', "好的", "ssml_phoneme_ignored"),
    (AZURE, '<lexicon uri="http://x/lex.xml"/>好的', "好的", "ssml_lexicon_ignored"),
    (GOOGLE, '<par><media begin="1s"><audio src="http://x/a.mp3">铃声</audio></media>'
             "<media><speak>好的</speak></media></par>", "铃声好的", "ssml_element_ignored"),
    (GOOGLE, "<seq><media><speak>好</speak></media><media><speak>的</speak></media></seq>", "好的",
     "ssml_element_ignored"),
    (GOOGLE, '<audio src="http://x/a.mp3">好的</audio>', "好的", "ssml_audio_not_played"),
    (GOOGLE, '<say-as interpret-as="expletive">好的</say-as>', "好的", "ssml_say_as_ignored"),
    (GOOGLE, '<say-as interpret-as="bleep">好的</say-as>', "好的", "ssml_say_as_ignored"),
    (GOOGLE, '<phoneme alphabet="x-sampa" ph="xAU">好</phoneme>的', "好的", "ssml_phoneme_ignored"),
    (GOOGLE, '<google:style name="lively" xmlns:google="https://cloud.google.com/text-to-speech">好的</google:style>',
     "好的", "ssml_element_ignored"),
    (GOOGLE, '<emphasis level="strong">好的</emphasis>', "好的", "ssml_emphasis_ignored"),
    (POLLY, '<amazon:effect name="whispered">好的</amazon:effect>', "好的", "ssml_element_ignored"),
    (POLLY, '<amazon:domain name="news">好的</amazon:domain>', "好的", "ssml_element_ignored"),
    (POLLY, '<amazon:emotion name="excited" intensity="medium">好的</amazon:emotion>', "好的", "ssml_element_ignored"),
    (POLLY, '<amazon:auto-breaths>好的</amazon:auto-breaths>', "好的", "ssml_element_ignored"),
    (POLLY, '好<amazon:breath duration="medium"/>的', "好的", "ssml_element_ignored"),
    (POLLY, '<prosody amazon:max-duration="2s">好的</prosody>', "好的", "ssml_prosody_ignored"),
    (POLLY, '<lang xml:lang="en-US">OK</lang>', "OK", "ssml_language_ignored"),
    (ALIYUN, '好<soundEvent src="http://x/a.wav"/>的', "好的", "ssml_audio_not_played"),
    (ALIYUN, '<emotion category="happy" intensity="1.0">好的</emotion>', "好的", "ssml_element_ignored"),
    (ALIYUN, '<say-as interpret-as="nick">好的</say-as>', "好的", "ssml_say_as_ignored"),
    (AZURE, '<say-as interpret-as="date" format="qq">11</say-as>', "11", "ssml_say_as_format"),
]


@pytest.mark.parametrize("wrapper, body, text, code", SKIPPED)
def test_skipped_constructs_warn_and_the_text_is_spoken(wrapper, body, text, code):
    doc = parse_ssml(wrapper.format(body))
    assert doc.text == text
    assert code in codes(doc)
    # nothing else: Azure's wrapper is a <voice>, Google's <media> may hold an <audio>
    assert set(codes(doc)) <= {code, "ssml_voice_ignored", "ssml_audio_not_played"}


def test_polly_effect_without_a_namespace_declaration_is_accepted_with_a_warning():
    doc = parse_ssml('<speak><amazon:effect name="whispered">悄悄话</amazon:effect>，<amazon:effect name="drc">'
                     "大声</amazon:effect></speak>")
    assert doc.text == "悄悄话，大声"
    assert codes(doc) == ["ssml_element_ignored"]  # once per element name
    assert "amazon: is not declared" in doc.warnings[0].message and "line 1, column 8" in doc.warnings[0].message


def test_a_prefix_declared_on_an_element_is_scoped_to_it():
    doc = parse_ssml('<speak><x:a xmlns:x="urn:vendor">一</x:a><x:b>二</x:b></speak>')
    assert doc.text == "一二"
    assert ["urn:vendor" in w.message for w in doc.warnings] == [True, False]
    assert "prefix x: is not declared" in doc.warnings[1].message


def test_ssml_namespace_under_a_prefix_is_ours():
    doc = parse_ssml('<ssml:speak xmlns:ssml="http://www.w3.org/2001/10/synthesis">您好<ssml:break time="300ms"/>'
                     "</ssml:speak>")
    assert doc.text == "您好" and doc.pause_ms_at(2) == 300 and codes(doc) == []


@pytest.mark.parametrize("document, line, column, fix", [
    ('<speak>\n<amazon:effect name="whispered">秘密</amazon:effec></speak>', 2, 37,
     "</amazon:effec> closes no open element; the innermost open element is <amazon:effect> (line 2, column 1)"),
    ('<speak><amazon:effect name=whispered>秘密</amazon:effect></speak>', 1, 28, "check the tag's syntax"),
    ('<speak><mstts:express-as style="x">好</speak>', 1, 39,
     "</speak> comes while <mstts:express-as> (line 1, column 8) is still open; close elements in the reverse order "
     "of opening them: </mstts:express-as> before </speak>"),
    ('<speak><amazon:effect>好', 1, 24, "still open: <amazon:effect> (line 1, column 8), <speak> (line 1, column 1)"),
    ('<speak><soundEvent src="a.wav">x</soundEvent></speak>', 1, 32, "<soundEvent> is empty"),
    ('<speak><par><speak>x</speak></par></speak>', 1, 13, "<speak> inside <speak>"),
])
def test_malformed_vendor_markup_is_refused_with_line_and_column(document, line, column, fix):
    with pytest.raises(SsmlError) as err:
        parse_ssml(document)
    assert (err.value.line, err.value.column) == (line, column), str(err.value)
    assert fix in str(err.value)


@pytest.mark.parametrize("document, closing, open_tag", [
    ('<speak><p><say-as interpret-as="digits">12</p></say-as></speak>', "</p>", "<say-as>"),
    ("<speak><s><prosody rate='slow'>好</s></prosody></speak>", "</s>", "<prosody>"),
    ("<speak><voice name='a'><s>好</voice></s></speak>", "</voice>", "<s>"),
])
def test_nesting_errors_name_the_documents_own_tags(document, closing, open_tag):
    with pytest.raises(SsmlError) as err:
        parse_ssml(document)
    message = str(err.value)
    assert closing in message and open_tag in message
    assert "</say-as> before </s>" not in message or (closing, open_tag) == ("</s>", "<say-as>")


def test_a_w3c_speak_with_schema_attributes_warns_nothing():
    doc = parse_ssml('<speak version="1.1" xmlns="http://www.w3.org/2001/10/synthesis" '
                     'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
                     'xsi:schemaLocation="http://www.w3.org/2001/10/synthesis synthesis.xsd" '
                     'xml:lang="zh-CN">您好</speak>')
    assert doc.text == "您好" and codes(doc) == []


def test_tencent_word_and_aliyun_w_are_spoken_without_a_warning():
    doc = parse_ssml(TENCENT.format("<word>银行</word><w>卡号</w>"))
    assert doc.text == "银行卡号" and codes(doc) == []


def test_a_speak_rate_that_is_no_rate_is_an_error_naming_aliyuns_range():
    with pytest.raises(SsmlError, match="-500 to 500") as err:
        parse_ssml('<speak rate="quick">好</speak>')
    assert (err.value.line, err.value.column) == (1, 1)
