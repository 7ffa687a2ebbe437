"""The whole text → ids path: known phone strings, the voice's reference ids, id_source, dry run, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.frontend import (
    EOS_ID,
    SIL_ID,
    SYMBOL_TO_ID,
    FrontendError,
    FrontendOptions,
    MandarinFrontend,
    NormalizeOptions,
    Span,
)
from models.frontend.pipeline import DryRun

TEXTS = Path(__file__).resolve().parents[2] / "bench" / "texts" / "callcenter_zh.tsv"
_MARK_IDS = {SYMBOL_TO_ID[m] for m in ("#0", "#1", "#2", "#3")}


@pytest.fixture(scope="module")
def fe() -> MandarinFrontend:
    return MandarinFrontend()


def _callcenter_sentences() -> list[str]:
    if TEXTS.exists():
        rows = [line.rstrip("\n").split("\t") for line in TEXTS.read_text(encoding="utf-8").splitlines()]
        return [r[2] for r in rows if len(r) >= 3 and not r[0].startswith("#")]
    from bench.frontend_latency import BUILTIN_SENTENCES

    return list(BUILTIN_SENTENCES)


def test_known_sentence_phones(fe: MandarinFrontend) -> None:
    r = fe.to_ids("您好，欢迎致电客户服务中心，请问有什么可以帮您？")
    assert " ".join(r.phones) == (
        "sil n in2 #0 h ao3 #3 h uan1 #0 ^ ing2 #1 zh iii4 #0 d ian4 #2 k e4 #0 h u4 #0 f u2 #0 ^ u4 #1 zh ong1 "
        "#0 x in1 #3 q ing3 #0 ^ uen4 #1 ^ iou3 #0 sh en2 #0 m e5 #1 k e2 #0 ^ i3 #2 b ang1 #0 n in2 sil eos"
    )
    assert len(r.ids) == 65
    assert r.ids[0] == SIL_ID and r.ids[-1] == EOS_ID
    assert r.ids[6] == SYMBOL_TO_ID["#3"]
    assert r.pinyin[:2] == ["nin2", "hao3"]


@pytest.mark.parametrize(
    "seg, text, sandhi",
    [
        (0, "您好，", True),
        (1, "欢迎致电客户服务中心，", True),
        (2, "请问有什么可以帮您？", False),  # the reference frontend has no sandhi: 可以 stays ke3 yi3
    ],
)
def test_ids_match_the_voice_reference_frontend(baker_fixtures: Path, seg: int, text: str, sandhi: bool) -> None:
    fe = MandarinFrontend(FrontendOptions(tone_sandhi=sandhi))
    ref = np.load(baker_fixtures / f"seg{seg}_ids.npy").reshape(-1).tolist()
    ours = [SYMBOL_TO_ID["#0"] if i in _MARK_IDS else i for i in fe.to_ids(text).ids]
    assert ours == ref


def test_sandhi_is_the_only_difference_from_the_reference(baker_fixtures: Path, fe: MandarinFrontend) -> None:
    ref = np.load(baker_fixtures / "seg2_ids.npy").reshape(-1).tolist()
    ours = [SYMBOL_TO_ID["#0"] if i in _MARK_IDS else i for i in fe.to_ids("请问有什么可以帮您？").ids]
    diff = [(k, a, b) for k, (a, b) in enumerate(zip(ref, ours)) if a != b]
    assert len(ref) == len(ours)
    assert diff == [(17, SYMBOL_TO_ID["e3"], SYMBOL_TO_ID["e2"])]  # 可 ke3 → ke2 before 以 yi3


def test_every_callcenter_sentence_gives_valid_ids(fe: MandarinFrontend) -> None:
    sentences = _callcenter_sentences()
    assert len(sentences) >= 10
    for text in sentences:
        r = fe.to_ids(text)
        assert r.ids[0] == SIL_ID and r.ids[-2:] == [SIL_ID, EOS_ID]
        assert all(0 < i < len(SYMBOL_TO_ID) for i in r.ids), text
        assert r.ids.count(SIL_ID) == 2
        # no two marks in a row, no mark next to sil
        for a, b in zip(r.ids, r.ids[1:]):
            assert not (a in _MARK_IDS and b in _MARK_IDS), text
            assert not ({a, b} & {SIL_ID} and {a, b} & _MARK_IDS), text
        assert len(r.ids) == len(r.phones) == len(r.id_source)
        assert r.warnings == (), (text, r.warnings)


def test_id_source_is_consistent(fe: MandarinFrontend) -> None:
    text = "您好，请拨打13501234567，一会儿见！"
    r = fe.to_ids(text)
    symbols = [p for p in r.phones]
    # sil, eos and marks have no source; every phone of a syllable has one
    for sym, src in zip(symbols, r.id_source):
        if sym in ("sil", "eos") or sym.startswith("#"):
            assert src is None
        else:
            assert src is not None and 0 <= src < len(text)
    sources = [s for s in r.id_source if s is not None]
    assert sources == sorted(sources), "monotonic: ids are spoken in text order"
    # the digits map back to the digits of the input
    digit_sources = {s for s, p in zip(r.id_source, r.phones) if s is not None and text[s].isdigit()}
    assert digit_sources == set(range(text.index("1"), text.index("1") + 11))
    # erhua: er5 comes from 儿, the rest of the syllable from 会
    k = r.phones.index("er5")
    assert text[r.id_source[k]] == "儿" and text[r.id_source[k - 1]] == "会"
    assert r.spoken_chars(0) == 0
    assert r.spoken_chars(len(r.ids)) == text.index("见") + 1
    assert r.spoken_chars(6) == text.index("好") + 1


def test_dry_run_prints_exactly_three_lines(fe: MandarinFrontend) -> None:
    dry = fe.dry_run("您好，请按1。")
    assert isinstance(dry, DryRun)
    lines = dry.format().split("\n")
    assert lines == [
        "您好，请按一。",
        "nin2 hao3 #3 qing3 an4 yi1",
        " ".join(str(i) for i in dry.result.ids),
    ]
    assert lines[2].split()[0] == str(SIL_ID) and lines[2].split()[-1] == str(EOS_ID)


def test_spans_and_normalize_options_reach_the_normalizer() -> None:
    fe = MandarinFrontend(FrontendOptions(normalize=NormalizeOptions(one_as_yao=False)))
    assert fe.to_ids("请拨打13501234567").pinyin[3:6] == ["yi1", "san1", "wu3"]
    fe = MandarinFrontend()
    r = fe.to_ids("编号123", spans=[Span(2, 5, "digits")])
    assert r.pinyin[2:] == ["yao1", "er4", "san1"]


@pytest.mark.parametrize("text", ["", "   ", "😀👍", "。，！", "\u200b\u200d"])
def test_nothing_to_say_is_a_typed_error(fe: MandarinFrontend, text: str) -> None:
    with pytest.raises(FrontendError, match="nothing to say"):
        fe.to_ids(text)


def test_bad_spans_become_a_frontend_error(fe: MandarinFrontend) -> None:
    with pytest.raises(FrontendError, match="cannot normalize"):
        fe.to_ids("您好", spans=[Span(0, 10, "digits")])


def test_non_str_is_rejected(fe: MandarinFrontend) -> None:
    with pytest.raises(FrontendError):
        fe.to_ids(b"abc")  # type: ignore[arg-type]


def test_unknown_characters_are_skipped_with_a_warning(fe: MandarinFrontend) -> None:
    r = fe.to_ids("您好Привет世界")
    assert r.pinyin == ["nin2", "hao3", "shi4", "jie4"]
    assert any("Привет" in w or "skipped" in w or "removed" in w for w in r.warnings)


def test_mixed_scripts(fe: MandarinFrontend) -> None:
    text = "VIP客户请按1，Hello世界"
    r = fe.to_ids(text)
    assert not any(c.isascii() and c.isalpha() for c in r.normalized.text)  # letters are read out in Hanzi
    assert r.id_source[1] == 0  # the first syllable is spoken for the "V"
    assert {text[s] for s in r.id_source if s is not None} >= set("VIP客户请按1Hello世界")
    assert "#3" in r.phones and r.pinyin[-2:] == ["shi4", "jie4"]


def test_options_are_validated() -> None:
    with pytest.raises(FrontendError):
        FrontendOptions(phrase_max_syllables=1)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=40))
def test_never_an_uncaught_exception(text: str) -> None:
    fe = MandarinFrontend()
    try:
        r = fe.to_ids(text)
    except FrontendError:
        return
    assert r.ids[0] == SIL_ID and r.ids[-1] == EOS_ID
    assert all(0 <= i < len(SYMBOL_TO_ID) for i in r.ids)
    assert all(s is None or 0 <= s < len(text) for s in r.id_source)


_IVR_ALPHABET = list("您好一不儿玩会1234567890０.,，。、：；！？%￥元年月日号 aXZ")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from(_IVR_ALPHABET), max_size=40))
def test_never_an_uncaught_exception_on_call_center_like_text(text: str) -> None:
    fe = MandarinFrontend()
    try:
        r = fe.to_ids(text)
    except FrontendError:
        return
    assert len(r.ids) == len(r.id_source) == len(r.phones)


def test_frontend_never_imports_torch() -> None:
    code = "import sys, models.frontend, bench.frontend_latency; m = models.frontend.MandarinFrontend(); " \
        "m.to_ids('您好'); sys.exit(1 if 'torch' in sys.modules else 0)"
    repo = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=repo, timeout=60).returncode == 0
