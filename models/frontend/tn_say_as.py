"""Readers for the say-as classes the SSML platforms add: name (surname readings), address, fraction, measure,
duration and dates whose field order is given (mdy, dmy, ...); registered with the other span readers."""

from __future__ import annotations

import re
from collections.abc import Callable

from models.frontend import verbalize as vb
from models.frontend.surnames import surname_reading
from models.frontend.tn_core import Num
from models.frontend.tn_rules import Scanner, pieces
from models.frontend.tn_tables import HANZI_RUN_RE, TEMPERATURE_UNITS

Reader = Callable[[Scanner, int, int], bool]

#: Units written as English words (Polly's and Google's unit/measure), read only inside a measure span.
MEASURE_WORDS: dict[str, str] = {
    "inch": "英寸", "inches": "英寸", "in": "英寸", "foot": "英尺", "feet": "英尺", "ft": "英尺", "yard": "码",
    "yards": "码", "yd": "码", "mile": "英里", "miles": "英里", "mi": "英里", "mph": "英里每小时",
    "meter": "米", "meters": "米", "metre": "米", "metres": "米", "kilometer": "公里", "kilometers": "公里",
    "centimeter": "厘米", "centimeters": "厘米", "millimeter": "毫米", "millimeters": "毫米",
    "gram": "克", "grams": "克", "kilogram": "公斤", "kilograms": "公斤", "pound": "磅", "pounds": "磅",
    "lb": "磅", "lbs": "磅", "ounce": "盎司", "ounces": "盎司", "oz": "盎司", "ton": "吨", "tons": "吨", "t": "吨",
    "liter": "升", "liters": "升", "litre": "升", "litres": "升", "gallon": "加仑", "gallons": "加仑",
    "percent": "百分之",
}
#: Time units of a duration: here m is minutes, not metres.
DURATION_UNITS: dict[str, str] = {
    "d": "天", "day": "天", "days": "天", "h": "小时", "hr": "小时", "hrs": "小时", "hour": "小时", "hours": "小时",
    "m": "分钟", "min": "分钟", "mins": "分钟", "minute": "分钟", "minutes": "分钟", "'": "分钟",
    "s": "秒", "sec": "秒", "secs": "秒", "second": "秒", "seconds": "秒", '"': "秒", "ms": "毫秒",
}
_NUM = r"[-−]?[0-9][0-9,]*(?:\.[0-9]+)?"
_FRACTION_RE = re.compile(rf"(?P<sign>[-−])?(?:(?P<whole>[0-9]+)(?: |又))?(?P<a>[0-9]+) ?[/⁄] ?(?P<b>[0-9]+)")
_QUANTITY_RE = re.compile(rf"(?:{_FRACTION_RE.pattern})|{_NUM}")
_UNIT_WORD_RE = re.compile(r" ?(?P<unit>[A-Za-z]+|°[CF]|[℃℉°²³㎡])(?![A-Za-z])")
_COLON_DURATION_RE = re.compile(r"[0-9]+(?::[0-9]{1,2}(?:\.[0-9]+)?){1,2}")
_DURATION_TOKEN_RE = re.compile(rf"{_NUM} ?(?:[A-Za-z]+|['\"])(?![A-Za-z])")
_DATE_PARTS_RE = re.compile(r"[0-9]+(?: ?[-/. 年月] ?[0-9]+)*(?: ?[日号])?")
_FIELD_DIGITS = {"y": 4, "m": 2, "d": 2}
_ADDRESS_NUMBER_RE = re.compile(r"[0-9]+(?:-[0-9]+)*")
#: After these an address number is a count or an ordinal (3单元, 12栋, 10000号): read as a cardinal.
_ADDRESS_COUNTED = re.compile(r"号|栋|幢|楼|层|单元|弄|巷|街|路|区|座|期|组|村|队|排|门|道|段|里")
#: Room and flat numbers are read digit by digit (304室 → 三零四室).
_ADDRESS_ROOM = re.compile(r"室|房|户")


def _quantity(sc: Scanner, num: Num, unit_reading: str) -> str:
    return ("负" if num.sign else "") + sc.quantity(num, unit_reading)


def _fraction_text(m: re.Match[str]) -> str:
    whole = vb.read_cardinal(m.group("whole"), liang=False) + "又" if m.group("whole") else ""
    return ("负" if m.group("sign") else "") + whole + vb.read_fraction(m.group("a"), m.group("b"))


