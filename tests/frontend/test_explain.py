"""Per-character explanation of readings (MandarinFrontend.explain, `voxpool normalize --explain`)."""

from __future__ import annotations

import pytest

from models.frontend import FrontendError, FrontendOptions, MandarinFrontend, Span


@pytest.fixture(scope="module")
def fe() -> MandarinFrontend:
    return MandarinFrontend(FrontendOptions(lexicon={"朝阳": "chao2 yang2"}))


def _by_input(explanation, index: int):
    return next(c for c in explanation.chars if c.input_index == index)


def test_every_character_has_an_origin_and_spoken_readings_match_the_ids(fe: MandarinFrontend) -> None:
    text = "请到朝阳支行还款，单先生您得先处理一下。"
    ex = fe.explain(text)
    assert ex.error is None
    assert len(ex.chars) == len(ex.normalized)
    spoken = [c.syllable for c in ex.chars if c.syllable is not None]
    assert spoken == fe.to_ids(text).pinyin
    origins = {text[c.input_index]: c.origin for c in ex.chars}
    assert origins["朝"] == "lexicon"
    assert origins["还"] == "domain word list"
    assert origins["单"] == "context rule" and origins["得"] == "context rule"
    assert origins["处"] == "phrase dictionary"
    assert origins["，"] == "not spoken"


def test_sandhi_is_named_with_the_reading_before_it(fe: MandarinFrontend) -> None:
    ex = fe.explain("请您处理一下，我不去。")
    chu = _by_input(ex, 2)
    assert (chu.lexical, chu.syllable, chu.sandhi) == ("chu3", "chu2", "third-tone sandhi")
    yi = _by_input(ex, 4)
    assert (yi.lexical, yi.syllable, yi.sandhi) == ("yi1", "yi2", "一 sandhi")
    bu = _by_input(ex, 8)
    assert (bu.lexical, bu.syllable, bu.sandhi) == ("bu4", "bu2", "不 sandhi")
    assert _by_input(ex, 5).sandhi == ""


def test_normalized_and_span_characters_say_where_they_came_from(fe: MandarinFrontend) -> None:
    text = "验证码1234，请拨95588"
    ex = fe.explain(text, spans=[Span(3, 7, "digits")])
    assert {c.via for c in ex.chars if 3 <= c.input_index < 7} == {"span:digits"}
    assert {c.via for c in ex.chars if c.input_index >= 10} == {"normalizer"}
    assert _by_input(ex, 0).via == ""


def test_erhua_character_points_at_the_merged_syllable(fe: MandarinFrontend) -> None:
    ex = fe.explain("我们一会儿再聊。")
    er = next(c for c in ex.chars if c.char == "儿")
    assert er.syllable is None and er.origin.startswith("erhua")
    assert next(c for c in ex.chars if c.char == "会").syllable == "huir4"


def test_text_with_nothing_to_say_is_explained_not_raised(fe: MandarinFrontend) -> None:
    ex = fe.explain("😀\u200f")
    assert ex.error is not None and "nothing to say" in ex.error
    assert "error:" in ex.format()
    with pytest.raises(FrontendError):
        fe.explain("好", spans=[Span(0, 5, "digits")])


def test_format_has_one_line_per_character(fe: MandarinFrontend) -> None:
    ex = fe.explain("行长好。")
    lines = ex.format().splitlines()
    assert lines[2].startswith("pinyin:") and "hang2" in lines[2]
    assert len(lines) == 4 + len(ex.normalized)
    assert "行长" in lines[4] and "domain word list" in lines[4]


def test_cli_explain_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    from voxpool_cli.commands import main

    assert main(["normalize", "--explain", "您得先还款。"]) == 0
    out = capsys.readouterr().out
    assert "dei3" in out and "context rule" in out and "domain word list" in out
