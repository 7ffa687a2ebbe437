"""Prosody: word segmentation, prosodic words and phrases, marks between syllables, sil/eos placement."""

from __future__ import annotations

import logging

import pytest

from models.frontend import FrontendOptions, MandarinFrontend
from models.frontend.g2p import Word
from models.frontend.prosody import (
    Clause,
    WordSegmenter,
    assemble,
    digit_groups,
    group_phrases,
    group_prosodic_words,
    number_pieces,
    segment_run,
)


@pytest.fixture(scope="module")
def fe() -> MandarinFrontend:
    return MandarinFrontend()


def marked(fe: MandarinFrontend, text: str) -> str:
    return fe.to_ids(text).marked_pinyin


def test_comma_gives_3_and_sil_only_at_the_ends(fe: MandarinFrontend) -> None:
    r = fe.to_ids("您好，欢迎致电客户服务中心。")
    assert r.phones[0] == "sil" and r.phones[-2:] == ["sil", "eos"]
    assert r.phones.count("sil") == 2 and r.phones.count("eos") == 1
    assert r.phones[:7] == ["sil", "n", "in2", "#0", "h", "ao3", "#3"]
    assert r.marked_pinyin == "nin2 hao3 #3 huan1 ying2 #1 zhi4 dian4 #2 ke4 hu4 fu2 wu4 #1 zhong1 xin1"


def test_clause_marks_inside_a_segment_are_3_and_trailing_ones_vanish(fe: MandarinFrontend) -> None:
    # the normalizer maps ：；to ，; a sentence end inside the segment is a #3 too
    assert marked(fe, "您好：请稍候；谢谢。再见！") == "nin2 hao3 #3 qing3 shao1 hou4 #3 xie4 xie5 #3 zai4 jian4"
    assert marked(fe, "，，您好。。") == "nin2 hao3"


def test_short_pause_between_digit_groups_is_2(fe: MandarinFrontend) -> None:
    assert marked(fe, "请拨打13501234567") == (
        "qing3 bo1 da3 #1 yao1 san1 wu3 #2 ling2 yao1 er4 san1 #2 si4 wu3 liu4 qi1"
    )
    assert marked(fe, "苹果、香蕉") == "ping2 guo3 #2 xiang1 jiao1"


def test_syllables_inside_a_prosodic_word_are_separated_by_0(fe: MandarinFrontend) -> None:
    r = fe.to_ids("客户服务")
    assert r.phones == ["sil", "k", "e4", "#0", "h", "u4", "#0", "f", "u2", "#0", "^", "u4", "sil", "eos"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("尊敬的客户您好", "zun1 jing4 de5 #1 ke4 hu4 #1 nin2 hao3"),  # clitic 的 joins the word before it
        ("我很好", "wo3 hen2 hao3"),  # a run of one-syllable words becomes one prosodic word
        ("请按一转接人工客服", "qing3 an4 yi1 #1 zhuan3 jie1 #2 ren2 gong1 ke4 fu2"),
        ("请在二十五号之前完成缴费", "qing3 zai4 #1 er4 shi2 wu3 hao4 #2 zhi1 qian2 #1 wan2 cheng2 #1 jiao3 fei4"),
        ("三千二百五十元", "san1 qian1 #1 er4 bai2 wu3 shi2 yuan2"),  # number pieces, unit joins the number
    ],
)
def test_prosodic_words_and_phrases(fe: MandarinFrontend, text: str, expected: str) -> None:
    assert marked(fe, text) == expected


def test_phrase_length_option() -> None:
    long = MandarinFrontend(FrontendOptions(phrase_max_syllables=30))
    assert "#2" not in long.to_ids("您的快递已经到达小区门口的快递柜").marked_pinyin
    short = MandarinFrontend(FrontendOptions(phrase_max_syllables=4))
    assert short.to_ids("您的快递已经到达小区门口的快递柜").marked_pinyin.count("#2") >= 2


