"""Readers for explicit say-as spans (telephone, digits, cardinal, amount, date, time, codes, cards, spelling)."""

from __future__ import annotations

import re
from collections.abc import Callable

from models.frontend import verbalize as vb
from models.frontend.tn_core import Num, is_digit
from models.frontend.tn_rules import Scanner, pieces
from models.frontend.tn_say_as import READERS as SAY_AS_READERS
from models.frontend.tn_tables import (
    HANZI_CHAR_RE,
    CURRENCY_PREFIX_RE,
    CURRENCY_PREFIXES,
    CURRENCY_SUFFIX_RE,
    CURRENCY_WORD_RE,
    PAUSE_MARKS,
    SPELL_SYMBOLS,
)

_PHONE_RE = re.compile(r"(?:\+ ?86|0086)?[- ]?[0-9(][0-9() -]*[0-9]|[0-9]")
_ALNUM_RE = re.compile(r"[0-9A-Za-z]+(?:[- .][0-9A-Za-z]+)*")
_NUMBER_RE = re.compile(r"[-−]?[0-9]")
_DATE_FULL_RE = re.compile(
    r"(?P<y>[0-9]{4}) ?[-/.年] ?(?P<m>[0-9]{1,2}) ?[-/.月] ?(?P<d>[0-9]{1,2})(?P<suffix> ?[日号])?"
)
_DATE_YM_RE = re.compile(r"(?P<y>[0-9]{4}) ?[-/.年] ?(?P<m>[0-9]{1,2})(?P<suffix> ?月)?")
_DATE_MD_RE = re.compile(r"(?P<m>[0-9]{1,2}) ?[-/.月] ?(?P<d>[0-9]{1,2})(?P<suffix> ?[日号])?")
_DATE_Y_RE = re.compile(r"(?P<y>[0-9]{4})(?P<suffix> ?年)?")
_TIME_RE = re.compile(
    r"(?P<h>[0-9]{1,2}) ?[:：点时] ?(?P<m>[0-9]{1,2})?(?: ?[:：分] ?(?P<s>[0-9]{1,2}) ?秒?)?分?"
    r"(?: ?(?P<ampm>[AaPp]\.?[Mm]\.?)(?![A-Za-z]))?"
)
_SCORE_RE = re.compile(r"(?P<a>[0-9]+) ?[:：比-] ?(?P<b>[0-9]+)")


def _telephone(sc: Scanner, start: int, end: int) -> bool:
    """Phone numbers digit by digit: +86 read as 加八六, groups as written or by the phone heuristic."""
    def read(m: re.Match[str]) -> bool:
        text = m.group()
        pos = m.start()
        cc = re.match(r"(?:\+ ?86|0086)[- ]?", text)
        if cc is not None and len(text) > cc.end():
            if sc.o.read_country_code:
                sc.em.text("加八六", pos)
                sc.em.pause("、", pos + cc.end())
            text, pos = text[cc.end():], pos + cc.end()
        sc.code_groups(text, pos, "telephone")
        return True

    return pieces(sc, start, end, _PHONE_RE, read)


def _digits(sc: Scanner, start: int, end: int) -> bool:
    """Every digit one by one (幺 per option), letters spelled, separators as short pauses; no grouping."""

    def read(m: re.Match[str]) -> bool:
        sc.digits(m.group(), m.start())
        return True

    return pieces(sc, start, end, _ALNUM_RE, read)


def _code(kind: str) -> Callable[[Scanner, int, int], bool]:
    """Reader for codes and cards: verification codes (no pauses unless code_group_size), ID 6-8-4, cards by 4."""
    def reader(sc: Scanner, start: int, end: int) -> bool:
        def read(m: re.Match[str]) -> bool:
            text = m.group()
            compact = re.sub(r"[- .]", "", text)
            if kind == "id_card":
                groups = {18: [6, 8, 4], 15: [6, 6, 3]}.get(len(compact)) or vb.digit_groups(compact)
                if compact == text:
                    sc.digits(text, m.start(), groups, sc.o.letter_x)
                else:
                    sc.digits(text, m.start(), None, sc.o.letter_x)
            elif kind == "bank_card" and compact != text:
                sc.digits(text, m.start())
            else:
                sc.code_groups(text, m.start(), kind)
            return True

        return pieces(sc, start, end, _ALNUM_RE, read)

    return reader


def _cardinal(sc: Scanner, start: int, end: int) -> bool:
    """Every number in the span as a cardinal or decimal (13501234567 → 一百三十五亿…)."""
    def read(m: re.Match[str]) -> bool:
        num = Num.parse(sc.s, m.start(), m.end())
        if num is None:
            return False
        sc.em.text(("负" if num.sign else "") + sc.quantity(num, ""), m.start())
        if num.end < m.end():
            sc.run(num.end, m.end())
        return True

    return pieces(sc, start, end, _NUMBER_TOKEN_RE, read)


_NUMBER_TOKEN_RE = re.compile(r"[-−]?[0-9][0-9,]*(?:\.[0-9]+)?")


