"""Tone sandhi: third tone on word structure, 一 and 不, table-driven through the frontend and on explicit words."""

from __future__ import annotations

import pytest

from models.frontend import FrontendOptions, MandarinFrontend
from models.frontend.g2p import Word
from models.frontend.tone_sandhi import third_tone_sandhi, yi_bu_sandhi


@pytest.fixture(scope="module")
def fe() -> MandarinFrontend:
    return MandarinFrontend()


CASES = [
    # third tone: two syllables
    ("你好", "ni2 hao3"),
    ("很好", "hen2 hao3"),
    ("可以", "ke2 yi3"),
    ("所以", "suo2 yi3"),
    ("手表", "shou2 biao3"),
    ("老鼠", "lao2 shu3"),
    ("领导", "ling2 dao3"),
    ("五百", "wu2 bai3"),
    # third tone: chains resolved by word structure
    ("展览馆", "zhan2 lan2 guan3"),  # [展览]馆
    ("洗脸水", "xi2 lian2 shui3"),  # [洗脸]水
    ("纸老虎", "zhi3 lao2 hu3"),  # 纸[老虎]
    ("小老虎", "xiao3 lao2 hu3"),
    ("买雨伞", "mai3 yu2 san3"),
    ("我很好", "wo3 hen2 hao3"),  # 我[很好]
    ("我也很好", "wo2 ye3 hen2 hao3"),  # [我也][很好]
    ("我想买", "wo3 xiang2 mai3"),
    ("请你稍等", "qing2 ni3 shao1 deng3"),
    # 一
    ("一样", "yi2 yang4"),
    ("一个", "yi2 ge4"),
    ("一次", "yi2 ci4"),
    ("一定", "yi2 ding4"),
    ("一万", "yi2 wan4"),
    ("一天", "yi4 tian1"),
    ("一年", "yi4 nian2"),
    ("一直", "yi4 zhi2"),
    ("一起", "yi4 qi3"),
    ("一百", "yi4 bai3"),
    ("一千", "yi4 qian1"),
    ("第一", "di4 yi1"),  # ordinal
    ("统一", "tong3 yi1"),  # word-final
    ("唯一", "wei2 yi1"),
    ("万一", "wan4 yi1"),
    ("十一", "shi2 yi1"),  # numeral context
    ("零点一", "ling2 dian3 yi1"),
    ("一二三", "yi1 er4 san1"),
    ("一点五", "yi1 dian2 wu3"),
    ("一月", "yi1 yue4"),
    ("请按一", "qing3 an4 yi1"),  # naming the digit
    ("回复一", "hui2 fu4 yi1"),
    ("星期一", "xing1 qi1 yi1"),
    ("看一看", "kan4 yi5 kan4"),  # between a repeated verb
    ("试一试", "shi4 yi5 shi4"),
    ("一不小心", "yi2 bu4 xiao3 xin1"),  # 一 before the underlying 4th tone of 不
    ("一件一件", "yi2 jian4 yi2 jian4"),  # 一X一X: each 一 by the tone after it, never neutral
    ("一笔一笔", "yi4 bi3 yi4 bi3"),
    ("一单一单", "yi4 dan1 yi4 dan1"),  # even where jieba cuts 单一 as a word
    ("清点一下", "qing1 dian3 yi2 xia4"),  # 点 not after a numeral is no decimal point
    ("一两天", "yi4 liang3 tian1"),  # 一两 "one or two" is a count (两 is never a digit read out), not 一二三
    ("一月一日", "yi1 yue4 yi1 ri4"),  # the day of a date is named, like 一号
    ("对不起", "dui4 bu5 qi3"),  # domain word list: 不 is neutral in 对不起 (pypinyin says bu4)
    # 不
    ("不是", "bu2 shi4"),
    ("不对", "bu2 dui4"),
    ("不要", "bu2 yao4"),
    ("不好", "bu4 hao3"),
    ("不行", "bu4 xing2"),
    ("不来", "bu4 lai2"),
    ("好不好", "hao3 bu5 hao3"),  # A不A
    ("是不是", "shi4 bu5 shi4"),
    ("要不要", "yao4 bu5 yao4"),
    ("差不多", "cha4 bu5 duo1"),  # neutral in pypinyin's phrase dictionary
    ("不一样", "bu4 yi2 yang4"),
    # digits keep citation tones; 幺 is untouched
    ("幺三五", "yao1 san1 wu3"),
    ("五五五", "wu3 wu3 wu3"),
]


