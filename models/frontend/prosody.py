"""Prosodic structure: word segmentation (jieba), prosodic words and phrases, and the marked phone sequence.

The voice was trained on Baker's prosody labels: ``#0`` between the syllables of a prosodic word, ``#1``
between prosodic words, ``#2`` between prosodic phrases, ``#3`` at intonational-phrase breaks, ``sil`` at
the two ends of an utterance only, then ``eos``. On the voice, ``#3`` gives a real pause, ``#2`` a
short one, ``#1``/``#0`` none (docs/frontend.md). The rules used here:

* Words: jieba's segmentation of each run of Hanzi, with lexicon entries and numerals cut out first.
  A digit string (three or more of 零一二三四五六七八九〇, or any run with 幺) is read digit by digit; up to 5
  digits form one prosodic word, longer strings groups of 3–4 (11 digits → 3-4-4). A written-out number
  (a run of numerals with 十百千万亿 or a decimal 点, starting with a digit or 十: 三千二百五十, 零点六) is a
  word of its own, cut after 万/亿 and, where a piece would exceed 4 syllables, after 千/百. Units (号 日 月
  年 点 分 元 角 岁 …) join the number before them, as clitics do.
* Prosodic words (``#1`` between them): clitics (的 了 吗 呢 吧 们 …) join the word before them; a run
  of one-syllable words is cut into prosodic words of 2–3 syllables (我很好, 按一); an isolated one-syllable
  word joins the following word when that gives at most 4 syllables, else the preceding one when that gives
  at most 3, else it stands alone. Words longer than 4 syllables are split at dictionary sub-words.
* Prosodic phrases (``#2``): prosodic words are packed left to right; a new phrase starts before a
  prosodic word when the current phrase has at least 3 syllables and adding the word would make it longer
  than ``phrase_max_syllables``. ``、`` (the normalizer's short pause between digit groups) is also ``#2``.
* Intonational phrases (``#3``): clause punctuation inside the segment (，；：and sentence ends 。！？ that
  are not the last thing in the segment).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .g2p import Word
from .polyphones import domain_words
from .symbols import EOS, SIL, syllable_symbols

log = logging.getLogger(__name__)

#: Pause characters of normalized text and the mark they become inside a segment.
PAUSE_MARKS: dict[str, str] = {
    "，": "#3", "。": "#3", "！": "#3", "？": "#3", "；": "#3", "：": "#3",
    ",": "#3", ".": "#3", "!": "#3", "?": "#3", ";": "#3", ":": "#3",
    "、": "#2",
}
MARK_STRENGTH = {"#0": 0, "#1": 1, "#2": 2, "#3": 3}
#: One-character words that lean on the word before them.
CLITICS = frozenset("的地得了着过吗呢吧啊呀嘛啦哦呗们")
#: One-character words that lean on a number before them.
UNIT_CLITICS = frozenset("号日月年点分秒元角块岁个次期天楼层位倍")
DIGIT_CHARS = frozenset("零〇一二三四五六七八九幺")
_NUMERAL_CHARS = DIGIT_CHARS | frozenset("两十百千万亿点")
_UNIT_CHARS = frozenset("十百千万亿")
#: Dictionary entries of jieba's that hurt prosody (they glue a pronoun to a verb) and call-center words it lacks.
_JIEBA_REMOVE = ("输入您",)
_JIEBA_ADD = ("取件码", "还款日", "应还", "人工客服")
MAX_PROSODIC_WORD_SYLLABLES = 4


class WordSegmenter:
    """jieba word segmentation, initialised once (lazily, thread-safe, quiet) with its dictionary cache on disk."""

    def __init__(self, cache_dir: Path | None = None) -> None:
        self._cache_dir = cache_dir
        self._lock = threading.Lock()
        self._tokenizer = None
        self.init_seconds: float | None = None

    def _resolve_cache_dir(self) -> Path:
        if self._cache_dir is not None:
            return self._cache_dir
        from models.voices.packages import cache_dir

        return cache_dir() / "jieba"

    def initialize(self) -> float:
        """Load jieba's dictionary (≈0.8 s on the 2-core dev machine, once per process); returns seconds spent."""
        if self._tokenizer is not None:
            return 0.0
        with self._lock:
            if self._tokenizer is not None:
                return 0.0
            t0 = time.perf_counter()
            import jieba

            logging.getLogger("jieba").setLevel(logging.WARNING)
            jieba.setLogLevel(logging.WARNING)
            tokenizer = jieba.Tokenizer()
            folder = self._resolve_cache_dir()
            try:
                folder.mkdir(parents=True, exist_ok=True)
                tokenizer.tmp_dir = str(folder)
            except OSError as exc:  # read-only home: jieba falls back to the system temp dir
                log.warning("jieba cache folder %s unusable (%s); using %s", folder, exc, tokenizer.tmp_dir or "/tmp")
            tokenizer.initialize()
            for word in _JIEBA_REMOVE:
                tokenizer.del_word(word)
            for word in (*_JIEBA_ADD, *domain_words()):
                tokenizer.add_word(word, tokenizer.suggest_freq(word, tune=False) + 1)
            self._tokenizer = tokenizer
            self.init_seconds = time.perf_counter() - t0
            log.info("jieba dictionary loaded in %.3f s (cache in %s)", self.init_seconds, tokenizer.tmp_dir)
            return self.init_seconds

    def cut(self, text: str) -> list[str]:
        """Words of a run of Hanzi (jieba's accurate mode with HMM for unknown words)."""
        if self._tokenizer is None:
            self.initialize()
        return self._tokenizer.lcut(text, HMM=True)

    def is_word(self, text: str) -> bool:
        """True when ``text`` is an entry of jieba's dictionary."""
        if self._tokenizer is None:
            self.initialize()
        return self._tokenizer.FREQ.get(text, 0) > 0