def _amount(sc: Scanner, start: int, end: int) -> bool:
    """The first number of the span as an amount; currency from a symbol/code/word in the span, else 元."""
    s = sc.s
    m = _NUMBER_RE.search(s, start, end)
    num = Num.parse(s, m.start(), end) if m is not None else None
    if num is None:
        return False
    unit = "元"
    head_end = num.start
    for cm in CURRENCY_PREFIX_RE.finditer(s, start, num.end):
        if cm.end() == num.start:
            unit = CURRENCY_PREFIXES[cm.group("cur")]
            head_end = cm.start()
    if start < head_end:
        sc.run(start, head_end)
    j = num.end
    mult = _MULT_RE.match(s, j, end)
    mult_text = ""
    if mult is not None:
        mult_text, j = mult.group(), mult.end()
    word = CURRENCY_WORD_RE.match(s, j, end)
    code = CURRENCY_SUFFIX_RE.match(s, j, end)
    if word is not None and word.group() not in ("角", "毛", "分钱"):
        unit, j = word.group(), word.end()
        if unit == "块钱":
            unit, j = "块", j - 1
    elif code is not None:
        unit, j = CURRENCY_PREFIXES[code.group("cur")], code.end()
    sc.amount(num, unit, mult_text, head_end)
    if j < end:
        sc.run(j, end)
    return True


_MULT_RE = re.compile(r"[万亿千]")


def _date(sc: Scanner, start: int, end: int) -> bool:
    """Y-M-D, Y-M, M-D (also with / . 年月日) and Y as dates; 11-22 and 1/3 are always month/day here."""
    s = sc.s

    def read(m: re.Match[str]) -> bool:
        i = m.start()
        for pattern in (_DATE_FULL_RE, _DATE_YM_RE, _DATE_MD_RE, _DATE_Y_RE):
            d = pattern.match(s, i, m.end())
            if d is None:
                continue
            groups = d.groupdict()
            month = int(groups["m"]) if groups.get("m") else None
            day = int(groups["d"]) if groups.get("d") else None
            if (month is not None and not 1 <= month <= 12) or (day is not None and not 1 <= day <= 31):
                continue
            if groups.get("y"):
                sc.em.text(vb.read_year(groups["y"]) + "年", i)
            if month is not None:
                sc.em.text(vb.read_month_day(month, day), d.start("m"))
            if d.end() < m.end():
                sc.run(d.end(), m.end())
            return True
        return False

    return pieces(sc, start, end, _DATE_TOKEN_RE, read)


_DATE_TOKEN_RE = re.compile(r"[0-9][0-9 ./年月日号-]*")


def _time(sc: Scanner, start: int, end: int) -> bool:
    """H:MM[:SS] or H点M分 [am/pm] as a clock time, even where the generic rules would guess a score."""

    def read(m: re.Match[str]) -> bool:
        hour = int(m.group("h"))
        minute = int(m.group("m")) if m.group("m") else 0
        second = int(m.group("s")) if m.group("s") else None
        if hour > 24 or minute > 59 or (second is not None and second > 59):
            return False
        ampm = m.group("ampm")
        if ampm:
            sc.em.text("上午" if ampm[0] in "Aa" else "下午", m.start())
        sc.em.text(vb.read_clock(hour, minute, second, sc.o.half_hour), m.start())
        return True

    return pieces(sc, start, end, _TIME_RE, read)


def _score(sc: Scanner, start: int, end: int) -> bool:
    """a:b, a-b or a比b as a score (三比二)."""

    def read(m: re.Match[str]) -> bool:
        sc.em.text(vb.read_cardinal(m.group("a"), liang=False), m.start())
        sc.em.text("比" + vb.read_cardinal(m.group("b"), liang=False), m.start("b"))
        return True

    return pieces(sc, start, end, _SCORE_RE, read)


def _characters(sc: Scanner, start: int, end: int) -> bool:
    """Spell every character: digits, letter names, symbol names (@ 艾特, - 杠, _ 下划线), Hanzi as is."""
    s = sc.s
    for i in range(start, end):
        c = s[i]
        if c == " ":
            continue
        if is_digit(c) or (c.isascii() and c.isalpha()) or HANZI_CHAR_RE.match(c) or c in SPELL_SYMBOLS:
            sc.spell(c, i)
        else:
            sc.symbol(i, i + 1)
    return True


def _verbatim(sc: Scanner, start: int, end: int) -> bool:
    """Hanzi and pause punctuation pass through untouched; anything else is spelled as in _characters."""
    s = sc.s
    for i in range(start, end):
        c = s[i]
        if HANZI_CHAR_RE.match(c):
            sc.em.text(c, i)
        elif c in "，,。！!？?、；;：:\n":
            sc.em.pause(PAUSE_MARKS[c], i)
        else:
            _characters(sc, i, i + 1)
    return True


_READERS: dict[str, Callable[[Scanner, int, int], bool]] = {
    **SAY_AS_READERS,
    "telephone": _telephone,
    "digits": _digits,
    "cardinal": _cardinal,
    "amount": _amount,
    "date": _date,
    "time": _time,
    "score": _score,
    "verification_code": _code("code"),
    "id_card": _code("id_card"),
    "bank_card": _code("bank_card"),
    "characters": _characters,
    "verbatim": _verbatim,
}
#: Span kinds the dialog manager may send.
SPAN_KINDS = frozenset(_READERS)


def read_span(sc: Scanner, kind: str, start: int, end: int) -> None:
    """Read s[start:end] as ``kind``; when nothing in it fits the kind, read it generically with a warning."""
    before, warned = len(sc.em.chars), len(sc.em.warnings)
    found = _READERS[kind](sc, start, end)
    if not found:
        del sc.em.chars[before:]
        del sc.em.positions[before:]
        del sc.em.warnings[warned:]
        sc.em.warn(f"span {kind!r}: no {kind} found, read with the generic rules", start)
        sc.run(start, end)


__all__ = ["SPAN_KINDS", "pieces", "read_span"]
