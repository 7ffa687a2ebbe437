"""Grapheme to pinyin for segmented Hanzi words: pypinyin phrase lookups, neutral tones, erhua and lexicon overrides.

What the Baker symbol set can express for erhua: it has no rhotacized finals (no ``uanr``); the corpus
wrote 玩儿 as one syllable ``wanr2`` and the voice was trained on it as the plain final followed by ``er5``
with no ``#0`` in between (``^ uan2 er5``). So a merged erhua syllable is emitted exactly that way
(``parse_tone3("wanr2")``); where 儿 cannot merge (nothing before it, or the syllable before is ``er``)
it stays a syllable of its own, ``er5`` when it is a suffix, its dictionary reading otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from pypinyin import Style
from pypinyin.constants import PHRASES_DICT
from pypinyin.core import Pinyin
from pypinyin.pinyin_dict import pinyin_dict as _PYPINYIN_CHARS

from .polyphones import ORIGIN_DOMAIN, disambiguate, domain_reading
from .symbols import PinyinError, parse_tone3

log = logging.getLogger(__name__)

_PINYIN = Pinyin()

#: Single-character words read in the neutral tone (structural particles and sentence-final particles).
NEUTRAL_PARTICLES = frozenset("的了吗呢吧啊呀嘛啦哦呗着得")
#: Reduplicated kinship terms and the like whose second syllable is neutral (妈妈 ma1 ma5, 谢谢 xie4 xie5).
NEUTRAL_REDUPLICATED = frozenset("爸妈哥姐弟妹爷奶姥舅叔婶姑伯婆公宝娃谢太星")
#: X儿 words in which 儿 is the morpheme "child", not the erhua suffix.
NON_ERHUA = frozenset(
    "女儿 婴儿 孤儿 幼儿 胎儿 健儿 宠儿 患儿 男儿 少儿 育儿 弃儿 乳儿 孙儿 侄儿 混血儿 新生儿 托儿".split()
)
ERHUA_CHAR = "儿"
#: Where a syllable's reading came from (shown by ``voxpool normalize --explain``).
ORIGIN_DICTIONARY = "phrase dictionary"
#: A word pypinyin's phrase table has no entry for: its characters get their most common readings.
ORIGIN_DEFAULT = "character default"
ORIGIN_NEUTRAL = "neutral-tone rule"
ORIGIN_LEXICON = "lexicon"

class LexiconError(ValueError):
    """A lexicon override entry is unusable; the message names the entry and what to change."""


def has_pinyin(char: str) -> bool:
    """True for a character pypinyin has a reading for (Hanzi, including the rare extension blocks)."""
    return len(char) == 1 and ord(char) in _PYPINYIN_CHARS


@dataclass
class Word:
    """A segmented word with its reading.

    ``pinyin[k]`` is the TONE3 syllable k (erhua merged: ``wanr2``); ``sources[k]`` the indices in the
    normalized text of the characters it reads (two for a merged erhua syllable). ``locked`` words come
    from the lexicon and are never changed by sandhi or neutral-tone rules; ``digits`` words are digit
    strings read one digit at a time, ``number`` words written-out numbers (三千二百五十). ``origins[k]`` says
    where syllable k's reading came from (an ``ORIGIN_*`` label, for ``--explain``); ``lexical`` is the reading
    before tone sandhi (filled in by the pipeline).
    """

    text: str
    start: int
    pinyin: list[str] = field(default_factory=list)
    sources: list[tuple[int, ...]] = field(default_factory=list)
    locked: bool = False
    digits: bool = False
    number: bool = False
    origins: list[str] = field(default_factory=list)
    lexical: list[str] = field(default_factory=list)

    @property
    def end(self) -> int:
        """Index just past the word's last character in the normalized text."""
        return self.start + len(self.text)


@dataclass(frozen=True)
class LexiconEntry:
    """One validated override: ``grapheme`` is read as ``syllables`` (TONE3), aligned to its characters."""

    grapheme: str
    syllables: tuple[str, ...]
    offsets: tuple[tuple[int, ...], ...]  # per syllable, character offsets inside the grapheme