def _fraction(sc: Scanner, start: int, end: int) -> bool:
    """a/b as b分之a (3/4 → 四分之三), a whole part as 又 (1 1/2 → 一又二分之一), never as a date."""
    def read(m: re.Match[str]) -> bool:
        if int(m.group("b")) == 0:
            return False
        sc.em.text(_fraction_text(m), m.start())
        return True

    return pieces(sc, start, end, _FRACTION_RE, read)


def _measure(sc: Scanner, start: int, end: int) -> bool:
    """A number or fraction with its unit (5kg → 五公斤, 2 feet → 两英尺, 1/2inch → 二分之一英寸, -3°C → 零下三摄氏度);
    a number without a known unit is a cardinal, never digits."""

    def read(m: re.Match[str]) -> int | None:
        """Emit the quantity at ``m`` and its unit; returns where the unit ends (None: not a number)."""
        j = m.end()
        frac = _FRACTION_RE.fullmatch(m.group())
        num = None if frac else Num.parse(sc.s, m.start(), j)
        if frac is None and num is None:
            return None
        known = sc.unit_after(j, end)  # symbols and abbreviations (kg, km/h, °C) first, then English words
        unit = None if known else _UNIT_WORD_RE.match(sc.s, j, end)
        word = known[2] if known else (unit.group("unit") if unit else "")
        reading = known[0] if known else MEASURE_WORDS.get(word) or MEASURE_WORDS.get(word.lower())
        if known:
            j = known[1]
        elif reading is not None:
            j = unit.end()
        else:
            reading = ""
        if reading == "百分之":
            sc.em.text("百分之" + (_fraction_text(frac) if frac else vb.read_decimal(num.int_digits, num.frac)),
                       m.start())
        elif frac is not None:
            sc.em.text(_fraction_text(frac) + reading, m.start())
        else:
            sign = "零下" if num.sign and word in TEMPERATURE_UNITS else ("负" if num.sign else "")
            two = num.int_digits.lstrip("0") == "2" and num.frac is None and reading and word not in TEMPERATURE_UNITS
            sc.em.text(sign + ("两" if two else sc.quantity(num, reading)) + reading, m.start())
        return j

    cursor = start
    found = False
    for m in _QUANTITY_RE.finditer(sc.s, start, end):
        if m.start() < cursor:
            continue  # inside the unit of the quantity before
        if cursor < m.start():
            sc.run(cursor, m.start())
        after = read(m)
        if after is None:
            sc.run(m.start(), m.end())
            cursor = m.end()
        else:
            found = True
            cursor = after
    if cursor < end:
        sc.run(cursor, end)
    return found


def _clock_parts(text: str, order: str) -> dict[str, str] | None:
    parts = re.split(r":", text)
    if len(parts) != len(order):
        return None
    return dict(zip(order, parts))


def _duration(fmt: str) -> Reader:
    """h:m:s, h:m or m:s (``fmt``; "" guesses: 3 parts h:m:s, 2 parts m:s) as 一小时三十分钟五秒, and 1h30m, 90s,
    Polly's 1'21" with their units; zero parts are left out."""
    def read_colon(sc: Scanner, m: re.Match[str]) -> bool:
        text = m.group()
        order = fmt or ("hms" if text.count(":") == 2 else "ms")
        parts = _clock_parts(text, order)
        if parts is None:
            return False
        out = []
        for key, unit in (("h", "小时"), ("m", "分钟"), ("s", "秒")):
            value = parts.get(key)
            if value is None or not value.strip("0."):
                continue
            num = Num.parse(value, 0, len(value))
            out.append(sc.quantity(num, unit) + unit)
        sc.em.text("".join(out) or "零秒", m.start())
        return True

    def read_units(sc: Scanner, m: re.Match[str]) -> bool:
        num = Num.parse(sc.s, m.start(), m.end())
        if num is None:
            return False
        unit_text = sc.s[num.end:m.end()].strip()
        reading = DURATION_UNITS.get(unit_text) or DURATION_UNITS.get(unit_text.lower())
        if reading is None:
            return False
        sc.em.text(_quantity(sc, num, reading) + reading, m.start())
        return True

    def reader(sc: Scanner, start: int, end: int) -> bool:
        pattern = re.compile(f"(?P<colon>{_COLON_DURATION_RE.pattern})|(?P<units>{_DURATION_TOKEN_RE.pattern})")
        return pieces(sc, start, end, pattern,
                      lambda m: read_colon(sc, m) if m.group("colon") else read_units(sc, m))

    return reader


