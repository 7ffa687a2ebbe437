"""Mandarin text normalization for call-center speech: numbers, codes, amounts, dates, letters → Hanzi + pauses."""

from __future__ import annotations

import html
import logging
import re
import unicodedata
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from models.frontend.tn_core import Emitter
from models.frontend.tn_options import NormalizationError, NormalizeOptions
from models.frontend.tn_rules import Scanner
from models.frontend.tn_spans import SPAN_KINDS, read_span
from models.frontend.tn_tables import HANZI_CHAR_RE

logger = logging.getLogger(__name__)

__all__ = ["NormalizationError", "NormalizeOptions", "NormalizedText", "Span", "SPAN_KINDS", "normalize"]


@dataclass(frozen=True)
class Span:
    """A stretch of the input whose reading the dialog manager knows: input[start:end] is a ``kind``."""

    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class NormalizedText:
    """Hanzi + pause marks, with the index of the input char each output char came from.

    ``readings`` fixes the reading of some output chars (index → TONE3 syllable): a say-as name's surname.
    """

    text: str
    source_index: tuple[int, ...]
    warnings: tuple[str, ...]
    readings: tuple[tuple[int, str], ...] = ()


#: Markup tags and comments (removed with a warning) and HTML character entities (decoded).
_MARKUP_RE = re.compile(
    r"<!--.*?-->|</?[A-Za-z][A-Za-z0-9:_.-]*(?:\s[^<>]*)?/?>|&(?:[A-Za-z]{2,8}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});",
    re.S,
)
_SPACE_OUT = " "


def _is_emoji(cp: int) -> bool:
    return (0x1F000 <= cp <= 0x1FAFF or 0x2600 <= cp <= 0x27BF or 0x2B00 <= cp <= 0x2BFF or 0x2300 <= cp <= 0x23FF
            or 0xFE00 <= cp <= 0xFE0F or cp in (0x200D, 0x20E3) or 0xE0000 <= cp <= 0xE007F)


@lru_cache(maxsize=4096)
def _prep_char(c: str) -> tuple[str, str | None]:
    """One input char → (replacement, warning reason). Replacement "" drops the char."""
    cp = ord(c)
    if 0x20 <= cp < 0x7F or c == "\n":
        return c, None
    if 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x3134F:
        return c, None
    if c in "\t\r":
        return (_SPACE_OUT if c == "\t" else "\n"), None
    if c in "\u2028\u2029\x85":
        return "\n", None
    if _is_emoji(cp):
        return "", "emoji"
    category = unicodedata.category(c)
    if category == "Cc" or category == "Cf":
        return "", "control or zero-width character"
    if category in ("Cs", "Co", "Cn"):
        return "", "unsupported character"
    if c.isspace():
        return _SPACE_OUT, None
    if 0xFF01 <= cp <= 0xFF5E and cp != 0xFF0C:
        return chr(cp - 0xFEE0), None
    if category == "Nd":
        return str(unicodedata.decimal(c)), None
    if c == "〇":
        return "零", None
    if 0x2F00 <= cp <= 0x2FDF or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F:
        folded = unicodedata.normalize("NFKC", c)
        if len(folded) == 1 and HANZI_CHAR_RE.match(folded):
            return folded, None
        return "", "unsupported character"
    if category.startswith("L"):
        base = unicodedata.normalize("NFKD", c)[:1]
        if base.isascii() and base.isalpha():
            return base, None
    if category == "Mn":
        return "", None
    return c, None


