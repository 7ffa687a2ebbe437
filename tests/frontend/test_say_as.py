"""The span readers SSML's extra say-as classes map onto: name, address, fraction, measure, duration, ordered dates."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.frontend import MandarinFrontend
from models.frontend.normalize import SPAN_KINDS, Span, normalize
from models.frontend.pipeline import ORIGIN_SAY_AS
from models.frontend.surnames import COMPOUND_SURNAMES, SURNAME_READINGS, surname_reading
from models.frontend.symbols import parse_tone3


def read(text: str, kind: str) -> str:
    result = normalize(text, spans=[Span(0, len(text), kind)])
    assert not result.warnings, result.warnings
    return result.text


@pytest.mark.parametrize("text, reading", [
    ("3/4", "四分之三"), ("1/3", "三分之一"), ("11/22", "二十二分之十一"), ("1 1/2", "一又二分之一"), ("2又3/5", "二又五分之三"),
    ("-3/4", "负四分之三"),
])
def test_fraction_is_never_a_date(text, reading):
    assert read(text, "fraction") == reading
    if text == "11/22":
        assert normalize(text).text == "十一月二十二日"  # what the generic rules make of it


def test_a_zero_denominator_falls_back_with_a_warning():
    result = normalize("1/0", spans=[Span(0, 3, "fraction")])
    assert result.warnings and "no fraction found" in result.warnings[0]


@pytest.mark.parametrize("text, reading", [
    ("5kg", "五公斤"), ("2kg", "两公斤"), ("2 feet", "两英尺"), ("12.5km", "十二点五公里"), ("1/2inch", "二分之一英寸"),
    ("-3°C", "零下三摄氏度"), ("2°C", "二摄氏度"), ("1234", "一千二百三十四"), ("3 pounds", "三磅"), ("100 km/h", "一百公里每小时"),
    ("50 percent", "百分之五十"), ("5公斤", "五公斤"),
])
def test_measure_reads_the_number_with_its_unit(text, reading):
    assert read(text, "measure") == reading


@pytest.mark.parametrize("text, kind, reading", [
    ("1:30", "duration", "一分钟三十秒"), ("1:02:05", "duration", "一小时两分钟五秒"), ("1:30", "duration_hm", "一小时三十分钟"),
    ("0:45", "duration_ms", "四十五秒"), ("0:00", "duration_ms", "零秒"), ("1:00:00", "duration_hms", "一小时"),
    ("1h30m", "duration", "一小时三十分钟"), ("90s", "duration", "九十秒"), ("1'21\"", "duration", "一分钟二十一秒"),
    ("2 hours", "duration", "两小时"),
])
def test_duration_reads_hours_minutes_seconds(text, kind, reading):
    assert read(text, kind) == reading


@pytest.mark.parametrize("text, order, reading", [
    ("11/22/2026", "mdy", "二零二六年十一月二十二日"), ("22/11/2026", "dmy", "二零二六年十一月二十二日"),
    ("20261122", "ymd", "二零二六年十一月二十二日"), ("11222026", "mdy", "二零二六年十一月二十二日"),
    ("2026-22-11", "ydm", "二零二六年十一月二十二日"), ("2026.11", "ym", "二零二六年十一月"), ("11/2026", "my", "二零二六年十一月"),
    ("11-22", "md", "十一月二十二日"), ("22/11", "dm", "十一月二十二日"), ("2026", "y", "二零二六年"), ("11", "m", "十一月"),
    ("22", "d", "二十二日"), ("2026年11月22日", "ymd", "二零二六年十一月二十二日"),
])
def test_dates_in_a_given_field_order_read_year_month_day(text, order, reading):
    assert read(text, f"date_{order}") == reading


def test_a_date_that_does_not_fit_its_order_falls_back_with_a_warning():
    result = normalize("13/22/2026", spans=[Span(0, 10, "date_mdy")])
    assert "no date_mdy found" in result.warnings[0]


@pytest.mark.parametrize("text, reading", [
    ("深南大道10000号3单元304", "深南大道一万号三单元三零四"), ("3栋2单元301室", "三栋二单元三零幺室"), ("3-2-301", "三杠二杠三零幺"),
    ("朝阳路22号", "朝阳路二十二号"), ("2号楼", "二号楼"),
])
def test_address_numbers(text, reading):
    assert read(text, "address") == reading


def test_name_carries_surname_readings_to_the_pinyin():
    result = normalize("请单田芳和尉迟恭", spans=[Span(1, 4, "name"), Span(5, 8, "name")])
    assert result.text == "请单田芳和尉迟恭"
    assert result.readings == ((1, "shan4"), (5, "yu4"), (6, "chi2"))
    fe = MandarinFrontend()
    ids = fe.to_ids("请单田芳和尉迟恭", [Span(1, 4, "name"), Span(5, 8, "name")])
    assert ids.pinyin[1] == "shan4" and ids.pinyin[5:7] == ["yu4", "chi2"]
    explained = fe.explain("单田芳", [Span(0, 3, "name")]).format()
    assert ORIGIN_SAY_AS in explained


def test_a_name_reading_is_not_a_locked_word_third_tone_sandhi_still_applies():
    pinyin = MandarinFrontend().to_ids("盖小宝", [Span(0, 3, "name")]).pinyin
    assert pinyin[0] in ("ge3", "ge2") and pinyin[1:] == ["xiao2", "bao3"]


def test_the_surname_table_is_valid_pinyin_and_compounds_come_first():
    for syllable in [*SURNAME_READINGS.values(), *(s for pair in COMPOUND_SURNAMES.values() for s in pair)]:
        parse_tone3(syllable)
    assert surname_reading("尉迟恭") == ("yu4", "chi2") and surname_reading("尉缭") == ("wei4",)
    assert surname_reading("王明") == ()


def test_the_new_kinds_are_span_kinds():
    assert {"name", "address", "fraction", "measure", "duration", "date_mdy", "duration_ms"} <= SPAN_KINDS


NEW_KINDS = sorted(k for k in SPAN_KINDS
                   if k in ("name", "address", "fraction", "measure") or k.startswith(("date_", "duration")))
ALPHABET = "0123456789 /:-.'\"kmgshftinchlb°C年月日号室栋单曾尉迟好"


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(NEW_KINDS), text=st.text(alphabet=ALPHABET, min_size=1, max_size=24))
def test_any_text_in_a_new_span_is_read_without_digits_left(kind, text):
    result = normalize(text, spans=[Span(0, len(text), kind)])
    assert not any(c.isdigit() for c in result.text), (kind, text, result.text)
    assert list(result.source_index) == sorted(result.source_index)
    assert all(0 <= k < len(result.text) for k, _ in result.readings)
