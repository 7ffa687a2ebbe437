"""Any Unicode in, a reading or a clear in-band error out: the frontend never raises anything else."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.frontend import FrontendError, MandarinFrontend
from models.frontend.symbols import SYMBOL_TO_ID

FE = MandarinFrontend()

_NASTY = [
    "\u200f", "\u200e", "\u202e", "\u2066", "\u200b", "\u200d", "\ufeff", "\x00", "\x07", "\x1b", "\x7f", "\ud800",
    "\udfff", "😀", "👨‍👩‍👧", "🇨🇳", "\u0301", "\U000e0041", "\uffff", "\U0010ffff", "ﷺ", "𠀀", "㐀", "〇", "１２３",
    "①", "Ⅻ", "½", "²", "٣", "¥", "￥", "%", "‰", "℃", "\n", "\r\n", "\t", " ", "<b>", "&amp;", "&#xD800;",
]
_PIECES = st.one_of(
    st.text(min_size=0, max_size=40),  # any code point, surrogates included
    st.sampled_from(_NASTY),
    st.text(alphabet="行长重还得地着了为一不银行款您好请按", min_size=1, max_size=30),
    st.from_regex(r"[0-9]{1,20}(\.[0-9]{1,4})?%?", fullmatch=True),
    st.text(alphabet="abcXYZ-_/.@:", min_size=1, max_size=12),
)
TEXTS = st.lists(_PIECES, max_size=8).map("".join)


def _check(text: str) -> None:
    ex = FE.explain(text)
    assert isinstance(ex.format(), str)
    try:
        result = FE.to_ids(text)
    except FrontendError as exc:
        assert str(exc)
        assert ex.error is not None
        return
    assert ex.error is None
    assert result.ids and all(isinstance(i, int) and 0 <= i < len(SYMBOL_TO_ID) for i in result.ids)
    assert [c.syllable for c in ex.chars if c.syllable is not None] == result.pinyin


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_any_text_gives_a_reading_or_an_in_band_error(text: str) -> None:
    _check(text)


@pytest.mark.parametrize(
    "text",
    [
        "行" * 10_000,
        "1" * 10_000,
        "😀" * 10_000,
        "\u200f" * 10_000,
        "\ud800" * 10_000,
        "a" * 10_000,
        "。" * 10_000,
        ("请按1号键，" * 2_000),
        "مرحبا 您好 שלום Привет 안녕 こんにちは",
    ],
)
def test_long_runs_and_mixed_scripts(text: str) -> None:
    _check(text)