class Lexicon:
    """Validated pronunciation overrides, matched leftmost-longest over a text.

    Matching looks up ``text[pos:pos + n]`` for each distinct entry length n of the entries starting with
    ``text[pos]`` (longest first), so a lexicon of thousands of entries costs a few dict lookups per character.
    """

    def __init__(self, entries: Mapping[str, str] | None = None) -> None:
        self._entries: dict[str, LexiconEntry] = {}
        for grapheme, reading in (entries or {}).items():
            self._entries[grapheme] = validate_entry(grapheme, reading)
        self._index()

    @classmethod
    def from_entries(cls, entries: Mapping[str, LexiconEntry]) -> Lexicon:
        """A lexicon of already-validated entries."""
        out = cls()
        out._entries = dict(entries)
        out._index()
        return out

    def _index(self) -> None:
        lengths: dict[str, set[int]] = {}
        for grapheme in self._entries:
            lengths.setdefault(grapheme[0], set()).add(len(grapheme))
        self._lengths = {c: tuple(sorted(ns, reverse=True)) for c, ns in lengths.items()}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, grapheme: object) -> bool:
        return grapheme in self._entries

    def match(self, text: str, pos: int) -> LexiconEntry | None:
        """The longest entry whose grapheme starts at ``text[pos]``, or None."""
        for n in self._lengths.get(text[pos], ()):
            entry = self._entries.get(text[pos:pos + n])
            if entry is not None:
                return entry
        return None

    def merged(self, other: Lexicon) -> Lexicon:
        """A lexicon with this one's entries overridden by ``other``'s."""
        return Lexicon.from_entries({**self._entries, **other._entries})


class LayeredLexicon:
    """Lexicons consulted together without copying: the longest match wins, the later layer on equal graphemes.

    Lets a per-call lexicon sit on top of a server lexicon of thousands of entries at no per-call cost.
    """

    def __init__(self, *layers: Lexicon) -> None:
        self._layers = tuple(layer for layer in layers if len(layer))

    def __len__(self) -> int:
        return sum(len(layer) for layer in self._layers)

    def match(self, text: str, pos: int) -> LexiconEntry | None:
        """The longest entry of any layer starting at ``text[pos]`` (later layers win ties)."""
        best: LexiconEntry | None = None
        for layer in self._layers:
            found = layer.match(text, pos)
            if found is not None and (best is None or len(found.grapheme) >= len(best.grapheme)):
                best = found
        return best


def validate_entry(grapheme: object, reading: object) -> LexiconEntry:
    """Check one override and align its syllables to the grapheme's characters."""
    if not isinstance(grapheme, str) or not grapheme.strip() or grapheme != grapheme.strip():
        raise LexiconError(f"lexicon entry {grapheme!r}: the grapheme must be a non-empty string without outer spaces")
    if not isinstance(reading, str) or not reading.split():
        raise LexiconError(f"lexicon entry {grapheme!r}: the reading must be tone-numbered pinyin like 'chao2 yang2'")
    syllables = tuple(reading.split())
    for syl in syllables:
        try:
            parse_tone3(syl)
        except PinyinError as exc:
            raise LexiconError(f"lexicon entry {grapheme!r} → {reading!r}: {exc}") from None
    bad = [c for c in grapheme if not has_pinyin(c)]
    if bad:
        raise LexiconError(
            f"lexicon entry {grapheme!r}: graphemes are matched on normalized text, which holds only Hanzi; "
            f"{''.join(bad)!r} never appears there (give Latin words a Hanzi reading with NormalizeOptions.extra_words)"
        )
    offsets: list[tuple[int, ...]] = []
    pos = 0
    for syl in syllables:
        erhua = parse_tone3(syl)[3]
        take = 2 if erhua else 1
        if pos + take > len(grapheme) or (erhua and grapheme[pos + 1] != ERHUA_CHAR):
            raise LexiconError(
                f"lexicon entry {grapheme!r} → {reading!r}: {len(syllables)} syllables for {len(grapheme)} "
                "characters; give one syllable per character (an erhua syllable like 'wanr2' covers a "
                "character and the 儿 after it)"
            )
        offsets.append(tuple(range(pos, pos + take)))
        pos += take
    if pos != len(grapheme):
        raise LexiconError(
            f"lexicon entry {grapheme!r} → {reading!r}: {len(grapheme)} characters but only "
            f"{len(syllables)} syllables; give one syllable per character"
        )
    return LexiconEntry(grapheme, syllables, tuple(offsets))


def lexicon_word(entry: LexiconEntry, start: int) -> Word:
    """A locked Word for a lexicon match at ``start`` in the normalized text."""
    return Word(
        text=entry.grapheme,
        start=start,
        pinyin=list(entry.syllables),
        sources=[tuple(start + o for o in offs) for offs in entry.offsets],
        locked=True,
        origins=[ORIGIN_LEXICON] * len(entry.syllables),
    )