_DEFAULT_SEGMENTER: WordSegmenter | None = None
_DEFAULT_LOCK = threading.Lock()


def default_segmenter() -> WordSegmenter:
    """The process-wide WordSegmenter (jieba is loaded on first use)."""
    global _DEFAULT_SEGMENTER
    with _DEFAULT_LOCK:
        if _DEFAULT_SEGMENTER is None:
            _DEFAULT_SEGMENTER = WordSegmenter()
        return _DEFAULT_SEGMENTER


def digit_groups(n: int) -> list[int]:
    """Sizes of the prosodic groups of an n-digit string: one group up to 5 digits, else 3–4 each (11 → 3-4-4)."""
    if n <= 5:
        return [n]
    k = -(-n // 4)
    base, extra = divmod(n, k)
    return [base + (1 if i >= k - extra else 0) for i in range(k)]


def number_pieces(number: str) -> list[str]:
    """Prosodic pieces of a written-out number: cut after 万/亿, then after 千/百 while a piece exceeds 4."""
    sections, cur = [], ""
    for c in number:
        cur += c
        if c in "万亿":
            sections.append(cur)
            cur = ""
    if cur:
        sections.append(cur)
    out = []
    for sec in sections:
        while len(sec) > MAX_PROSODIC_WORD_SYLLABLES:
            cut = next((i + 1 for i, c in enumerate(sec[:-2]) if c in "千百" and i >= 1), None)
            if cut is None:
                break
            out.append(sec[:cut])
            sec = sec[cut:]
        out.append(sec)
    return out


def _split_long(word: str, is_word: Callable[[str], bool]) -> list[str]:
    """Split a word longer than MAX_PROSODIC_WORD_SYLLABLES at its longest dictionary prefixes."""
    out, pos = [], 0
    while len(word) - pos > MAX_PROSODIC_WORD_SYLLABLES:
        k = next(
            (k for k in range(MAX_PROSODIC_WORD_SYLLABLES, 1, -1) if is_word(word[pos:pos + k])),
            2,
        )
        out.append(word[pos:pos + k])
        pos += k
    out.append(word[pos:])
    return out


def _numeral_at(text: str, j: int) -> tuple[int, str] | None:
    """The numeral starting at ``text[j]``: (end, "digits" | "number"), or None if it is left to jieba."""
    if text[j] not in _NUMERAL_CHARS or text[j] in "点百千万亿":
        return None
    k = j
    while k < len(text) and text[k] in _NUMERAL_CHARS:
        k += 1
    while k > j and text[k - 1] == "点":  # a decimal point needs a digit after it
        k -= 1
    run = text[j:k]
    if len(run) >= 2 and (any(c in _UNIT_CHARS for c in run) or "点" in run):
        return k, "number"
    if all(c in DIGIT_CHARS for c in run) and (len(run) >= 3 or "幺" in run):
        return k, "digits"
    return None


def segment_run(text: str, start: int, segmenter: WordSegmenter) -> list[Word]:
    """Words (without readings) of a run of Hanzi starting at ``start`` in the normalized text."""
    words: list[Word] = []
    pos = 0
    n = len(text)

    def plain(end: int) -> None:
        nonlocal pos
        if end <= pos:
            return
        for w in segmenter.cut(text[pos:end]):
            pieces = _split_long(w, segmenter.is_word) if len(w) > MAX_PROSODIC_WORD_SYLLABLES else (w,)
            for piece in pieces:
                words.append(Word(piece, start + pos))
                pos += len(piece)

    j = 0
    while j < n:
        found = _numeral_at(text, j)
        if found is None:
            j += 1
            continue
        end, kind = found
        plain(j)
        if kind == "digits":
            for size in digit_groups(end - j):
                words.append(Word(text[pos:pos + size], start + pos, digits=True))
                pos += size
        else:
            for piece in number_pieces(text[j:end]):
                words.append(Word(piece, start + pos, number=True))
                pos += len(piece)
        if end < n and text[end] in UNIT_CLITICS:  # 三十|分支出 → 三十分|支出: the unit belongs to the number
            words.append(Word(text[end], start + end))
            pos = end = end + 1
        j = end
    plain(n)
    return words


def group_prosodic_words(words: Sequence[Word]) -> list[list[Word]]:
    """Group the words of one clause into prosodic words (see the module docstring for the rules)."""
    units: list[list[Word]] = []
    for w in words:
        prev = units[-1] if units else None
        if prev is not None and len(w.text) == 1 and not (w.digits or w.number) and prev[-1].end == w.start and (
            w.text in CLITICS or (w.text in UNIT_CLITICS and (prev[-1].digits or prev[-1].number))
        ):
            prev.append(w)
        else:
            units.append([w])

    def size(unit: list[Word]) -> int:
        return sum(len(w.pinyin) for w in unit)

    def single(unit: list[Word]) -> bool:
        return len(unit) == 1 and len(unit[0].pinyin) == 1 and not (unit[0].digits or unit[0].number)

    def closed(unit: list[Word]) -> bool:  # numerals take no neighbours but their units
        return unit[0].digits or unit[0].number

    # Runs of one-syllable words → chunks of 2–3 syllables.
    chunked: list[list[Word]] = []
    i = 0
    while i < len(units):
        if not single(units[i]):
            chunked.append(units[i])
            i += 1
            continue
        j = i
        while j < len(units) and single(units[j]):
            j += 1
        run = units[i:j]
        k = -(-len(run) // 3)
        base, extra = divmod(len(run), k)
        pos = 0
        for c in range(k):
            take = base + (1 if c < extra else 0)
            chunked.append([w for u in run[pos:pos + take] for w in u])
            pos += take
        i = j

    # Isolated one-syllable words lean on a neighbour.
    out: list[list[Word]] = []
    i = 0
    while i < len(chunked):
        unit = chunked[i]
        if single(unit):
            nxt = chunked[i + 1] if i + 1 < len(chunked) else None
            if nxt is not None and not closed(nxt) and size(unit) + size(nxt) <= MAX_PROSODIC_WORD_SYLLABLES:
                out.append(unit + nxt)
                i += 2
                continue
            if out and not closed(out[-1]) and size(out[-1]) + size(unit) <= 3:
                out[-1] = out[-1] + unit
                i += 1
                continue
        out.append(unit)
        i += 1
    return out


def group_phrases(prosodic_words: Sequence[list[Word]], phrase_max_syllables: int) -> list[list[list[Word]]]:
    """Pack prosodic words into prosodic phrases (``#2`` between them)."""
    phrases: list[list[list[Word]]] = []
    current: list[list[Word]] = []
    n_current = 0
    for pw in prosodic_words:
        n = sum(len(w.pinyin) for w in pw)
        if current and n_current >= 3 and n_current + n > phrase_max_syllables:
            phrases.append(current)
            current, n_current = [], 0
        current.append(pw)
        n_current += n
    if current:
        phrases.append(current)
    return phrases


@dataclass(frozen=True)
class Clause:
    """One stretch between pauses: its prosodic phrases, and the mark of the pause after it (None at the end)."""

    phrases: list[list[list[Word]]]
    pause_after: str | None


@dataclass(frozen=True)
class PhoneSequence:
    """The voice's input as symbols, with the normalized-text index each came from (None for sil/eos/marks)."""

    phones: list[str]
    sources: list[int | None]
    pinyin: list[str]
    marked_pinyin: str


def _stronger(current: str | None, mark: str) -> str | None:
    """The stronger of two boundary marks; None (nothing spoken yet) stays None."""
    if current is None:
        return None
    return mark if MARK_STRENGTH[mark] > MARK_STRENGTH[current] else current


def assemble(clauses: Sequence[Clause]) -> PhoneSequence:
    """``sil`` + syllables with prosody marks between them + ``sil`` + ``eos``."""
    phones: list[str] = [SIL]
    sources: list[int | None] = [None]
    pinyin: list[str] = []
    marked: list[str] = []
    pending: str | None = None  # mark to put before the next syllable
    for clause in clauses:
        for pi, phrase in enumerate(clause.phrases):
            for pw in phrase:
                first_in_pw = True
                for w in pw:
                    for syl, src in zip(w.pinyin, w.sources):
                        if pending is not None:
                            phones.append(pending)
                            sources.append(None)
                            if pending != "#0":
                                marked.append(pending)
                        symbols = syllable_symbols(syl)
                        phones.extend(symbols)
                        sources.extend([src[0], src[0], src[-1]][: len(symbols)])
                        pinyin.append(syl)
                        marked.append(syl)
                        pending = "#0"
                        first_in_pw = False
                if not first_in_pw:
                    pending = _stronger(pending, "#1")
            if pi < len(clause.phrases) - 1:
                pending = _stronger(pending, "#2")
        if clause.pause_after is not None:
            pending = _stronger(pending, clause.pause_after)
    phones.extend([SIL, EOS])
    sources.extend([None, None])
    return PhoneSequence(phones, sources, pinyin, " ".join(marked))