def test_digit_groups_and_number_pieces() -> None:
    assert digit_groups(3) == [3]
    assert digit_groups(5) == [5]
    assert digit_groups(6) == [3, 3]
    assert digit_groups(8) == [4, 4]
    assert digit_groups(11) == [3, 4, 4]
    assert digit_groups(18) == [3, 3, 4, 4, 4]
    assert number_pieces("三千二百五十") == ["三千", "二百五十"]
    assert number_pieces("一万两千八百七十六") == ["一万", "两千", "八百", "七十六"]
    assert number_pieces("二十五") == ["二十五"]


class _FakeSegmenter:
    """Word segmentation from a fixed list, to test the grouping rules without jieba."""

    def __init__(self, words: list[str]) -> None:
        self.words = words

    def cut(self, text: str) -> list[str]:
        out, pos = [], 0
        while pos < len(text):
            word = max((w for w in self.words if text.startswith(w, pos)), key=len, default=text[pos])
            out.append(word)
            pos += len(word)
        return out

    def is_word(self, text: str) -> bool:
        return text in self.words


def _grouped(words: list[str]) -> list[str]:
    ws = segment_run("".join(words), 0, _FakeSegmenter(words))  # type: ignore[arg-type]
    for w in ws:
        w.pinyin = ["a1"] * len(w.text)
        w.sources = [(w.start + k,) for k in range(len(w.text))]
    return ["".join(w.text for w in pw) for pw in group_prosodic_words(ws)]


@pytest.mark.parametrize(
    "words, groups",
    [
        (["您", "的", "账户"], ["您的", "账户"]),
        (["我", "也", "很", "好"], ["我也", "很好"]),
        (["我", "很", "好"], ["我很好"]),
        (["陪", "外孙"], ["陪外孙"]),
        (["请", "立即"], ["请立即"]),
        (["账户", "于", "今天下午"], ["账户于", "今天下午"]),
        (["发生", "了", "一笔"], ["发生了", "一笔"]),
        (["尾号", "幺七零二", "的"], ["尾号", "幺七零二的"]),
        (["为", "三千二百五十", "元"], ["为", "三千", "二百五十元"]),
    ],
)
def test_grouping_rules(words: list[str], groups: list[str]) -> None:
    assert _grouped(words) == groups


def test_assemble_marks_and_sources() -> None:
    w1 = Word("你好", 0, ["ni2", "hao3"], [(0,), (1,)])
    w2 = Word("玩儿", 3, ["wanr2"], [(3, 4)])
    w3 = Word("吧", 5, ["ba5"], [(5,)])
    seq = assemble([Clause([[[w1]]], "#3"), Clause([[[w2], [w3]]], None)])
    assert seq.phones == ["sil", "n", "i2", "#0", "h", "ao3", "#3", "^", "uan2", "er5", "#1", "b", "a5", "sil", "eos"]
    assert seq.sources == [None, 0, 0, None, 1, 1, None, 3, 3, 4, None, 5, 5, None, None]
    assert seq.marked_pinyin == "ni2 hao3 #3 wanr2 #1 ba5"
    phrases = group_phrases([[w1], [w2], [w3]], phrase_max_syllables=3)
    assert [len(p) for p in phrases] == [2, 1]


def test_jieba_initialises_once_quietly_with_a_cache(tmp_path, caplog, capfd) -> None:
    seg = WordSegmenter(cache_dir=tmp_path / "jieba")
    with caplog.at_level(logging.DEBUG):
        spent = seg.initialize()
    assert spent > 0 and seg.init_seconds == spent
    assert seg.initialize() == 0.0  # once
    assert list((tmp_path / "jieba").glob("jieba*.cache")), "dictionary cache written to the cache folder"
    assert "Building prefix dict" not in capfd.readouterr().err
    assert not [r for r in caplog.records if r.name == "jieba" and r.levelno < logging.WARNING]
    assert seg.cut("欢迎致电客户服务中心") == ["欢迎", "致电", "客户服务", "中心"]
    assert seg.is_word("客户") and not seg.is_word("户服")
