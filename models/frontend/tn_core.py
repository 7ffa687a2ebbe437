"""Shared machinery of the normalizer: the output emitter, number tokens and the number/digit readers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from models.frontend import verbalize as vb
from models.frontend.tn_options import NormalizeOptions
from models.frontend.tn_tables import (
    CURRENCY_PREFIX_RE,
    CURRENCY_PREFIXES,
    CURRENCY_SUFFIX_RE,
    CURRENCY_WORD_RE,
    DATA_UNITS,
    DATE_LEFT_RE,
    DATE_RIGHT_RE,
    LATIN_UNIT_RE,
    LATIN_UNITS,
    LEFT_KEYWORD_RE,
    LEFT_WINDOW_CHARS,
    LETTER_READINGS,
    LIANG_RE,
    MEASURE_RE,
    PAUSE_STRENGTH,
    TEMPERATURE_UNITS,
)


NUM_RE = re.compile(r"(?P<sign>[-−])?(?P<int>[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.(?P<frac>[0-9]+))?")
TIME_RE = re.compile(
    r"(?P<h>[0-9]{1,2}):(?P<m>[0-9]{2})(?::(?P<s>[0-9]{2}))?(?![0-9])(?: ?(?P<ampm>[AaPp]\.?[Mm]\.?)(?![A-Za-z]))?"
)
RANGE_SEP_RE = re.compile(r" ?(?P<sep>[-~～〜—]|至|到) ?(?=[-−]?[0-9])")
_DASHED_GROUPS_RE = re.compile(r"[0-9]+(?:-[0-9]+)+(?![0-9])")
_LETTER_SUFFIX_RE = re.compile(r"[A-Za-z]{1,2}(?![A-Za-z0-9])")
_TEMP_HANZI_RE = re.compile(r"度|摄氏度")
_YEAR_WORD_RE = re.compile(r"年")
_SLASH_NUM_RE = re.compile(r"/(?P<b>[0-9]{1,4})(?![0-9/.])")
_PERCENT_RE = re.compile(r"[%‰]")
_DATE_UNIT_RE = re.compile(r"[月日号时点分秒]")
_AMOUNT_MULT_RE = re.compile(r"[万亿千百]")
_HANZI_NUMERALS = frozenset("零一二三四五六七八九十百千万亿两")
_CODE_CLASSES = frozenset({"id_card", "bank_card", "code", "order", "phone"})
_CURRENCY_UNITS_AFTER_PREFIX = frozenset({"元", "块", "美元", "美金", "港元", "港币", "欧元", "英镑", "日元"})


class Emitter:
    """Collects output characters with the position (in the preprocessed text) of the input they came from."""

    __slots__ = ("chars", "positions", "readings", "warnings")

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.positions: list[int] = []
        self.warnings: list[tuple[str, int]] = []
        self.readings: dict[int, str] = {}  # output index → the syllable it must be read as (say-as name)

    def read_as(self, index: int, syllable: str) -> None:
        """Output char ``index`` (not emitted yet, or already) must be read as ``syllable`` (TONE3)."""
        self.readings[index] = syllable

    def text(self, text: str, pos: int) -> None:
        """Append Hanzi ``text``, every char attributed to ``pos``."""
        self.chars.extend(text)
        self.positions.extend([pos] * len(text))

    def warn(self, message: str, pos: int) -> None:
        """Record a documented skip at ``pos`` (the normalizer reports it with the input index)."""
        self.warnings.append((message, pos))

    def pause(self, mark: str, pos: int) -> None:
        """Append a pause mark; consecutive marks collapse to the strongest; none at the start."""
        if not self.chars:
            return
        last = self.chars[-1]
        last_strength = PAUSE_STRENGTH.get(last)
        if last_strength is None:
            self.chars.append(mark)
            self.positions.append(pos)
        elif PAUSE_STRENGTH[mark] > last_strength:
            self.chars[-1] = mark
            self.positions[-1] = max(self.positions[-1], pos)


@dataclass(slots=True)
class Num:
    """A parsed number token in the preprocessed text."""

    start: int
    end: int
    sign: str
    int_digits: str
    frac: str | None
    grouped: bool

    @classmethod
    def parse(cls, s: str, i: int, end: int) -> Num | None:
        """Parse [-]1,234.5 at s[i:end]; None if no number starts at ``i``."""
        m = NUM_RE.match(s, i, end)
        if m is None:
            return None
        int_raw = m.group("int")
        return cls(m.start(), m.end(), m.group("sign") or "", int_raw.replace(",", ""), m.group("frac"), "," in int_raw)

    @property
    def plain(self) -> bool:
        """An unsigned integer without thousands separators (the kind that may be a code)."""
        return not (self.sign or self.frac is not None or self.grouped)


def is_digit(c: str) -> bool:
    """Whether ``c`` is one ASCII digit (str.isdigit also accepts ², ① and other scripts' digits)."""
    return len(c) == 1 and "0" <= c <= "9"


def start_of_digits(s: str, i: int) -> int:
    """Index where the run of digits containing ``i`` starts."""
    while i > 0 and is_digit(s[i - 1]):
        i -= 1
    return i


def alnum_before(s: str, i: int) -> bool:
    """Whether the character before ``i`` is an ASCII letter/digit or a closing bracket (so '-' is not a sign)."""
    if i == 0:
        return False
    p = s[i - 1]
    return (p.isascii() and p.isalnum()) or p in ")%"


def left_class(s: str, i: int) -> str | None:
    """The keyword class (code, phone, ordinal, cardinal, ...) right before position ``i``, if any."""
    window = s[max(0, i - LEFT_WINDOW_CHARS):i]
    m = LEFT_KEYWORD_RE.search(window)
    return m.lastgroup if m else None


def spell_letters(word: str) -> str:
    """Spell Latin letters with their Mandarin letter names: "VIP" → "维爱批"."""
    return "".join(LETTER_READINGS.get(c.upper(), "") for c in word)


def _is_round(digits: str) -> bool:
    """A bare round number read as a cardinal (100, 3000, 12000, 1500000), not digit by digit."""
    if digits[0] == "0" or len(digits) > vb.MAX_CARDINAL_DIGITS:
        return False
    return digits[1:].strip("0") == "" or (len(digits) >= 4 and digits.endswith("000"))


class NumberReader:
    """Digit-by-digit, cardinal, amount, percent, fraction and range readers over the preprocessed text ``s``.

    Subclassed by the Scanner (generic rules) and used by the span readers; methods take positions in ``s``
    and emit into ``em``.
    """

    def __init__(self, s: str, options: NormalizeOptions, em: Emitter) -> None:
        self.s = s
        self.o = options
        self.em = em

    def digits(self, text: str, pos: int, groups: list[int] | None = None, x_reading: str | None = None) -> None:
        """Read the digits (and letters) of ``text`` one by one; ``pos`` is where text[0] sits in s."""
        yao = self.o.one_as_yao
        k = 0
        bounds: set[int] = set()
        if groups:
            acc = 0
            for g in groups[:-1]:
                acc += g
                bounds.add(acc)
        for j, c in enumerate(text):
            if is_digit(c):
                if k in bounds:
                    self.em.pause("、", pos + j)
                self.em.text(vb.digit_reading(c, yao), pos + j)
                k += 1
            elif c in "Xx" and x_reading is not None:
                if k in bounds:
                    self.em.pause("、", pos + j)
                self.em.text(x_reading, pos + j)
                k += 1
            elif c.isascii() and c.isalpha():
                self.em.text(LETTER_READINGS[c.upper()], pos + j)
            elif c in "- /()":
                if j and k and k not in bounds:
                    self.em.pause("、", pos + j)
            elif c == ".":
                self.em.text("点", pos + j)
            elif c == "+" and self.o.read_country_code:
                self.em.text("加", pos + j)

    def code_groups(self, text: str, pos: int, grouping: str) -> None:
        """Read a code written with separators group by group; long groups are split by the phone heuristic."""
        digits_only = "".join(c for c in text if is_digit(c))
        if grouping == "bank_card":
            groups = [4] * (len(digits_only) // 4) + ([len(digits_only) % 4] if len(digits_only) % 4 else [])
            self.digits(text, pos, groups)
            return
        if grouping == "id_card":
            self.digits(text, pos, [6, 8, 4] if len(text) == 18 else vb.digit_groups(text), self.o.letter_x)
            return
        if grouping == "code":
            size = self.o.code_group_size
            groups = [size] * (len(text) // size + 1) if size else None
            self.digits(text, pos, groups)
            return
        if any(not is_digit(c) for c in text):
            j = 0
            for part in re.split(r"([- /()]+)", text):
                if part and is_digit(part[0]):
                    if j:
                        self.em.pause("、", pos + j)
                    self.digits(part, pos + j, vb.digit_groups(part))
                j += len(part)
            return
        self.digits(text, pos, vb.digit_groups(text))

    def number(self, i: int, end: int) -> int | None:
        """Read the number starting at ``i`` (percent, fraction/date, range, code groups or a single number)."""
        s = self.s
        num = Num.parse(s, i, end)
        if num is not None and num.sign and alnum_before(s, i):
            num = Num.parse(s, i + 1, end)
        if num is None:  # a lone sign: the caller reads it as a symbol
            return None
        j = num.end
        pm = _PERCENT_RE.match(s, j, end)
        if pm is not None:
            return self.percent(num, pm.end(), end)
        if num.plain:
            sm = _SLASH_NUM_RE.match(s, j, end)
            if sm is not None:
                return self.slash(num, sm, end)
        rm = RANGE_SEP_RE.match(s, j, end)
        if rm is not None:
            r = self.range_(num, rm, end)
            if r is not None:
                return r
        if rm is not None and rm.group("sep") == "-" and num.plain:
            dm = _DASHED_GROUPS_RE.match(s, i, end)
            if dm is not None:
                self.code_groups(dm.group(), i, "telephone")
                return dm.end()
        return self.single(num, end)

    def single(self, num: Num, end: int) -> int:
        """Read one number token (not a range/percent/fraction) using its right and left context."""
        s = self.s
        i, j = num.start, num.end
        sign_text = "负" if num.sign else ""
        unit = self.unit_after(j, end)
        if unit is not None:
            reading, uend, code = unit
            if num.sign and code in TEMPERATURE_UNITS:
                sign_text = "零下"
            self.em.text(sign_text + self.quantity(num, reading) + reading, i)
            return uend
        cm = CURRENCY_WORD_RE.match(s, j, end)
        if cm is not None:
            word = cm.group()
            if word in ("元", "块", "块钱") and num.frac:
                unit_word = "块" if word.startswith("块") else "元"
                self.amount(num, unit_word, "", i)
                return j + len(unit_word)
            self.em.text(sign_text + self.quantity(num, word), i)
            return j
        sm = CURRENCY_SUFFIX_RE.match(s, j, end)
        if sm is not None:
            self.amount(num, CURRENCY_PREFIXES[sm.group("cur")], "", i)
            return sm.end()
        if num.sign and _TEMP_HANZI_RE.match(s, j, end):
            sign_text = "零下"
        if not num.plain:
            self.em.text(sign_text + self.quantity(num, ""), i)
            return j
        digits = num.int_digits
        if len(digits) >= 3 and i > 0 and ((s[i - 1].isascii() and s[i - 1].isalpha()) or s[i - 1] in "*#"):
            self.code_groups(digits, i, "telephone")
            return j
        if len(digits) == 4 and _YEAR_WORD_RE.match(s, j, end) and left_class(s, i) not in ("cardinal", "ordinal"):
            self.em.text(vb.read_year(digits), i)
            return j
        if _DATE_UNIT_RE.match(s, j, end) or MEASURE_RE.match(s, j, end):
            if len(digits) > 1 and digits[0] == "0" and not _DATE_UNIT_RE.match(s, j, end):
                self.digits(digits, i)
                return j
            ordinal = left_class(s, i) == "ordinal" or (i > 0 and s[i - 1] in _HANZI_NUMERALS)
            self.em.text(self.quantity(num, s[j:j + 3], ordinal=ordinal), i)
            return j
        lm = _LETTER_SUFFIX_RE.match(s, j, end)
        if lm is not None and len(digits) <= 4 and not (len(digits) > 1 and digits[0] == "0"):
            self.em.text(vb.read_cardinal(digits, liang=False), i)
            return j
        cls = left_class(s, i)
        if cls in _CODE_CLASSES:
            if cls == "id_card" and len(digits) in (15, 18):
                self.digits(digits, i, [6, 8, 4] if len(digits) == 18 else [6, 6, 3], self.o.letter_x)
            elif cls in ("bank_card", "id_card"):
                self.code_groups(digits, i, "bank_card")
            elif cls == "code":
                self.code_groups(digits, i, "code")
            else:
                self.code_groups(digits, i, "telephone")
            return j
        if cls in ("cardinal", "ordinal") and len(digits) <= vb.MAX_CARDINAL_DIGITS:
            self.em.text(vb.read_cardinal(digits, liang=cls == "cardinal"), i)
            return j
        if len(digits) <= 2 and not (len(digits) == 2 and digits[0] == "0"):
            self.em.text(vb.read_cardinal(digits, liang=False), i)
            return j
        if _is_round(digits):
            self.em.text(vb.read_cardinal(digits, liang=self.o.two_as_liang), i)
            return j
        if 16 <= len(digits) <= 19:
            self.code_groups(digits, i, "bank_card")
            return j
        self.code_groups(digits, i, "telephone")
        return j

    def quantity(self, num: Num, following: str, ordinal: bool = False) -> str:
        """Cardinal/decimal reading of a counted quantity (2 → 两 before measure words, unless ordinal)."""
        if num.frac is not None:
            return vb.read_decimal(num.int_digits, num.frac, liang=self.o.two_as_liang)
        if len(num.int_digits.lstrip("0")) > vb.MAX_CARDINAL_DIGITS:
            return vb.read_digits(num.int_digits)
        if num.int_digits.lstrip("0") == "2" and not ordinal and self.o.two_as_liang and LIANG_RE.match(following):
            return "两"
        return vb.read_cardinal(num.int_digits, liang=self.o.two_as_liang and not ordinal)

    def unit_after(self, j: int, end: int) -> tuple[str, int, str] | None:
        """A Latin/symbol unit at ``j``: (reading, end, unit) or None."""
        m = LATIN_UNIT_RE.match(self.s, j, end)
        if m is None:
            return None
        unit = m.group("unit")
        if unit in DATA_UNITS and self.o.data_units_spelled:
            return spell_letters(unit), m.end(), unit
        return LATIN_UNITS[unit], m.end(), unit

    def percent(self, num: Num, j: int, end: int) -> int:
        """Read num% (or ‰) at s[j-1], and a following range to a second percentage (10%-20%)."""
        s = self.s
        word = "千分之" if s[j - 1] == "‰" else "百分之"
        sign = "负" if num.sign else ""
        self.em.text(sign + word + vb.read_decimal(num.int_digits, num.frac), num.start)
        rm = RANGE_SEP_RE.match(s, j, end)
        if rm is not None:
            second = Num.parse(s, rm.end(), end)
            if second is not None:
                pm = _PERCENT_RE.match(s, second.end, end)
                self.em.text("到", rm.start("sep"))
                self.em.text(("负" if second.sign else "") + word + vb.read_decimal(second.int_digits, second.frac),
                             second.start)
                return pm.end() if pm is not None else second.end
        return j

    def slash(self, num: Num, sm: re.Match[str], end: int) -> int:
        """Read a/b as a month/day date when it looks like one (11/22, 截止3/15), else as a fraction (1/3)."""
        s = self.s
        a, b = num.int_digits, sm.group("b")
        ia, ib = int(a) if len(a) <= 4 else 0, int(b)
        date_like = 1 <= ia <= 12 and 1 <= ib <= 31
        if date_like:
            rest = s[sm.end():sm.end() + 3]
            explicit = (a[0] == "0" or b[0] == "0"
                        or DATE_LEFT_RE.search(s, max(0, num.start - 5), num.start) is not None
                        or DATE_RIGHT_RE.match(rest) is not None or rest[:1] in ("日", "号")
                        or TIME_RE.match(s, sm.end() + 1, end) is not None and rest[:1] == " ")
            fraction_hint = rest[:1] == "的"
            if explicit or (not fraction_hint and (len(a) == 2 or len(b) == 2)):
                self.em.text(vb.read_cardinal(a, liang=False) + "月", num.start)
                day_suffix = "" if rest[:1] in ("日", "号") else "日"
                self.em.text(vb.read_cardinal(b, liang=False) + day_suffix, sm.start("b"))
                return sm.end()
        if ib == 0:
            self.em.text(vb.read_cardinal(a, liang=False), num.start)
            return num.end
        self.em.text(vb.read_fraction(a, b), num.start)
        return sm.end()

    def range_(self, first: Num, rm: re.Match[str], end: int) -> int | None:
        """num1 -~至到 num2 [unit]: read both with the classification of the second; None if not a range."""
        s = self.s
        second = Num.parse(s, rm.end(), end)
        if second is None or second.sign:
            return None
        sep = rm.group("sep")
        after = second.end
        if sep == "-" and s[after:after + 1] == "-" and is_digit(s[after + 1:after + 2]):
            return None
        has_unit = (self.unit_after(after, end) is not None or _PERCENT_RE.match(s, after, end) is not None
                    or MEASURE_RE.match(s, after, end) is not None or CURRENCY_WORD_RE.match(s, after, end) is not None)
        a, b = first.int_digits, second.int_digits
        yearish = len(a) == 4 and len(b) == 4 and a[:2] in ("19", "20") and b[:2] in ("19", "20")
        if sep in "-—" and first.plain and second.plain:
            if len(a) > 1 and a[0] == "0" or len(b) > 1 and b[0] == "0":
                return None
            if len(a) > 5 or len(b) > 5:
                return None
            if not (yearish or has_unit or (len(a) + len(b) <= 6 and len(b) - len(a) <= 1 and int(a) <= int(b))):
                return None
        sign_text = "负" if first.sign else ""
        if yearish and (not has_unit or _YEAR_WORD_RE.match(s, after, end)) and first.plain:
            self.em.text(vb.read_year(a), first.start)
            self.em.text("到" if sep not in "至到" else sep, rm.start("sep"))
            self.em.text(vb.read_year(b), second.start)
            return after
        pm = _PERCENT_RE.match(s, after, end)
        if pm is not None:
            word = "千分之" if pm.group() == "‰" else "百分之"
            self.em.text(sign_text + word + vb.read_decimal(a, first.frac), first.start)
            self.em.text("到" if sep not in "至到" else sep, rm.start("sep"))
            self.em.text(word + vb.read_decimal(b, second.frac), second.start)
            return pm.end()
        following = s[after:after + 3]
        unit = self.unit_after(after, end)
        if unit is not None:
            following = unit[0]
            if first.sign and unit[2] in TEMPERATURE_UNITS:
                sign_text = "零下"
        self.em.text(sign_text + self.quantity(first, following), first.start)
        self.em.text("到" if sep not in "至到" else sep, rm.start("sep"))
        self.em.text(self.quantity(second, following), second.start)
        if unit is not None:
            self.em.text(unit[0], after)
            return unit[1]
        return after

    def currency_prefix(self, i: int, end: int) -> int | None:
        """Read ￥13.5 / $120 / RMB 3000 / ￥3.5万 / ￥100-200 as an amount; None if no number follows."""
        s = self.s
        m = CURRENCY_PREFIX_RE.match(s, i, end)
        if m is None or (i > 0 and s[i - 1].isascii() and s[i - 1].isalpha() and m.group("cur")[0].isalpha()):
            return None
        unit = CURRENCY_PREFIXES[m.group("cur")]
        num = Num.parse(s, m.end(), end)
        if num is None:
            return None
        j = num.end
        second: Num | None = None
        sep = RANGE_SEP_RE.match(s, j, end)
        if sep is not None:
            sm = CURRENCY_PREFIX_RE.match(s, sep.end(), end)
            second = Num.parse(s, sm.end() if sm else sep.end(), end)
            if second is not None and not second.sign:
                j = second.end
            else:
                second = None
        mult = _AMOUNT_MULT_RE.match(s, j, end)
        mult_text = ""
        if mult is not None:
            mult_text = mult.group()
            j = mult.end()
        suffix = CURRENCY_WORD_RE.match(s, j, end)
        if suffix is not None and suffix.group() in _CURRENCY_UNITS_AFTER_PREFIX:
            unit = suffix.group()
            j = suffix.end()
        if second is None:
            self.amount(num, unit, mult_text, i)
        else:
            self.amount(num, "", "", i, dian=True)
            self.em.text("到", sep.start("sep"))
            self.amount(second, unit, mult_text, second.start, dian=True)
        return j

    def amount(self, num: Num, unit: str, mult: str, pos: int, dian: bool = False) -> None:
        """Read an amount with its unit word (元, 块, 美元 ...), per ``amount_style``."""
        if num.sign:
            self.em.text("负", pos)
        if len(num.int_digits.lstrip("0")) > vb.MAX_CARDINAL_DIGITS:
            self.digits(num.int_digits, pos)
            self.em.text(mult + unit, pos)
            return
        liang = self.o.two_as_liang
        if num.frac and not mult and not dian and self.o.amount_style == "yuan_jiao_fen" and unit in ("元", "块"):
            units = ("元", "角", "分") if unit == "元" else ("块", "毛", "分")
            text = vb.read_amount_yuan(num.int_digits, num.frac, units, liang)
            if text is not None:
                self.em.text(text, pos)
                return
        frac = num.frac.rstrip("0") if num.frac else None
        self.em.text(vb.read_decimal(num.int_digits, frac, liang=liang and not frac) + mult + unit, pos)
