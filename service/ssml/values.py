"""SSML attribute values: break times and strengths (ms), prosody rate (factor) and volume (dB), say-as kinds."""

from __future__ import annotations

import math
import re

from protos.voxpool.v1 import wire

#: W3C break strengths → pause in ms ("none" = no break at all).
BREAK_STRENGTH_MS = {"none": 0, "x-weak": 100, "weak": 250, "medium": 400, "strong": 700, "x-strong": 1000}
#: Prosody rate labels → factor of the voice's natural rate.
RATE_LABELS = {"x-slow": 0.6, "slow": 0.8, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.6}
#: Prosody volume labels → gain in dB (None = silent).
VOLUME_LABELS: dict[str, float | None] = {
    "silent": None, "x-soft": -12.0, "soft": -6.0, "medium": 0.0, "default": 0.0, "loud": 6.0, "x-loud": 10.0,
}
RATE_MIN, RATE_MAX = wire.SPEAKING_RATE_RANGE
VOLUME_MIN_DB, VOLUME_MAX_DB = wire.VOLUME_DB_RANGE
#: say-as interpret-as (W3C Note values and common vendor names) → the frontend's span kinds.
SAY_AS_KINDS = {
    "telephone": "telephone", "phone": "telephone",
    "digits": "digits",
    "cardinal": "cardinal", "number": "cardinal",
    "ordinal": "cardinal",  # read as 第 + the cardinal: the parser puts 第 in front when the text lacks it
    "currency": "amount", "money": "amount",
    "date": "date",
    "time": "time",
    "characters": "characters", "spell-out": "characters", "letters": "characters",
    "verbatim": "verbatim",
    "x-verification-code": "verification_code", "x-id-card": "id_card", "x-bank-card": "bank_card",
}
PINYIN_ALPHABETS = frozenset({"pinyin", "x-pinyin", "x-amazon-pinyin", "sapi-pinyin"})

_TIME_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)\s*")
_PERCENT_RE = re.compile(r"\s*([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*%\s*")
_NUMBER_RE = re.compile(r"\s*([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*")
_DB_RE = re.compile(r"\s*([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*dB\s*", re.I)


class ValueProblem(ValueError):
    """An attribute value that cannot be used; the message says what is accepted."""


def break_ms(time: str | None, strength: str | None) -> int:
    """Pause of a <break>: ``time`` ("600ms", "1.5s") wins over ``strength``; neither means medium."""
    if time is not None:
        m = _TIME_RE.fullmatch(time)
        if m is None:
            raise ValueProblem(f'break time="{time}" is not a duration; write it like "600ms" or "1.5s"')
        value = float(m.group(1)) * (1000.0 if m.group(2) == "s" else 1.0)
        return int(round(value))
    if strength is None:
        return BREAK_STRENGTH_MS["medium"]
    key = strength.strip().lower()
    if key not in BREAK_STRENGTH_MS:
        raise ValueProblem(f'break strength="{strength}" is unknown; use one of {", ".join(BREAK_STRENGTH_MS)}')
    return BREAK_STRENGTH_MS[key]


def prosody_rate(value: str, enclosing: float) -> float:
    """Rate factor (unclamped): a label, "80%" (of the voice's rate), "+20%"/"-20%" or a number (of the enclosing)."""
    key = value.strip().lower()
    if key in RATE_LABELS:
        return RATE_LABELS[key]
    m = _PERCENT_RE.fullmatch(value)
    if m is not None:
        number = float(m.group(2)) / 100.0
        if m.group(1) == "+":
            return enclosing * (1.0 + number)
        if m.group(1) == "-":
            return enclosing * (1.0 - number)
        return number
    m = _NUMBER_RE.fullmatch(value)
    if m is not None and not m.group(1):
        return enclosing * float(m.group(2))
    raise ValueProblem(
        f'prosody rate="{value}" is not a rate; use x-slow, slow, medium, fast, x-fast, a percentage of the '
        'normal rate ("80%"), a relative change ("+20%") or a multiplier ("1.2")'
    )


def prosody_volume(value: str, enclosing: float | None) -> float | None:
    """Gain in dB (unclamped; None = silent): a label, or "+6dB"/"-3dB" relative to the enclosing volume."""
    key = value.strip().lower()
    if key in VOLUME_LABELS:
        return VOLUME_LABELS[key]
    m = _DB_RE.fullmatch(value)
    if m is not None:
        delta = float(m.group(2)) * (-1.0 if m.group(1) == "-" else 1.0)
        return None if enclosing is None else enclosing + delta
    raise ValueProblem(
        f'prosody volume="{value}" is not a volume; use silent, x-soft, soft, medium, loud, x-loud or a change '
        'in decibels ("+6dB", "-3dB")'
    )


def clamp(value: float, low: float, high: float) -> float:
    """``value`` limited to [low, high] (NaN is refused earlier by the regexes)."""
    return min(high, max(low, value)) if math.isfinite(value) else high
