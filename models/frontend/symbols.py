"""The Baker voice's symbol table (219 ids) and the pinyin syllable → (initial, final) split it was trained with."""

from __future__ import annotations

import re
from functools import lru_cache

PAD = "pad"
SIL = "sil"
EOS = "eos"
#: Prosody marks, weakest first: #0 between syllables of a prosodic word, #1 prosodic-word boundary,
#: #2 prosodic-phrase boundary, #3 intonational-phrase boundary (the voice pauses ≈0.3 s there).
PROSODY_MARKS: tuple[str, ...] = ("#0", "#1", "#2", "#3")
ZERO_INITIAL = "^"
#: 22 initials; "^" is the zero initial (syllables spelled with y/w or a bare vowel).
INITIALS: tuple[str, ...] = (
    ZERO_INITIAL, "b", "c", "ch", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "q", "r", "s", "sh", "t",
    "x", "z", "zh",
)
#: 38 finals. "ii" is the apical vowel after z/c/s, "iii" after zh/ch/sh/r; "v" is ü.
FINALS: tuple[str, ...] = (
    "a", "ai", "an", "ang", "ao", "e", "ei", "en", "eng", "er", "i", "ia", "ian", "iang", "iao", "ie", "ii",
    "iii", "in", "ing", "iong", "iou", "o", "ong", "ou", "u", "ua", "uai", "uan", "uang", "uei", "uen", "ueng",
    "uo", "v", "van", "ve", "vn",
)
TONES: tuple[int, ...] = (1, 2, 3, 4, 5)

#: Every symbol in id order: pad, sil, #0..#3, initials, final×tone, eos.
SYMBOLS: tuple[str, ...] = (
    (PAD, SIL) + PROSODY_MARKS + INITIALS + tuple(f"{f}{t}" for f in FINALS for t in TONES) + (EOS,)
)
SYMBOL_TO_ID: dict[str, int] = {s: i for i, s in enumerate(SYMBOLS)}
ID_TO_SYMBOL: dict[int, str] = dict(enumerate(SYMBOLS))
PAD_ID = SYMBOL_TO_ID[PAD]
SIL_ID = SYMBOL_TO_ID[SIL]
EOS_ID = SYMBOL_TO_ID[EOS]
MARK_IDS: frozenset[int] = frozenset(SYMBOL_TO_ID[m] for m in PROSODY_MARKS)

_INITIALS_BY_LENGTH = tuple(sorted((i for i in INITIALS if i != ZERO_INITIAL), key=len, reverse=True))
_FINAL_SET = frozenset(FINALS)
_I_FINALS = frozenset(f for f in FINALS if f.startswith("i") and f not in ("ii", "iii"))
_V_FINALS = frozenset(f for f in FINALS if f.startswith("v"))
_U_GLIDE_FINALS = frozenset(f for f in FINALS if f.startswith("u") and f != "u")
# Finals that are spelled without y/w when there is no initial (a, ai, an, ... er, o, ou).
_BARE_FINALS = frozenset(f for f in FINALS if f[0] in "aeo" and f != "ong")
# Syllabic nasals and interjection spellings pypinyin can return (嗯 n2, 呣 m2, 哼 hng, 欸 ê); the voice has
# no such finals, so they get the nearest syllable it knows (the mapper itself maps "ng" to "^ en").
_INTERJECTIONS: dict[str, tuple[str, str]] = {
    "ng": (ZERO_INITIAL, "en"), "n": (ZERO_INITIAL, "en"), "m": (ZERO_INITIAL, "en"),
    "hm": ("h", "en"), "hng": ("h", "eng"), "ê": (ZERO_INITIAL, "ei"), "yo": (ZERO_INITIAL, "iou"),
}
_SYLLABLE_RE = re.compile(r"^([a-zêü]+?)(r?)([1-5])$")


class PinyinError(ValueError):
    """A pinyin syllable is not one the voice can say (bad spelling, tone or phonotactics)."""