def _date(order: str) -> Reader:
    """A date whose fields come in ``order`` (mdy: 11/22/2026, dmy: 22.11.2026, dm: 22/11 ...), read as Mandarin
    reads dates: year, month, day (二零二六年十一月二十二日)."""
    def reader(sc: Scanner, start: int, end: int) -> bool:
        def read(m: re.Match[str]) -> bool:
            parts = re.findall(r"[0-9]+", m.group())
            widths = [_FIELD_DIGITS[f] for f in order]
            if len(parts) == 1 and len(order) > 1 and len(parts[0]) == sum(widths):  # compact: 20261122
                cuts = [sum(widths[:k]) for k in range(len(widths) + 1)]
                parts = [parts[0][a:b] for a, b in zip(cuts, cuts[1:])]
            if len(parts) != len(order) or any(len(p) > 4 for p in parts):
                return False
            fields = dict(zip(order, parts))
            month = int(fields["m"]) if "m" in fields else None
            day = int(fields["d"]) if "d" in fields else None
            if (month is not None and not 1 <= month <= 12) or (day is not None and not 1 <= day <= 31):
                return False
            out = vb.read_year(fields["y"]) + "年" if "y" in fields else ""
            if month is not None:
                out += vb.read_month_day(month, day)
            elif day is not None:
                out += vb.read_cardinal(str(day), liang=False) + "日"
            sc.em.text(out, m.start())
            return True

        return pieces(sc, start, end, _DATE_PARTS_RE, read)

    return reader


def _address(sc: Scanner, start: int, end: int) -> bool:
    """Numbers in an address: before 号/栋/楼/单元/路… a cardinal (二 not 两: 二单元), room numbers and numbers
    before nothing countable digit by digit (304室 → 三零四室), a dash between numbers 杠 (3-2-301)."""
    def read(m: re.Match[str]) -> bool:
        groups = m.group().split("-")
        pos = m.start()
        for k, digits in enumerate(groups):
            if k:
                sc.em.text("杠", pos - 1)
            last = k == len(groups) - 1
            counted = last and _ADDRESS_COUNTED.match(sc.s, m.end(), end) is not None
            room = last and _ADDRESS_ROOM.match(sc.s, m.end(), end) is not None
            if counted and not room and len(digits) <= vb.MAX_CARDINAL_DIGITS and digits[0] != "0":
                sc.em.text(vb.read_cardinal(digits, liang=False), pos)
            elif len(digits) <= 2 and digits[0] != "0" and not room and not last:
                sc.em.text(vb.read_cardinal(digits, liang=False), pos)
            else:
                sc.em.text(vb.read_digits(digits, sc.o.one_as_yao), pos)
            pos += len(digits) + 1
        return True

    return pieces(sc, start, end, _ADDRESS_NUMBER_RE, read)


def _name(sc: Scanner, start: int, end: int) -> bool:
    """Personal names: each Hanzi run is a name whose surname takes its surname reading (单 shan4, 尉迟 yu4 chi2);
    the readings travel with the normalized text to the pinyin step. Anything else is read as usual."""
    def read(m: re.Match[str]) -> bool:
        for k, syllable in enumerate(surname_reading(m.group())):
            sc.em.read_as(len(sc.em.chars) + k, syllable)
        sc.em.text(m.group()[:1], m.start())
        for k, c in enumerate(m.group()[1:], start=1):
            sc.em.text(c, m.start() + k)
        return True

    pieces(sc, start, end, HANZI_RUN_RE, read)
    return True


READERS: dict[str, Reader] = {
    "name": _name,
    "address": _address,
    "fraction": _fraction,
    "measure": _measure,
    "duration": _duration(""),
    **{f"duration_{fmt}": _duration(fmt) for fmt in ("hms", "hm", "ms")},
    **{f"date_{order}": _date(order) for order in ("ymd", "mdy", "dmy", "ydm", "ym", "my", "md", "dm", "y", "m", "d")},
}

__all__ = ["DURATION_UNITS", "MEASURE_WORDS", "READERS"]
