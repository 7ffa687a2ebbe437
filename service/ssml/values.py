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
    # vendor values: Azure number_digit, Aliyun id and punctuation (read character by character)
    "number_digit": "digits", "id": "characters", "punctuation": "characters",
    "name": "name", "address": "address", "fraction": "fraction", "measure": "measure", "unit": "measure",
    "duration": "duration",
}
#: say-as date formats (W3C Note, Azure, Polly, Google with repeated letters like yyyymmdd) → span kinds.
DATE_FORMATS = ("ymd", "mdy", "dmy", "ydm", "ym", "my", "md", "dm", "y", "m", "d")
#: say-as duration formats (Azure hms/hm/ms, Google h:m:s/h:m/m:s) → span kinds.
DURATION_FORMATS = ("hms", "hm", "ms")
#: Pinyin with tone numbers: W3C-style names, Aliyun and Tencent (py), Polly (x-amazon-pinyin), Azure (sapi).
PINYIN_ALPHABETS = frozenset({"pinyin", "x-pinyin", "x-amazon-pinyin", "sapi-pinyin", "py", "sapi",
                              "x-microsoft-sapi"})

_TONE_MARKS = {m: (base, tone) for base, marks in (("a", "āáǎà"), ("e", "ēéěè"), ("i", "īíǐì"), ("o", "ōóǒò"),
                                                   ("u", "ūúǔù"), ("v", "ǖǘǚǜ"))
               for tone, m in enumerate(marks, start=1)}
_SYLLABLE_RE = re.compile(r"[a-zv]+[1-5]?|[1-5]")
_SYLLABLES_RE = re.compile(r"(?:[a-zv]+[1-5])*[a-zv]*|[1-5]")
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


def pinyin_syllables(ph: str) -> str:
    """A vendor's pinyin as voxpool's tone-numbered syllables, space-separated: "chao2 yang2" as is, Polly's
    "chao2yang2", Azure SAPI's "chao 2 yang 2", tone marks ("cháo yáng", unmarked = neutral tone 5), ü as v."""
    text = ph.strip().lower().replace("u:", "v").replace("ü", "v")
    marked = any(c in _TONE_MARKS for c in text)
    out: list[str] = []
    for run in re.split(r"[\s'’\-·.,]+", text):
        if not run:
            continue
        if marked:
            tones = [_TONE_MARKS[c][1] for c in run if c in _TONE_MARKS]
            if len(tones) > 1:
                raise ValueProblem(f'phoneme ph="{ph}": "{run}" has {len(tones)} tone marks; separate the '
                                   "syllables with spaces")
            plain = "".join(_TONE_MARKS[c][0] if c in _TONE_MARKS else c for c in run)
            out.append(plain + str(tones[0] if tones else 5))
            continue
        if not _SYLLABLES_RE.fullmatch(run):
            out.append(run)  # not pinyin: kept as written, so the lexicon check names it
            continue
        for token in _SYLLABLE_RE.findall(run):
            if token.isdigit() and out and not out[-1][-1].isdigit():
                out[-1] += token  # Azure SAPI: the tone is a token of its own ("chao 2")
            else:
                out.append(token)
    return " ".join(out)


def aliyun_rate(value: str) -> float | None:
    """Aliyun's speech rate, an integer -500..500, as a factor 0.5-2.0 (its documented formula: -500 → 0.5×,
    500 → 2×, factor = 1 / (1 - 0.002·r) below 0 and 1 / (1 - 0.001·r) above); None when it is not one."""
    m = re.fullmatch(r"\s*([+-]?\d+)\s*", value)
    if m is None:
        return None
    r = max(-500, min(500, int(m.group(1))))
    return 1.0 / (1.0 - (0.002 if r < 0 else 0.001) * r)


def aliyun_volume_db(value: str) -> float | None:
    """Aliyun's volume, an integer 0..100 (default 50), as a gain: an amplitude ratio to 50 in dB (100 → +6 dB,
    25 → -6 dB); 0 is silent (None). Raises ValueProblem for anything else."""
    m = re.fullmatch(r"\s*(\d+)\s*", value)
    if m is None or int(m.group(1)) > 100:
        raise ValueProblem(f'speak volume="{value}" is not a volume; Aliyun\'s volume is an integer 0-100 '
                           "(50 = the voice's level)")
    level = int(m.group(1))
    return None if level == 0 else 20.0 * math.log10(level / 50.0)


def clamp(value: float, low: float, high: float) -> float:
    """``value`` limited to [low, high] (NaN is refused earlier by the regexes)."""
    return min(high, max(low, value)) if math.isfinite(value) else high