@lru_cache(maxsize=65536)
def word_readings(text: str) -> tuple[str, ...]:
    """pypinyin readings (TONE3, neutral = 5, ü as v) of one word, one per character, from its phrase dictionary.

    Cached: call-center text repeats its vocabulary, and pypinyin is most of the frontend's time.
    """
    readings = _PINYIN.lazy_pinyin(text, style=Style.TONE3, neutral_tone_with_five=True, errors="ignore")
    if len(readings) != len(text):  # pypinyin grouped something unexpectedly: one character at a time
        readings = [_PINYIN.lazy_pinyin(c, style=Style.TONE3, neutral_tone_with_five=True)[0] for c in text]
    return tuple(_fix_syllable(s) for s in readings)


def _fix_syllable(syl: str) -> str:
    """Make a pypinyin syllable one the voice can say (tone digit present, ü as v)."""
    syl = syl.replace("ü", "v")
    if not syl[-1:].isdigit():
        syl += "5"
    return syl


def assign_pinyin(words: list[Word], erhua: bool = True) -> list[Word]:
    """Fill in pinyin/sources of the unlocked words of one clause; apply neutral tones and erhua.

    ``words`` are consecutive words of one clause (no pause between them). Returns the word list, with a
    bare 儿 word merged into the word before it when it is an erhua suffix.
    """
    for w in words:
        if w.locked or w.pinyin:
            continue
        w.pinyin = list(word_readings(w.text))
        w.origins = [ORIGIN_DICTIONARY if len(w.text) > 1 and w.text in PHRASES_DICT else ORIGIN_DEFAULT] * len(w.text)
        if len(w.text) > 1 and not w.digits:
            for k, syl in enumerate(domain_reading(w.text)[0]):
                if syl is not None:
                    w.pinyin[k] = syl
                    w.origins[k] = ORIGIN_DOMAIN
        w.sources = [(w.start + k,) for k in range(len(w.text))]
        if not w.digits:
            _neutral_tones(w)
    _polyphones(words)
    out: list[Word] = []
    for w in words:
        if erhua and not w.locked and not w.digits:
            _merge_erhua(w, out)
            if not w.pinyin:  # a bare 儿 merged into the previous word
                continue
        out.append(w)
    return out


def _polyphones(words: Sequence[Word]) -> None:
    """Context rules over one clause (see polyphones.py); locked and digit words give context only."""
    live = [w for w in words if not w.pinyin or len(w.origins) == len(w.pinyin)]
    disambiguate(
        [w.text for w in live], [w.pinyin for w in live], [w.origins for w in live],
        [w.locked or w.digits or w.number for w in live], ORIGIN_DEFAULT,
    )


def _neutral_tones(w: Word) -> None:
    """Neutral-tone rules pypinyin's dictionary does not cover."""
    if len(w.text) == 1 and w.text in NEUTRAL_PARTICLES:
        k = 0
    elif len(w.text) == 3 and w.text[1] == "得" and w.pinyin[1][:-1] == "de":  # 说得好 来得及: complement 得
        k = 1
    elif len(w.text) == 2 and w.text[0] == w.text[1] and w.text[0] in NEUTRAL_REDUPLICATED:
        k = 1
    else:
        return
    if w.pinyin[k][-1] != "5":
        w.pinyin[k] = w.pinyin[k][:-1] + "5"
        w.origins[k] = ORIGIN_NEUTRAL


def _merge_erhua(w: Word, done: list[Word]) -> None:
    """Merge 儿 suffixes of ``w`` into the syllable before them (``wan2`` + 儿 → ``wanr2``)."""
    k = 0
    while k < len(w.pinyin):
        src = w.sources[k]
        char_pos = src[0] - w.start
        if len(src) != 1 or w.text[char_pos] != ERHUA_CHAR:
            k += 1
            continue
        # The syllable before: inside this word, or the last one of the previous word when 儿 stands alone.
        if k > 0:
            host, host_k, context = w, k - 1, w.text[: char_pos + 1]
        elif len(w.text) == 1 and done and done[-1].end == w.start and done[-1].pinyin and not (
            done[-1].locked or done[-1].digits
        ):
            host, host_k, context = done[-1], len(done[-1].pinyin) - 1, done[-1].text + w.text
        else:
            k += 1
            continue
        if any(context.endswith(x) for x in NON_ERHUA):
            k += 1
            continue
        prev_syl = host.pinyin[host_k]
        if prev_syl[:-1].endswith("r"):  # er, or already rhotacized: 儿 stays a neutral syllable of its own
            w.pinyin[k] = "er5"
            k += 1
            continue
        host.pinyin[host_k] = prev_syl[:-1] + "r" + prev_syl[-1]
        host.sources[host_k] = host.sources[host_k] + src
        if host is w:
            del w.pinyin[k], w.sources[k], w.origins[k]
        else:
            host.text += w.text
            w.pinyin.clear()
            w.sources.clear()
            w.origins.clear()
            return