def test_table_has_enough_cases() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("text, expected", CASES)
def test_sandhi_table(fe: MandarinFrontend, text: str, expected: str) -> None:
    assert " ".join(fe.to_ids(text).pinyin) == expected


def test_sandhi_can_be_switched_off() -> None:
    plain = MandarinFrontend(FrontendOptions(tone_sandhi=False))
    assert " ".join(plain.to_ids("你好").pinyin) == "ni3 hao3"
    assert " ".join(plain.to_ids("展览馆").pinyin) == "zhan3 lan3 guan3"


def test_third_tone_does_not_cross_a_pause(fe: MandarinFrontend) -> None:
    assert fe.to_ids("好，好").pinyin == ["hao3", "hao3"]


# -- the functions on explicit words (no jieba) ---------------------------------------------------


def _words(*spec: tuple[str, str]) -> list[Word]:
    out, pos = [], 0
    for text, reading in spec:
        syls = reading.split()
        out.append(Word(text, pos, syls, [(pos + k,) for k in range(len(syls))]))
        pos += len(text)
    return out


def _pinyin(words: list[Word]) -> str:
    return " ".join(s for w in words for s in w.pinyin)


@pytest.mark.parametrize(
    "words, dictionary, expected",
    [
        ([("展览馆", "zhan3 lan3 guan3")], {"展览"}, "zhan2 lan2 guan3"),
        ([("纸老虎", "zhi3 lao3 hu3")], {"老虎"}, "zhi3 lao2 hu3"),
        ([("ABC", "zhi3 lao3 hu3")], set(), "zhi3 lao2 hu3"),  # no dictionary help: right-branching
        ([("我", "wo3"), ("很好", "hen3 hao3")], set(), "wo3 hen2 hao3"),
        ([("我也", "wo3 ye3"), ("很好", "hen3 hao3")], set(), "wo2 ye3 hen2 hao3"),
        ([("展览", "zhan3 lan3"), ("馆", "guan3")], set(), "zhan2 lan2 guan3"),
        ([("好", "hao3"), ("的", "de5")], set(), "hao3 de5"),
    ],
)
def test_third_tone_structure(words, dictionary, expected) -> None:
    ws = _words(*words)
    third_tone_sandhi(ws, lambda s: s in dictionary)
    assert _pinyin(ws) == expected


def test_third_tone_leaves_locked_and_digit_words_alone() -> None:
    ws = _words(("你好", "ni3 hao3"))
    ws[0].locked = True
    third_tone_sandhi(ws, lambda s: False)
    assert _pinyin(ws) == "ni3 hao3"
    ws = _words(("五五", "wu3 wu3"), ("好", "hao3"))
    ws[0].digits = True
    third_tone_sandhi(ws, lambda s: False)
    assert _pinyin(ws) == "wu3 wu3 hao3"  # a digit string keeps its tones, even before another 3rd tone
    ws = _words(("我", "wo3"), ("好", "hao3"))
    ws[1].locked = True  # a locked word is still context for the word before it
    third_tone_sandhi(ws, lambda s: False)
    assert _pinyin(ws) == "wo2 hao3"


@pytest.mark.parametrize(
    "words, expected",
    [
        ([("一", "yi1"), ("样", "yang4")], "yi2 yang4"),
        ([("一", "yi1"), ("天", "tian1")], "yi4 tian1"),
        ([("按", "an4"), ("一", "yi1"), ("转接", "zhuan3 jie1")], "an4 yi1 zhuan3 jie1"),
        ([("看", "kan4"), ("一", "yi1"), ("看", "kan4")], "kan4 yi5 kan4"),
        ([("一", "yao1"), ("天", "tian1")], "yao1 tian1"),  # the 幺 reading is never touched
        ([("不", "bu4"), ("是", "shi4")], "bu2 shi4"),
        ([("好", "hao3"), ("不", "bu4"), ("好", "hao3")], "hao3 bu5 hao3"),
        ([("不", "bu4")], "bu4"),
        ([("一", "yi1")], "yi1"),
    ],
)
def test_yi_bu_on_words(words, expected) -> None:
    ws = _words(*words)
    yi_bu_sandhi(ws)
    assert _pinyin(ws) == expected


def test_yi_in_digit_or_locked_words_is_untouched() -> None:
    ws = _words(("一三五", "yi1 san1 wu3"))
    ws[0].digits = True
    yi_bu_sandhi(ws)
    assert _pinyin(ws) == "yi1 san1 wu3"
    ws = _words(("一样", "yi1 yang4"))
    ws[0].locked = True
    yi_bu_sandhi(ws)
    assert _pinyin(ws) == "yi1 yang4"
