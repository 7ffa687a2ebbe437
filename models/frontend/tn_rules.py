"""Generic Mandarin normalization rules: a left-to-right scanner that reads numbers, codes, letters and symbols."""

from __future__ import annotations

import re
from collections.abc import Callable
import unicodedata
from fractions import Fraction

from models.frontend import verbalize as vb
from models.frontend.tn_core import (
    RANGE_SEP_RE,
    TIME_RE,
    Emitter,
    NumberReader,
    alnum_before,
    is_digit,
    left_class,
    start_of_digits,
)
from models.frontend.tn_options import NormalizeOptions
from models.frontend.tn_tables import (
    HANZI_CHAR_RE,
    HANZI_RUN_RE,
    CURRENCY_NAMES,
    CURRENCY_PREFIX_RE,
    CURRENCY_PREFIXES,
    CURRENCY_SUFFIX_RE,
    CURRENCY_WORD_RE,
    GREEK_READINGS,
    LETTER_READINGS,
    MEASURE_RE,
    PAUSE_MARKS,
    PER_RE,
    SCORE_LEFT_RE,
    SILENT_MARKS,
    SPELL_SYMBOLS,
    SYMBOL_WORDS,
    WORD_READINGS,
)



_DATE_YMD_RE = re.compile(
    r"(?P<y>[0-9]{4})(?P<sep>[-/.])(?P<m>[0-9]{1,2})(?P=sep)(?P<d>[0-9]{1,2})(?![0-9])(?P<suffix>[日号])?"
)
_DATE_YM_RE = re.compile(r"(?P<y>(?:19|20)[0-9]{2})(?P<sep>[-/.])(?P<m>[0-9]{1,2})(?![0-9./:-])")
_MOBILE_RE = re.compile(
    r"(?:(?P<cc>\+ ?86|0086|86)[- ]?)?"
    r"(?P<a>1[3-9][0-9])(?P<s1>[- ]?)(?P<b>[0-9]{4})(?P<s2>[- ]?)(?P<c>[0-9]{4})(?![0-9])"
)
_LANDLINE_RE = re.compile(
    r"(?:\((?P<a1>0[0-9]{2,3})\)|(?P<a2>0[0-9]{2,3})[- ])(?P<n>[1-9][0-9]{6,7})(?:-(?P<ext>[0-9]{1,5}))?(?![0-9])"
)
_SPACED_GROUPS_RE = re.compile(r"[0-9]{3,6}(?: [0-9]{3,6}){2,}(?![0-9])")
_ID_CARD_RE = re.compile(r"[1-9][0-9]{16}[0-9Xx](?![0-9A-Za-z])")
#: Region (6) + birth date YYYYMMDD + sequence (3) + check digit or X.
_ID_CARD_STRICT_RE = re.compile(
    r"[1-9][0-9]{5}(?:19|20)[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])[0-9]{3}[0-9Xx]"
)
_RATIO_RE = re.compile(r"(?P<a>[0-9]+):(?P<b>[0-9]+)(?![0-9])")
_DOTTED_RE = re.compile(r"[0-9]+(?:\.[0-9]+){2,}(?![0-9])")
_EMAIL_RE = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_URL_RE = re.compile(
    r"(?:https?://|www\.)[A-Za-z0-9._~:/?#@!$&'*+,;=%-]+|"
    r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.(?:com|cn|net|org|gov|edu|io|cc|top|xyz|info)(?:/[A-Za-z0-9._~/?#=&%-]*)?(?![A-Za-z])"
)
_MAX_ADDRESS_CHARS = 254
_WORD_RE = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)?(?:-[A-Za-z]+)*")
_KEY_LEFT_RE = re.compile(r"(?:按|按下|输入|拨|拨打|加|以|用)$")
_DAYPART_LEFT_RE = re.compile(r"(?:上午|下午|早上|中午|晚上|凌晨|傍晚|夜里|早晨|清晨|夜间) ?$")


class Scanner(NumberReader):
    """Generic rules over a range of the preprocessed text; emits readings into an Emitter."""

    def __init__(self, s: str, options: NormalizeOptions, em: Emitter) -> None:
        super().__init__(s, options, em)
        self.words = dict(WORD_READINGS)
        self.words.update({k.lower(): v for k, v in options.extra_words})

    def run(self, start: int, end: int) -> None:
        """Normalize s[start:end] into the emitter."""
        s = self.s
        i = start
        while i < end:
            c = s[i]
            if "\u3400" <= c <= "\u9fff" or c >= "\U00020000":
                m = HANZI_RUN_RE.match(s, i, end)
                if m is not None:
                    for j, h in enumerate(m.group(), i):
                        self.em.text(h, j)
                    i = m.end()
                    continue
            if c == " ":
                i += 1
                continue
            j = self.rule(i, end)
            i = j if j is not None and j > i else self.symbol(i, end)

    def rule(self, i: int, end: int) -> int | None:
        """Try the structured rules at ``i``; return the end of what was consumed, or None."""
        s = self.s
        c = s[i]
        if is_digit(c) or c in "+(":
            if is_digit(c) and i > start_of_digits(s, i):
                return self.number(i, end)
            for fn in (self.email_url, self.date, self.mobile, self.landline, self.id_card, self.spaced_groups,
                       self.time, self.ratio, self.dotted):
                j = fn(i, end)
                if j is not None:
                    return j
            if is_digit(c):
                return self.number(i, end)
            return None
        if c in "-~—" and 0 < i and i + 1 < end and is_digit(s[i + 1]) and HANZI_CHAR_RE.match(s[i - 1]):
            if any(is_digit(x) for x in s[max(0, i - 4):i - 1]):  # 12月1日-12月31日, 3天~5天
                self.em.text("到", i)
                return i + 1
        if c in "-−" and i + 1 < end and not alnum_before(s, i):
            if is_digit(s[i + 1]):
                return self.number(i, end)
            if CURRENCY_PREFIX_RE.match(s, i + 1, end):
                before = len(self.em.chars)
                j = self.currency_prefix(i + 1, end)
                if j is not None:
                    self.em.chars.insert(before, "负")
                    self.em.positions.insert(before, i)
                return j
        if c.isascii() and c.isalpha():
            for fn in (self.email_url, self.currency_prefix, self.word):
                j = fn(i, end)
                if j is not None:
                    return j
            return None
        if c in CURRENCY_PREFIXES:
            return self.currency_prefix(i, end)
        return None

    # ----- rules -----
    def email_url(self, i: int, end: int) -> int | None:
        """Spell an e-mail address or URL (a@b.com → 诶艾特比点西欧艾姆); the http(s):// prefix is not read."""
        stop = min(end, i + _MAX_ADDRESS_CHARS)  # bounded, so runs like "a.a.a.a…" stay linear
        m = _EMAIL_RE.match(self.s, i, stop) or _URL_RE.match(self.s, i, stop)
        if m is None:
            return None
        text = m.group()
        low = text.lower()
        for prefix in ("https://", "http://"):
            if low.startswith(prefix):
                text = text[len(prefix):]
                i += len(prefix)
                break
        self.spell(text, i)
        return m.end()

    def spell(self, text: str, pos: int) -> None:
        """Spell characters one by one: digits (幺 per option), letters, known symbols, Hanzi."""
        yao = self.o.one_as_yao
        for j, c in enumerate(text, pos):
            if is_digit(c):
                self.em.text(vb.digit_reading(c, yao), j)
            elif c.isascii() and c.isalpha():
                self.em.text(LETTER_READINGS[c.upper()], j)
            elif c in SPELL_SYMBOLS:
                self.em.text(SPELL_SYMBOLS[c], j)
            elif HANZI_CHAR_RE.match(c):
                self.em.text(c, j)

    def date(self, i: int, end: int) -> int | None:
        """Read 2026-11-22 / 2026/11/22 / 2026.11.22 and 2026-11 / 2026/5 as dates (year digit by digit)."""
        s = self.s
        m = _DATE_YMD_RE.match(s, i, end)
        if m is not None:
            month, day = int(m.group("m")), int(m.group("d"))
            if 1 <= month <= 12 and 1 <= day <= 31:
                self.em.text(vb.read_year(m.group("y")) + "年", i)
                self.em.text(vb.read_month_day(month, day), m.start("m"))
                return m.end()
        m = _DATE_YM_RE.match(s, i, end)
        if m is not None and 1 <= int(m.group("m")) <= 12 and (m.group("sep") == "/" or len(m.group("m")) == 2):
            if not CURRENCY_WORD_RE.match(s, m.end(), end) and not MEASURE_RE.match(s, m.end(), end):
                self.em.text(vb.read_year(m.group("y")) + "年", i)
                self.em.text(vb.read_month_day(int(m.group("m")), None), m.start("m"))
                return m.end()
        return None

    def mobile(self, i: int, end: int) -> int | None:
        """Read a mobile number (optionally +86) digit by digit, 3-4-4 or as written; None before a currency."""
        m = _MOBILE_RE.match(self.s, i, end)
        if m is None or CURRENCY_WORD_RE.match(self.s, m.end(), end) or CURRENCY_SUFFIX_RE.match(self.s, m.end(), end):
            return None
        cc = m.group("cc")
        if cc and self.o.read_country_code:
            self.em.text(("加" if cc[0] in "+0" else "") + "八六", i)
            self.em.pause("、", m.start("a"))
        written = bool(m.group("s1") or m.group("s2"))
        self.digits(self.s[m.start("a"):m.end()], m.start("a"), None if written else [3, 4, 4])
        return m.end()

    def landline(self, i: int, end: int) -> int | None:
        """Read (021)12345678 / 010-64035547[-ext]: area code, pause, number in groups."""
        m = _LANDLINE_RE.match(self.s, i, end)
        if m is None:
            return None
        area = m.group("a1") or m.group("a2")
        area_start = m.start("a1") if m.group("a1") else m.start("a2")
        self.digits(area, area_start)
        self.em.pause("、", m.start("n"))
        number = m.group("n")
        self.digits(number, m.start("n"), vb.digit_groups(number))
        if m.group("ext"):
            self.em.pause("、", m.start("ext"))
            self.em.text("转", m.start("ext"))
            self.digits(m.group("ext"), m.start("ext"))
        return m.end()

    def id_card(self, i: int, end: int) -> int | None:
        """Read an 18-character ID card number 6-8-4 (final X per options.letter_x)."""
        m = _ID_CARD_RE.match(self.s, i, end)
        if m is None:
            return None
        text = m.group()
        if text[-1] in "Xx" or _ID_CARD_STRICT_RE.match(text) or left_class(self.s, i) == "id_card":
            self.digits(text, i, [6, 8, 4], self.o.letter_x)
            return m.end()
        return None

    def spaced_groups(self, i: int, end: int) -> int | None:
        """Read space-separated digit groups (135 0123 4567, 6222 0202 0000 1234) group by group."""
        m = _SPACED_GROUPS_RE.match(self.s, i, end)
        if m is None:
            return None
        text = m.group()
        n_digits = len(text.replace(" ", ""))
        if n_digits < 7:
            return None
        self.code_groups(text, i, "telephone")
        return m.end()

    def time(self, i: int, end: int) -> int | None:
        """Read H:MM[:SS] [am/pm] as a clock time (and a following time range); scores go to ratio()."""
        s = self.s
        m = TIME_RE.match(s, i, end)
        if m is None:
            return None
        hour, minute = int(m.group("h")), int(m.group("m"))
        second = int(m.group("s")) if m.group("s") else None
        is_score = SCORE_LEFT_RE.search(s, max(0, i - 4), i) is not None
        if is_score or hour > 24 or minute > 59 or (second is not None and second > 59):
            return None if m.group("s") else self.ratio(i, end)
        ampm = m.group("ampm")
        if ampm and not _DAYPART_LEFT_RE.search(s, max(0, i - 3), i):
            self.em.text("上午" if ampm[0] in "Aa" else "下午", i)
        self.em.text(vb.read_clock(hour, minute, second, self.o.half_hour), i)
        rm = RANGE_SEP_RE.match(s, m.end(), end)
        if rm is not None and TIME_RE.match(s, rm.end(), end):
            sep = rm.group("sep")
            self.em.text(sep if sep in "至到" else "到", rm.start("sep"))
            return rm.end()
        return m.end()

    def ratio(self, i: int, end: int) -> int | None:
        """Read a:b as a比b (scores, ratios)."""
        m = _RATIO_RE.match(self.s, i, end)
        if m is None:
            return None
        self.em.text(vb.read_cardinal(m.group("a"), liang=False), i)
        self.em.text("比", m.start("b") - 1)
        self.em.text(vb.read_cardinal(m.group("b"), liang=False), m.start("b"))
        return m.end()

    def dotted(self, i: int, end: int) -> int | None:
        """Read dotted digit groups (IP addresses, versions) digit by digit joined by 点."""
        m = _DOTTED_RE.match(self.s, i, end)
        if m is None:
            return None
        text = m.group()
        j = i
        for part in text.split("."):
            if j > i:
                self.em.text("点", j - 1)
            self.digits(part, j)
            j += len(part) + 1
        return m.end()

    def word(self, i: int, end: int) -> int | None:
        """Read a Latin word: lexicon reading (WiFi → 歪飞), a currency code, else spelled letter by letter."""
        m = _WORD_RE.match(self.s, i, end)
        if m is None:
            return None
        text = m.group()
        reading = self.words.get(text.lower())
        if reading is None and "-" in text:
            reading = self.words.get(text.lower().replace("-", ""))
        if reading is not None:
            self.em.text(reading, i)
            return m.end()
        code = CURRENCY_SUFFIX_RE.match(self.s, i, end)
        if code is not None and code.end() == m.end():
            self.em.text(CURRENCY_NAMES[code.group("cur")], i)
            return m.end()
        for j, ch in enumerate(text, i):
            if ch.isalpha():
                self.em.text(LETTER_READINGS[ch.upper()], j)
        return m.end()

    # ----- single symbols -----
    def symbol(self, i: int, end: int) -> int:
        """Read or skip the single character at ``i`` (pause marks, symbol words, letters of other scripts)."""
        s = self.s
        c = s[i]
        if c in PAUSE_MARKS:
            if c == "." and i + 1 < end and s[i + 1] == ".":
                j = i
                while j < end and s[j] == ".":
                    j += 1
                self.em.pause("，", i)
                return j
            self.em.pause(PAUSE_MARKS[c], i)
            return i + 1
        if c in SILENT_MARKS:
            return i + 1
        if c == "/":
            after_word = i > 0 and (HANZI_CHAR_RE.match(s[i - 1]) is not None or s[i - 1].isalpha())
            if after_word and PER_RE.match(s, i + 1, end):
                self.em.text("每", i)
            else:
                self.em.pause("、", i)
            return i + 1
        if c in "#*":
            j = i
            while j < end and s[j] == c:
                j += 1
            after = s[j:j + 1]
            spoken = after in ("号", "键") or is_digit(after) or (i > 0 and is_digit(s[i - 1]))
            if j - i == 1 and (spoken or _KEY_LEFT_RE.search(s, max(0, i - 3), i)):
                word = "井" if c == "#" else "星"
                self.em.text(word if after == "号" else word + "号", i)
            return j  # otherwise markdown (**bold**, ## heading): silent
        if c in SYMBOL_WORDS:
            self.em.text(SYMBOL_WORDS[c], i)
            return i + 1
        if c in GREEK_READINGS:
            self.em.text(GREEK_READINGS[c], i)
            return i + 1
        if c.isascii() and c.isalpha():
            self.em.text(LETTER_READINGS[c.upper()], i)
            return i + 1
        value = unicodedata.numeric(c, None)
        if value is not None and 0 <= value < 10**8:
            ratio = Fraction(value).limit_denominator(1000)
            if ratio.denominator == 1:
                self.em.text(vb.read_cardinal(str(ratio.numerator), liang=False), i)
            else:
                self.em.text(vb.read_fraction(str(ratio.numerator), str(ratio.denominator)), i)
            return i + 1
        self.em.warn(f"skipped unsupported character {c!r} (U+{ord(c):04X})", i)
        return i + 1


def pieces(sc: Scanner, start: int, end: int, pattern: re.Pattern[str], read: Callable[[re.Match[str]], bool]) -> bool:
    """Read every ``pattern`` match in s[start:end] with ``read``; the text between goes to the generic rules.

    Returns whether ``read`` accepted at least one match.
    """
    cursor = start
    found = False
    for m in pattern.finditer(sc.s, start, end):
        if not m.group():
            continue
        if cursor < m.start():
            sc.run(cursor, m.start())
        if read(m):
            found = True
        else:
            sc.run(m.start(), m.end())
        cursor = m.end()
    if cursor < end:
        sc.run(cursor, end)
    return found
