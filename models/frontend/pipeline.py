"""The Mandarin frontend: text → normalized Hanzi → pinyin with sandhi → prosody-marked Baker symbol ids."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .explain import Explanation, explain_words
from .g2p import LayeredLexicon, Lexicon, LexiconError, Word, assign_pinyin, has_pinyin, lexicon_word
from .lexicon_file import LexiconStore
from .normalize import NormalizationError, NormalizedText, NormalizeOptions, Span, normalize
from .polyphones import jieba_adjectives
from .prosody import (
    MARK_STRENGTH,
    PAUSE_MARKS,
    Clause,
    WordSegmenter,
    assemble,
    default_segmenter,
    group_phrases,
    group_prosodic_words,
    segment_run,
)
from .symbols import symbols_to_ids
from .tone_sandhi import third_tone_sandhi, yi_bu_sandhi

log = logging.getLogger(__name__)

#: Where a syllable's reading came from when a say-as span fixed it (a surname in <say-as interpret-as="name">).
ORIGIN_SAY_AS = "say-as name"
#: Above this many syllables one segment is longer than the voice says well in one go (≈25 s decoder cap).
LONG_SEGMENT_SYLLABLES = 150


class FrontendError(ValueError):
    """Text the frontend cannot turn into ids; the message says what to change."""


class FrontendLexiconError(FrontendError, LexiconError):
    """A lexicon override entry is invalid (bad pinyin, wrong syllable count); the message names it."""


@dataclass(frozen=True)
class FrontendOptions:
    """Frontend settings.

    ``lexicon`` holds deployment-wide overrides ``{grapheme: "chao2 yang2"}``; ``lexicon_file`` names a
    lexicon file (one ``grapheme<TAB>pinyin`` per line, thousands of entries) loaded when the frontend is
    built and reloadable with ``MandarinFrontend.reload_lexicon``. Inline entries override the file's;
    per-call entries override both.
    """

    normalize: NormalizeOptions = field(default_factory=NormalizeOptions)
    lexicon: Mapping[str, str] = field(default_factory=dict)
    lexicon_file: str | None = None
    erhua: bool = True
    tone_sandhi: bool = True
    phrase_max_syllables: int = 7

    def __post_init__(self) -> None:
        if not isinstance(self.phrase_max_syllables, int) or self.phrase_max_syllables < 3:
            raise FrontendError(f"phrase_max_syllables must be an integer ≥ 3, got {self.phrase_max_syllables!r}")


@dataclass(frozen=True)
class FrontendResult:
    """The voice's input for one segment.

    ``ids[k]`` is the symbol id of ``phones[k]``; ``id_source[k]`` the index of the input character it
    came from (None for sil, eos and prosody marks). ``pinyin`` lists the spoken syllables (TONE3, erhua
    as ``wanr2``); ``marked_pinyin`` is the same with the ``#1``/``#2``/``#3`` marks between them.
    """

    ids: list[int]
    phones: list[str]
    pinyin: list[str]
    marked_pinyin: str
    normalized: NormalizedText
    id_source: list[int | None]
    warnings: tuple[str, ...]

    def spoken_chars(self, n_ids: int) -> int:
        """How many input characters are covered once the first ``n_ids`` ids have been spoken."""
        covered = [s for s in self.id_source[: max(0, n_ids)] if s is not None]
        return max(covered) + 1 if covered else 0


@dataclass(frozen=True)
class DryRun:
    """What the frontend would send to the voice, for script authors to check readings."""

    result: FrontendResult

    def format(self) -> str:
        """Exactly three lines: the normalized text, the pinyin with prosody marks, the ids."""
        text = " ".join(self.result.normalized.text.splitlines()) or "-"
        return "\n".join([text, self.result.marked_pinyin, " ".join(str(i) for i in self.result.ids)])


class MandarinFrontend:
    """Turns text into Baker symbol ids; thread-safe, one instance per process is enough."""

    def __init__(
        self,
        options: FrontendOptions | None = None,
        segmenter: WordSegmenter | None = None,
        lexicon_store: LexiconStore | None = None,
    ) -> None:
        """``lexicon_store`` shares one reloadable server lexicon between frontends (else one is made here)."""
        self.options = options or FrontendOptions()
        self._segmenter = segmenter or default_segmenter()
        try:
            self._lexicon = Lexicon(self.options.lexicon)
            if lexicon_store is None:
                lexicon_store = LexiconStore()
                if self.options.lexicon_file:
                    lexicon_store.reload(self.options.lexicon_file)
        except LexiconError as exc:
            raise FrontendLexiconError(str(exc)) from None
        self.lexicon_store = lexicon_store

    def reload_lexicon(self, path: str) -> int:
        """Swap in the lexicon file at ``path`` (all lines valid) and return its entry count.

        Raises FrontendLexiconError listing the bad lines; the previous lexicon stays in force.
        """
        try:
            return self.lexicon_store.reload(path)
        except LexiconError as exc:
            raise FrontendLexiconError(str(exc)) from None

    def warm_up(self) -> float:
        """Load the word-segmentation dictionary and the 得 rule's adjective tags now (else on first use); returns seconds spent."""
        t0 = time.perf_counter()
        self._segmenter.initialize()
        jieba_adjectives()
        return time.perf_counter() - t0

    def to_ids(
        self, text: str, spans: Sequence[Span] = (), lexicon: Mapping[str, str] | None = None
    ) -> FrontendResult:
        """Normalize ``text`` and convert it to ids; raises FrontendError for text with nothing to say."""
        return self.from_normalized(self._normalize(text, spans), lexicon)

    def _normalize(self, text: str, spans: Sequence[Span]) -> NormalizedText:
        """The normalized text, or FrontendError for a non-str text or bad spans."""
        if not isinstance(text, str):
            raise FrontendError(f"text must be a str, got {type(text).__name__}")
        try:
            return normalize(text, self.options.normalize, spans)
        except NormalizationError as exc:
            raise FrontendError(f"cannot normalize the text: {exc}") from exc

    def dry_run(
        self, text: str, spans: Sequence[Span] = (), lexicon: Mapping[str, str] | None = None
    ) -> DryRun:
        """The same as to_ids, wrapped for printing (``DryRun.format()``)."""
        return DryRun(self.to_ids(text, spans, lexicon))

    def from_normalized(self, normalized: NormalizedText, lexicon: Mapping[str, str] | None = None) -> FrontendResult:
        """Convert already-normalized text (Hanzi and pause marks) to ids."""
        return self._analyse(normalized, lexicon)[0]

    def explain(
        self, text: str, spans: Sequence[Span] = (), lexicon: Mapping[str, str] | None = None
    ) -> Explanation:
        """Every character's reading and where it came from; ``Explanation.format()`` prints it.

        Never raises for the text itself: text with nothing to say gives an explanation whose ``error``
        says why (bad spans or lexicon entries still raise FrontendError, as in to_ids).
        """
        normalized = self._normalize(text, spans)
        try:
            result, clauses = self._analyse(normalized, lexicon)
        except FrontendLexiconError:
            raise
        except FrontendError as exc:
            return explain_words(text, normalized, [], spans, "", normalized.warnings, str(exc))
        words = [w for clause in clauses for phrase in clause.phrases for pw in phrase for w in pw]
        return explain_words(text, normalized, words, spans, result.marked_pinyin, result.warnings, None)

    def _analyse(
        self, normalized: NormalizedText, lexicon: Mapping[str, str] | None
    ) -> tuple[FrontendResult, list[Clause]]:
        """The result for normalized text, with the clauses (words and their readings) it was built from."""
        layers = [self.lexicon_store.current(), self._lexicon]
        if lexicon:
            try:
                layers.append(Lexicon(lexicon))
            except LexiconError as exc:
                raise FrontendLexiconError(str(exc)) from None
        lex = LayeredLexicon(*layers)
        text = normalized.text
        raw_clauses, skipped = self._scan(text, lex)
        clauses = self._build_clauses(raw_clauses, dict(normalized.readings))
        seq = assemble(clauses)
        warnings = list(normalized.warnings)
        warnings.extend(self._skip_warnings(text, skipped, normalized.source_index))
        if not seq.pinyin:
            shown = text if len(text) <= 40 else text[:40] + "…"
            raise FrontendError(
                f"nothing to say: the text normalized to {shown!r}, which has no Chinese characters the voice "
                "can read; send Chinese text (digits, amounts and dates are read out), or add a lexicon entry "
                "with a pinyin reading for the words you need"
            )
        if len(seq.pinyin) > LONG_SEGMENT_SYLLABLES:
            warnings.append(
                f"segment has {len(seq.pinyin)} syllables; more than {LONG_SEGMENT_SYLLABLES} may exceed the "
                "voice's 25 s limit, cut long text into sentences (Segmenter)"
            )
        index = normalized.source_index
        id_source = [None if s is None else index[s] for s in seq.sources]
        result = FrontendResult(
            ids=symbols_to_ids(seq.phones),
            phones=seq.phones,
            pinyin=seq.pinyin,
            marked_pinyin=seq.marked_pinyin,
            normalized=normalized,
            id_source=id_source,
            warnings=tuple(warnings),
        )
        return result, clauses

    def _scan(self, text: str, lex: LayeredLexicon) -> tuple[list[tuple[list[Word], str | None]], list[int]]:
        """Cut normalized text into clauses of words (lexicon matches, digit strings, jieba words)."""
        clauses: list[tuple[list[Word], str | None]] = []
        words: list[Word] = []
        skipped: list[int] = []
        run_start = -1
        pos, n = 0, len(text)
        use_lex = len(lex) > 0

        def flush_run(end: int) -> None:
            nonlocal run_start
            if run_start >= 0:
                words.extend(segment_run(text[run_start:end], run_start, self._segmenter))
                run_start = -1

        while pos < n:
            if use_lex:
                entry = lex.match(text, pos)
                if entry is not None:
                    flush_run(pos)
                    words.append(lexicon_word(entry, pos))
                    pos += len(entry.grapheme)
                    continue
            c = text[pos]
            if has_pinyin(c):
                if run_start < 0:
                    run_start = pos
            else:
                flush_run(pos)
                mark = PAUSE_MARKS.get(c)
                if mark is not None:
                    clauses.append((words, mark))
                    words = []
                elif not c.isspace():
                    skipped.append(pos)
            pos += 1
        flush_run(n)
        clauses.append((words, None))
        return clauses, skipped

    def _build_clauses(self, raw: list[tuple[list[Word], str | None]], fixed: Mapping[int, str]) -> list[Clause]:
        """Readings, sandhi and prosodic grouping per clause; pauses of empty clauses merge into the one before.

        ``fixed`` (normalized-text index → syllable, from say-as spans) overrides the dictionary reading of those
        characters before sandhi, as a reading of the word, not a locked lexicon entry.
        """
        out: list[Clause] = []
        for words, pause in raw:
            if not words:
                if out and pause is not None:
                    prev = out[-1]
                    if prev.pause_after is None or MARK_STRENGTH[pause] > MARK_STRENGTH[prev.pause_after]:
                        out[-1] = Clause(prev.phrases, pause)
                continue
            words = assign_pinyin(words, erhua=self.options.erhua)
            for w in words:
                if fixed and not w.locked:
                    for k, src in enumerate(w.sources):
                        if len(src) == 1 and src[0] in fixed:
                            w.pinyin[k] = fixed[src[0]]
                            w.origins[k] = ORIGIN_SAY_AS
                w.lexical = list(w.pinyin)
            if self.options.tone_sandhi:
                yi_bu_sandhi(words)
            prosodic_words = group_prosodic_words(words)
            if self.options.tone_sandhi:
                for pw in prosodic_words:
                    third_tone_sandhi(pw, self._segmenter.is_word)
            out.append(Clause(group_phrases(prosodic_words, self.options.phrase_max_syllables), pause))
        if out and out[-1].pause_after is not None:
            out[-1] = Clause(out[-1].phrases, None)
        return out

    @staticmethod
    def _skip_warnings(text: str, skipped: list[int], source_index: Sequence[int]) -> list[str]:
        """One warning per run of characters the voice cannot say."""
        out: list[str] = []
        i = 0
        while i < len(skipped):
            j = i
            while j + 1 < len(skipped) and skipped[j + 1] == skipped[j] + 1:
                j += 1
            chars = text[skipped[i]:skipped[j] + 1]
            src = source_index[skipped[i]] if skipped[i] < len(source_index) else None
            out.append(f"skipped {chars!r} (input position {src}): the voice has no reading for it")
            i = j + 1
        return out
