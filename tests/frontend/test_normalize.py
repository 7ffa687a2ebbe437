"""Tests for Mandarin text normalization (models/frontend/normalize.py): golden cases, pauses, mapping, spans."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.frontend import verbalize as vb
from models.frontend.normalize import NormalizationError, NormalizedText, NormalizeOptions, Span, normalize

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CASES_TSV = HERE / "normalize_cases.tsv"
_SHARED_CANDIDATES = tuple(root / "shared" / "texts" / "zh_tn_cases.tsv" for root in (REPO, REPO.parent))

_PUNCT_RE = re.compile(r"[\s，。！？、,.!?;；:：]")
_OUTPUT_RE = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\U00020000-\U0003134f，。！？、]*")


def _options(spec: str) -> NormalizeOptions:
    kwargs: dict[str, object] = {}
    for part in filter(None, spec.split(";")):
        key, value = part.split("=", 1)
        if value in ("true", "false"):
            kwargs[key] = value == "true"
        elif key == "extra_words":
            kwargs[key] = tuple(tuple(pair.split(":", 1)) for pair in value.split(","))
        elif value.isdigit():
            kwargs[key] = int(value)
        else:
            kwargs[key] = value
    return NormalizeOptions(**kwargs)


def _read_cases(path: Path) -> list[tuple[str, list[str], str]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        rows.append((cols[0], cols[1].split("|"), cols[2] if len(cols) > 2 else ""))
    return rows


def _strip(text: str) -> str:
    return _PUNCT_RE.sub("", text)


def _check(text: str, accepted: list[str], spec: str = "") -> None:
    got = normalize(text, _options(spec)).text
    assert _strip(got) in {_strip(a) for a in accepted}, f"{text!r} → {got!r}, want one of {accepted}"


OWN_CASES = _read_cases(CASES_TSV)


@pytest.mark.parametrize(("text", "accepted", "spec"), OWN_CASES, ids=[f"{i}:{c[0]}" for i, c in enumerate(OWN_CASES)])
def test_golden_case(text: str, accepted: list[str], spec: str) -> None:
    _check(text, accepted, spec)


def test_case_table_is_large_and_contains_shared_rows() -> None:
    own = {(text, tuple(acc)) for text, acc, _ in OWN_CASES}
    assert len(OWN_CASES) >= 150 + 17
    shared = next((p for p in _SHARED_CANDIDATES if p.exists()), None)
    if shared is None:
        pytest.skip("shared/texts/zh_tn_cases.tsv not present; own table checked above")
    for text, accepted, _ in _read_cases(shared):
        assert (text, tuple(accepted)) in own, f"shared row {text!r} missing from {CASES_TSV.name}"


def test_shared_cases_pass() -> None:
    shared = next((p for p in _SHARED_CANDIDATES if p.exists()), None)
    if shared is None:
        pytest.skip("shared/texts/zh_tn_cases.tsv not present (its rows are copied into normalize_cases.tsv)")
    rows = _read_cases(shared)
    assert rows
    for text, accepted, spec in rows:
        _check(text, accepted, spec)


# ----- number readers -----

@pytest.mark.parametrize(
    ("digits", "liang", "expected"),
    [
        ("0", True, "零"), ("10", True, "十"), ("15", True, "十五"), ("20", True, "二十"), ("101", True, "一百零一"),
        ("110", True, "一百一十"), ("1005", True, "一千零五"), ("10010", True, "一万零一十"), ("100000", True, "十万"),
        ("120000", True, "十二万"), ("2000", True, "两千"), ("2000", False, "二千"), ("200", True, "两百"),
        ("20000", True, "两万"), ("22000", True, "两万两千"), ("12000", True, "一万两千"), ("220", True, "两百二十"),
        ("100000005", True, "一亿零五"), ("100200000", True, "一亿零二十万"), ("1000000000000000", True, "一千万亿"),
        ("007", True, "七"), ("12345678901234567", True, "一二三四五六七八九零一二三四五六七"),
    ],
)
def test_read_cardinal(digits: str, liang: bool, expected: str) -> None:
    assert vb.read_cardinal(digits, liang=liang) == expected


@pytest.mark.parametrize(
    ("digits", "groups"),
    [
        ("13501234567", [3, 4, 4]), ("4008208820", [3, 3, 4]), ("01064035547", [3, 4, 4]), ("075582345678", [4, 4, 4]),
        ("95588", [5]), ("1234567", [3, 4]), ("12345678", [4, 4]), ("2023110512", [3, 3, 4]), ("", []),
    ],
)
def test_digit_groups(digits: str, groups: list[int]) -> None:
    assert vb.digit_groups(digits) == groups
    assert sum(groups) == len(digits)


def test_amount_and_clock_readers() -> None:
    assert vb.read_amount_yuan("10", "05") == "十元零五分"
    assert vb.read_amount_yuan("0", "50") == "五角"
    assert vb.read_amount_yuan("0", "00") == "零元"
    assert vb.read_amount_yuan("1", "234") is None
    assert vb.read_clock(2, 0) == "两点"
    assert vb.read_clock(8, 0, 5) == "八点零分零五秒"
    assert vb.read_clock(3, 30, half_hour=True) == "三点半"


# ----- pause marks -----

@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("13501234567", "幺三五、零幺二三、四五六七"),
        ("+86 135 0123 4567", "加八六、幺三五、零幺二三、四五六七"),
        ("010-64035547", "零幺零、六四零三、五五四七"),
        ("(021)12345678", "零二幺、幺二三四、五六七八"),
        ("4008208820", "四零零、八二零、八八二零"),
        ("95588", "九五五八八"),
        ("身份证11010519491231002X", "身份证幺幺零幺零五、幺九四九幺二三幺、零零二叉"),
        ("卡号6222020200001234567", "卡号六二二二、零二零二、零零零零、幺二三四、五六七"),
        ("13501234567对吧", "幺三五、零幺二三、四五六七对吧"),
    ],
)
def test_digit_group_pauses(text: str, expected: str) -> None:
    assert normalize(text).text == expected


def test_punctuation_becomes_pause_marks() -> None:
    assert normalize("您好, 请稍候; 谢谢!").text == "您好，请稍候，谢谢！"
    assert normalize("是吗?好的。。").text == "是吗？好的。"
    assert normalize("，，开始…结束——").text == "开始，结束，"
    assert normalize("第一行\n第二行").text == "第一行。第二行"
    assert normalize("“你好”（测试）【提示】").text == "你好测试提示"


# ----- source_index -----

def test_source_index_per_digit_and_token_start() -> None:
    r = normalize("尾号1702，余额￥13.5")
    assert r.text == "尾号幺七零二，余额十三元五角"
    assert r.source_index[:6] == (0, 1, 2, 3, 4, 5)
    assert r.source_index[6] == 6  # the comma
    assert r.source_index[7:9] == (7, 8)
    assert set(r.source_index[9:]) == {9}  # an amount maps to the start of its token (the ￥)


def test_source_index_skips_removed_input() -> None:
    text = "😀<b>你</b>&amp;好"
    r = normalize(text)
    assert r.text == "你和好"
    assert [text[i] for i in r.source_index] == ["你", "&", "好"]


def test_source_index_of_phone_pauses_points_into_the_number() -> None:
    r = normalize("请拨打13501234567")
    assert len(r.source_index) == len(r.text)
    pause = r.text.index("、")
    assert r.source_index[pause] == 6  # the first digit of the second group
    assert r.text[pause + 1] == "零"


# ----- spans -----

@pytest.mark.parametrize(
    ("text", "span", "expected"),
    [
        ("金额3000", Span(2, 6, "digits"), "金额三零零零"),
        ("号码13501234567", Span(2, 13, "cardinal"), "号码一百三十五亿零一百二十三万四千五百六十七"),
        ("95588", Span(0, 5, "telephone"), "九五五八八"),
        ("请拨打01064035547", Span(3, 14, "telephone"), "请拨打零幺零、六四零三、五五四七"),
        ("账号ABC-123", Span(2, 9, "characters"), "账号诶比西杠幺二三"),
        ("王2", Span(0, 2, "verbatim"), "王二"),
        ("13.5", Span(0, 4, "amount"), "十三元五角"),
        ("金额是13.5美元", Span(3, 9, "amount"), "金额是十三点五美元"),
        ("11-22", Span(0, 5, "date"), "十一月二十二日"),
        ("1/3", Span(0, 3, "date"), "一月三日"),
        ("3:30", Span(0, 4, "time"), "三点三十分"),
        ("3:2", Span(0, 3, "score"), "三比二"),
        ("A1B2C3", Span(0, 6, "verification_code"), "诶幺比二西三"),
        ("11010519491231002X", Span(0, 18, "id_card"), "幺幺零幺零五、幺九四九幺二三幺、零零二叉"),
        ("6222 0202 0000 1234", Span(0, 19, "bank_card"), "六二二二、零二零二、零零零零、幺二三四"),
        ("200", Span(0, 3, "cardinal"), "两百"),
    ],
)
def test_span_overrides_guessing(text: str, span: Span, expected: str) -> None:
    result = normalize(text, spans=[span])
    assert result.text == expected
    assert result.warnings == ()


def test_span_generic_text_around_and_order() -> None:
    text = "订单3000已发货，请拨打95588"
    spans = [Span(13, 18, "cardinal"), Span(2, 6, "digits")]
    r = normalize(text, spans=spans)
    assert r.text == "订单三零零零已发货，请拨打九万五千五百八十八"
    assert list(r.source_index) == sorted(r.source_index)


def test_span_that_does_not_fit_its_kind_warns_and_reads_generically() -> None:
    r = normalize("hello", spans=[Span(0, 5, "cardinal")])
    assert r.text == "艾尺伊艾乐艾乐欧"
    assert any("cardinal" in w for w in r.warnings)


@pytest.mark.parametrize(
    "spans",
    [
        [Span(0, 2, "digits"), Span(1, 3, "digits")],
        [Span(0, 5, "digits")],
        [Span(-1, 2, "digits")],
        [Span(2, 2, "digits")],
        [Span(0, 2, "no_such_kind")],
    ],
)
def test_bad_spans_raise(spans: list[Span]) -> None:
    with pytest.raises(NormalizationError):
        normalize("123", spans=spans)


# ----- options -----

def test_one_as_yao_option() -> None:
    assert normalize("尾号1101").text == "尾号幺幺零幺"
    assert normalize("尾号1101", NormalizeOptions(one_as_yao=False)).text == "尾号一一零一"
    # cardinals, years and decimals never use 幺
    assert normalize("11个，2011年，1.1").text == "十一个，二零一一年，一点一"


def test_other_options() -> None:
    assert normalize("11010519491231002X", NormalizeOptions(letter_x="艾克斯")).text.endswith("零零二艾克斯")
    assert normalize("￥13.5", NormalizeOptions(amount_style="dian")).text == "十三点五元"
    assert normalize("3:30", NormalizeOptions(half_hour=True)).text == "三点半"
    assert normalize("2个人，2000块", NormalizeOptions(two_as_liang=False)).text == "二个人，二千块"
    assert normalize("5GB", NormalizeOptions(data_units_spelled=True)).text == "五吉比"
    assert normalize("+86 13501234567", NormalizeOptions(read_country_code=False)).text == "幺三五、零幺二三、四五六七"
    assert normalize("验证码123456", NormalizeOptions(code_group_size=3)).text == "验证码幺二三、四五六"
    assert normalize("打开Voxpool", NormalizeOptions(extra_words={"voxpool": "沃克斯普尔"})).text == "打开沃克斯普尔"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"amount_style": "rmb"},
        {"letter_x": "X"},
        {"code_group_size": -1},
        {"extra_words": (("中文", "中文"),)},
        {"extra_words": (("word", "word"),)},
    ],
)
def test_bad_options_raise(kwargs: dict[str, object]) -> None:
    with pytest.raises(NormalizationError):
        NormalizeOptions(**kwargs)


# ----- cleanup and warnings -----

def test_removed_input_is_reported_with_input_indices() -> None:
    r = normalize("你好😀👍🏻<break time='1s'/>世界\u200b\x07！§")
    assert r.text == "你好世界！"
    assert r.warnings == (
        "removed markup \"<break time='1s'/>\" at 5",
        "removed emoji at 2-4",
        "removed control or zero-width character at 25-26",
        "skipped unsupported character '§' (U+00A7) at 28",
    )


def test_full_width_and_whitespace() -> None:
    assert normalize("ＡＢＣ１２３，").text == "诶比西幺二三，"
    assert normalize("你 好\u3000世界").text == "你好世界"
    assert normalize("135 0123 4567").text == "幺三五、零幺二三、四五六七"
    assert normalize("").text == ""
    assert normalize("   ").source_index == ()


def test_rejects_non_str() -> None:
    with pytest.raises(NormalizationError):
        normalize(123)  # type: ignore[arg-type]


def test_frontend_does_not_import_torch() -> None:
    code = (
        "import sys; from models.frontend.normalize import normalize; normalize('测试123'); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----- fuzz -----

_ALPHABET = st.one_of(
    st.characters(),
    st.sampled_from(list("0123456789-+.,:/%￥$元块个年月日号 ()<>&;#*@abcXGBkm℃°第共验证码电话尾号—~～…。，！？、\n")),
)


def _check_invariants(text: str, result: NormalizedText) -> None:
    assert _OUTPUT_RE.fullmatch(result.text), result.text
    assert len(result.source_index) == len(result.text)
    assert all(0 <= i < len(text) for i in result.source_index)
    assert list(result.source_index) == sorted(result.source_index)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(_ALPHABET, max_size=80))
def test_fuzz_never_raises_and_keeps_invariants(text: str) -> None:
    result = normalize(text)
    _check_invariants(text, result)
    assert normalize(result.text).text == result.text  # Hanzi + pause marks are a fixed point


@st.composite
def _text_with_spans(draw: st.DrawFn) -> tuple[str, list[Span]]:
    text = draw(st.text(_ALPHABET, min_size=1, max_size=40))
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=6))))
    kinds = sorted(("telephone", "digits", "cardinal", "amount", "date", "time", "score", "verification_code",
                    "id_card", "bank_card", "characters", "verbatim"))
    spans = [Span(a, b, draw(st.sampled_from(kinds))) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if a < b]
    return text, spans


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_text_with_spans(), st.booleans(), st.sampled_from(["yuan_jiao_fen", "dian"]))
def test_fuzz_with_spans_and_options(case: tuple[str, list[Span]], yao: bool, style: str) -> None:
    text, spans = case
    result = normalize(text, NormalizeOptions(one_as_yao=yao, amount_style=style, half_hour=yao), spans)
    _check_invariants(text, result)