def _preprocess(text: str) -> tuple[str, list[int], list[str]]:
    """Clean ``text`` for the rules: returns (clean text, input index of each clean char, warnings)."""
    out: list[str] = []
    src: list[int] = []
    warnings: list[str] = []
    runs: list[list[object]] = []  # [reason, first, last]

    def note(reason: str, index: int) -> None:
        if runs and runs[-1][0] == reason and runs[-1][2] == index - 1:
            runs[-1][2] = index
        else:
            runs.append([reason, index, index])

    special: dict[int, tuple[int, str]] = {}
    if "<" in text or "&" in text:
        for m in _MARKUP_RE.finditer(text):
            token = m.group()
            if token.startswith("&"):
                decoded = html.unescape(token)
                if len(decoded) == 1 and decoded != token:
                    special[m.start()] = (m.end(), decoded)
            else:
                special[m.start()] = (m.end(), "")
                warnings.append(f"removed markup {token[:40]!r} at {m.start()}")
    n = len(text)
    j = 0
    while j < n:
        if special and j in special:
            stop, replacement = special[j]
            if replacement:
                rep, reason = _prep_char(replacement)
                if rep:
                    out.append(rep)
                    src.append(j)
            j = stop
            continue
        c = text[j]
        rep, reason = _prep_char(c)
        if reason is not None:
            note(reason, j)
        if rep:
            if rep == _SPACE_OUT or rep == "\n":
                if out and out[-1] in (_SPACE_OUT, "\n"):
                    if rep == "\n" and out[-1] == _SPACE_OUT:
                        out[-1] = "\n"
                    j += 1
                    continue
            if c == "\r" and j + 1 < n and text[j + 1] == "\n":
                j += 1
                continue
            out.extend(rep)
            src.extend([j] * len(rep))
        j += 1
    for reason, first, last in runs:
        where = f"{first}" if first == last else f"{first}-{last}"
        warnings.append(f"removed {reason} at {where}")
    return "".join(out), src, warnings


def _check_spans(text: str, spans: Sequence[Span]) -> list[Span]:
    ordered: list[Span] = []
    for span in spans:
        if not isinstance(span, Span):
            raise NormalizationError(f"spans must be Span objects, got {type(span).__name__}")
        if not isinstance(span.start, int) or not isinstance(span.end, int):
            raise NormalizationError(f"span offsets must be ints: {span!r}")
        if not 0 <= span.start < span.end <= len(text):
            raise NormalizationError(f"span {span.start}-{span.end} is empty or outside the text (length {len(text)})")
        if span.kind not in SPAN_KINDS:
            raise NormalizationError(f"unknown span kind {span.kind!r}; known: {', '.join(sorted(SPAN_KINDS))}")
        ordered.append(span)
    ordered.sort(key=lambda sp: sp.start)
    for a, b in zip(ordered, ordered[1:], strict=False):
        if b.start < a.end:
            raise NormalizationError(f"spans overlap: {a.start}-{a.end} ({a.kind}) and {b.start}-{b.end} ({b.kind})")
    return ordered


_DEFAULT_OPTIONS = NormalizeOptions()


def normalize(text: str, options: NormalizeOptions = _DEFAULT_OPTIONS, spans: Sequence[Span] = ()) -> NormalizedText:
    """Normalize Mandarin ``text`` for speech: every number, code, letter and symbol becomes Hanzi.

    Output is Hanzi plus pause marks (，clause, 、 short pause between digit groups, 。！？ sentence ends).
    ``spans`` (input offsets) fix the reading of parts of the text and are applied before the generic
    rules. Raises NormalizationError only for bad spans; any other input is normalized (with warnings
    for what was skipped).
    """
    if not isinstance(text, str):
        raise NormalizationError(f"text must be str, not {type(text).__name__}")
    ordered = _check_spans(text, spans) if spans else []
    clean, src, warnings = _preprocess(text)
    em = Emitter()
    scanner = Scanner(clean, options, em)
    cursor = 0
    for span in ordered:
        s_start = bisect_left(src, span.start)
        s_end = bisect_left(src, span.end)
        if cursor < s_start:
            scanner.run(cursor, s_start)
        if s_start < s_end:
            read_span(scanner, span.kind, s_start, s_end)
        cursor = max(cursor, s_end)
    if cursor < len(clean):
        scanner.run(cursor, len(clean))
    source_index: list[int] = []
    last = 0
    for pos in em.positions:
        index = src[pos] if pos < len(src) else (src[-1] if src else 0)
        last = index if index > last else last
        source_index.append(last)
    for message, pos in em.warnings:
        warnings.append(f"{message} at {src[pos] if pos < len(src) else len(text)}")
    if warnings:
        logger.debug("normalize: %d warnings", len(warnings))  # their text quotes the caller's: the caller gets them
    readings = tuple(sorted((k, v) for k, v in em.readings.items() if k < len(em.chars)))
    return NormalizedText("".join(em.chars), tuple(source_index), tuple(warnings), readings)
