"""Number readers for Mandarin text normalization: digit strings, cardinals, decimals, amounts, dates, times."""

from __future__ import annotations

DIGIT_READINGS = "零一二三四五六七八九"
_SECTION_UNITS = ("", "万", "亿", "万亿")
_PLACES = ("千", "百", "十", "")
#: Longest integer read as a cardinal (below 10^16); longer ones are read digit by digit.
MAX_CARDINAL_DIGITS = 16


def digit_reading(ch: str, one_as_yao: bool) -> str:
    """One ASCII digit → its Hanzi reading (1 → 幺 when ``one_as_yao``)."""
    if ch == "1" and one_as_yao:
        return "幺"
    return DIGIT_READINGS[ord(ch) - 48]


def read_digits(digits: str, one_as_yao: bool = False) -> str:
    """Read an ASCII digit string one digit at a time: "2026" → "二零二六"."""
    return "".join(digit_reading(c, one_as_yao) for c in digits)


def digit_groups(digits: str) -> list[int]:
    """Pause grouping (group lengths) for a digit string read one digit at a time.

    Mobile numbers 3-4-4; 400/800 numbers 3-3-4; landlines starting with 0: area code (3 digits for 010 and
    02x, else 4) then the rest; up to 6 digits: one group; longer: groups of 4 with groups of 3 in front
    (7 → 3-4, 8 → 4-4, 9 → 3-3-3, 10 → 3-3-4, 12 → 4-4-4).
    """
    n = len(digits)
    if n == 11 and digits[0] == "1" and digits[1] in "3456789":
        return [3, 4, 4]
    if n == 10 and digits[:3] in ("400", "800"):
        return [3, 3, 4]
    if digits.startswith("0") and 10 <= n <= 12:
        area = 3 if digits[1] in "12" else 4
        return [area] + digit_groups(digits[area:])
    if n <= 6:
        return [n] if n else []
    groups_n = -(-n // 4)
    threes = 4 * groups_n - n
    return [3] * threes + [4] * (groups_n - threes)


def _section(value: int, liang_thousand: bool, liang_hundred: bool) -> str:
    """Read 0 < value < 10000 with inner 零 rules (1005 → 一千零五)."""
    out: list[str] = []
    zero_pending = False
    for place_index, place in enumerate(_PLACES):
        divisor = 10 ** (3 - place_index)
        d = (value // divisor) % 10
        if d == 0:
            if out:
                zero_pending = True
            continue
        if zero_pending:
            out.append("零")
            zero_pending = False
        if d == 2 and ((place == "千" and liang_thousand) or (place == "百" and liang_hundred and not out)):
            out.append("两" + place)
        else:
            out.append(DIGIT_READINGS[d] + place)
    return "".join(out)


def read_cardinal(int_digits: str, liang: bool = True) -> str:
    """Read an ASCII integer string as a cardinal: "10010" → "一万零一十", "2000" → "两千" (``liang``).

    Leading zeros are ignored; strings longer than ``MAX_CARDINAL_DIGITS`` are read digit by digit.
    With ``liang``, a 2 in the thousands place, a leading 2 before 百 and a lone 2 before 万/亿 read 两.
    """
    stripped = int_digits.lstrip("0")
    if not stripped:
        return "零"
    if len(stripped) > MAX_CARDINAL_DIGITS:
        return read_digits(stripped)
    value = int(stripped)
    sections: list[int] = []
    while value:
        sections.append(value % 10000)
        value //= 10000
    out: list[str] = []
    zero_pending = False
    top = len(sections) - 1
    for index in range(top, -1, -1):
        section = sections[index]
        if section == 0:
            if out:
                zero_pending = True
            continue
        if out and (zero_pending or section < 1000):
            out.append("零")
        zero_pending = False
        if liang and section == 2 and index > 0:
            text = "两"
        else:
            text = _section(section, liang, liang and index == top)
        out.append(text + _SECTION_UNITS[index])
    result = "".join(out)
    if result.startswith("一十"):
        result = result[1:]
    return result


def read_decimal(int_digits: str, frac_digits: str | None, liang: bool = False) -> str:
    """Read a decimal number: ("3", "85") → "三点八五"; the fraction digits are read one by one with 一."""
    head = read_cardinal(int_digits or "0", liang)
    if not frac_digits:
        return head
    return head + "点" + read_digits(frac_digits)


def read_fraction(numerator: str, denominator: str) -> str:
    """Read a/b as b分之a: ("1", "3") → "三分之一"."""
    return read_cardinal(denominator, liang=False) + "分之" + read_cardinal(numerator, liang=False)


def read_year(digits: str) -> str:
    """Read a year one digit at a time with 一: "2011" → "二零一一"."""
    return read_digits(digits)


def read_amount_yuan(
    int_digits: str, frac_digits: str, units: tuple[str, str, str] = ("元", "角", "分"), liang: bool = True
) -> str | None:
    """Read an amount as 元/角/分 (or 块/毛/分): ("13", "5") → "十三元五角"; None if it has more than 2 decimals.

    With ``liang``, 2 jiao/fen read 两角/两分 and the yuan part follows read_cardinal's 两 rules.
    """
    frac = frac_digits.rstrip("0")
    if len(frac) > 2:
        return None
    yuan_unit, jiao_unit, fen_unit = units
    yuan = int_digits.lstrip("0")
    jiao = int(frac[0]) if frac else 0
    fen = int(frac[1]) if len(frac) > 1 else 0
    out: list[str] = []
    if yuan:
        out.append(("两" if yuan == "2" and liang else read_cardinal(yuan, liang)) + yuan_unit)
    if jiao:
        out.append(("两" if jiao == 2 and liang else DIGIT_READINGS[jiao]) + jiao_unit)
    if fen:
        if out and not jiao:
            out.append("零")
        out.append(("两" if fen == 2 and liang else DIGIT_READINGS[fen]) + fen_unit)
    if not out:
        return "零" + yuan_unit
    return "".join(out)


def read_clock(hour: int, minute: int, second: int | None = None, half_hour: bool = False) -> str:
    """Read a clock time: (3, 30) → "三点三十分" (or "三点半"), (8, 0) → "八点", (14, 5) → "十四点零五分"."""
    out = ("两" if hour == 2 else read_cardinal(str(hour), liang=False)) + "点"
    if minute == 30 and half_hour and not second:
        return out + "半"
    if minute:
        out += ("零" if minute < 10 else "") + read_cardinal(str(minute), liang=False) + "分"
    if second:
        if not minute:
            out += "零分"
        out += ("零" if second < 10 else "") + read_cardinal(str(second), liang=False) + "秒"
    return out


def read_month_day(month: int, day: int | None) -> str:
    """Read month and day as cardinals: (11, 22) → "十一月二十二日"."""
    out = read_cardinal(str(month), liang=False) + "月"
    if day is not None:
        out += read_cardinal(str(day), liang=False) + "日"
    return out