def _split_body(body: str) -> tuple[str, str]:
    """Split a toneless syllable (``v`` for ü) into (initial, final) or raise PinyinError."""
    if body in _INTERJECTIONS:
        return _INTERJECTIONS[body]
    if body.startswith("y"):
        rest = body[1:]
        if rest.startswith("u"):  # yu yuan yue yun: the glide is ü
            final = "v" + rest[1:]
        elif rest.startswith("i"):  # yi yin ying
            final = rest
        else:  # ya yan yang yao ye you yong
            final = "i" + rest
        initial = ZERO_INITIAL
    elif body.startswith("w"):
        rest = body[1:]
        final = rest if rest.startswith("u") else "u" + rest  # wu → u, wa → ua, wei → uei
        initial = ZERO_INITIAL
    else:
        initial = next((i for i in _INITIALS_BY_LENGTH if body.startswith(i)), ZERO_INITIAL)
        final = body[len(initial):] if initial != ZERO_INITIAL else body
        if initial == ZERO_INITIAL and final not in _BARE_FINALS:
            raise PinyinError(f"{body!r} is not a pinyin syllable (a vowel-initial syllable is spelled with y/w)")
        if initial in ("j", "q", "x") and final.startswith("u"):
            final = "v" + final[1:]  # ju → j v, que → q ve
        elif final == "i" and initial in ("zh", "ch", "sh", "r"):
            final = "iii"
        elif final == "i" and initial in ("z", "c", "s"):
            final = "ii"
    # Abbreviated spellings: iu = iou, ui = uei, un = uen (vn after j/q/x, handled above), ue = ve after l/n.
    final = {"iu": "iou", "ui": "uei", "un": "uen", "ue": "ve"}.get(final, final)
    if final not in _FINAL_SET:
        raise PinyinError(f"{body!r} has no final the voice knows")
    _check_phonotactics(body, initial, final)
    return initial, final


def _check_phonotactics(body: str, initial: str, final: str) -> None:
    """Reject (initial, final) pairs that Mandarin does not have, such as ``gi`` or ``zv``."""
    bad = False
    if initial in ("j", "q", "x"):
        bad = final not in _I_FINALS and final not in _V_FINALS
    elif initial in ("zh", "ch", "sh", "r", "z", "c", "s", "g", "k", "h"):
        apical = "iii" if initial in ("zh", "ch", "sh", "r") else "ii"
        bad = final in _I_FINALS or final in _V_FINALS or final in ("ii", "iii") and final != apical
    elif initial in ("b", "p", "m", "f"):
        bad = final in _V_FINALS or final in _U_GLIDE_FINALS or final in ("ii", "iii", "er")
    elif initial in ("d", "t", "n", "l"):
        bad = final in ("ii", "iii", "er") or (final in _V_FINALS and initial in ("d", "t"))
    elif initial == ZERO_INITIAL:
        bad = final in ("ii", "iii")
    if initial != ZERO_INITIAL and final == "er":
        bad = True
    if bad:
        raise PinyinError(f"{body!r} is not a Mandarin syllable ({initial} + {final})")


@lru_cache(maxsize=4096)
def split_syllable(syllable: str) -> tuple[str, str]:
    """Split a toneless pinyin syllable into the voice's (initial, final): ``yi`` → (^, i), ``ju`` → (j, v).

    ``ü`` may be written ``v`` or ``ü``. Raises PinyinError for anything the voice cannot say.
    """
    body = syllable.strip().lower().replace("ü", "v").replace("u:", "v")
    if not body or not body.isascii() and body not in _INTERJECTIONS:
        raise PinyinError(f"{syllable!r} is not a pinyin syllable")
    return _split_body(body)


@lru_cache(maxsize=8192)
def parse_tone3(syllable: str) -> tuple[str, str, int, bool]:
    """Parse a TONE3 syllable (``chao2``, ``wanr2``, ``ma5``) into (initial, final, tone, erhua).

    ``erhua`` is true for an ``r``-suffixed syllable (``wanr2`` = ``wan2`` + er5), which is only valid when
    the syllable without ``r`` exists and is not ``er`` itself. Raises PinyinError otherwise.
    """
    text = syllable.strip().lower().replace("ü", "v")
    m = _SYLLABLE_RE.match(text)
    if m is None:
        raise PinyinError(f"{syllable!r} is not tone-numbered pinyin (expected e.g. 'chao2', neutral tone 5)")
    body, r, tone = m.group(1), m.group(2), int(m.group(3))
    if r and body == "e":  # "er2" is the syllable er, not e + erhua
        body, r = "er", ""
    initial, final = split_syllable(body)
    if r and final == "er":
        raise PinyinError(f"{syllable!r}: er cannot take an erhua r")
    return initial, final, tone, bool(r)


def syllable_symbols(syllable: str) -> list[str]:
    """Phone symbols of one TONE3 syllable: ``hao3`` → [``h``, ``ao3``]; ``wanr2`` → [``^``, ``uan2``, ``er5``]."""
    initial, final, tone, erhua = parse_tone3(syllable)
    out = [initial, f"{final}{tone}"]
    if erhua:
        out.append("er5")
    return out


def symbols_to_ids(symbols: list[str]) -> list[int]:
    """Map symbols to ids; raises KeyError naming the first unknown symbol."""
    try:
        return [SYMBOL_TO_ID[s] for s in symbols]
    except KeyError as exc:
        raise KeyError(f"symbol {exc.args[0]!r} is not in the Baker symbol table") from None
