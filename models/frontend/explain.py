"""Why the frontend reads each character as it does: reading, reading before sandhi, and where it came from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .g2p import Word
from .normalize import NormalizedText, Span

ORIGIN_NORMALIZER = "normalizer"
ORIGIN_ERHUA = "erhua (merged into the syllable before)"
ORIGIN_SILENT = "not spoken"


@dataclass(frozen=True)
class CharReading:
    """One character of the normalized text.

    ``input_index``/``input_char``: the input character it came from; ``char``: the normalized character;
    ``syllable``: what the voice says (TONE3, None for pause marks and skipped characters); ``lexical``: the
    reading before tone sandhi; ``origin``: where the reading came from (phrase dictionary, context rule,
    neutral-tone rule, domain word list, model, lexicon, erhua); ``sandhi``: the tone rule that changed it
    (一 sandhi, 不 sandhi, third-tone sandhi) or ""; ``via``: "span:<kind>" when a say-as span produced the
    character, "normalizer" when the normalizer wrote it (digits, symbols, letters), "" for text as sent;
    ``word``: the word it was read in.
    """

    input_index: int
    input_char: str
    char: str
    syllable: str | None
    lexical: str | None
    origin: str
    sandhi: str
    via: str
    word: str


@dataclass(frozen=True)
class Explanation:
    """Per-character readings of one text; ``error`` is set (and ``chars`` may be partial) when it cannot be said."""

    text: str
    normalized: str
    chars: tuple[CharReading, ...]
    pinyin: str
    warnings: tuple[str, ...]
    error: str | None

    def reading_of(self, normalized_index: int) -> CharReading:
        """The entry for the character at ``normalized_index`` in the normalized text."""
        return self.chars[normalized_index]

    def format(self) -> str:
        """A table an operator can read: one line per character, then warnings and any error."""
        lines = [f"text:       {_one_line(self.text)}", f"normalized: {_one_line(self.normalized) or '-'}",
                 f"pinyin:     {self.pinyin or '-'}",
                 f"{'in':>4} {'ch':2} {'reading':8} {'lexical':8} {'origin':22} {'sandhi':18} {'via':16} word"]
        for c in self.chars:
            if c.syllable is None and c.origin == ORIGIN_SILENT:
                lines.append(f"{c.input_index:>4} {_show(c.char):2} {'-':8} {'-':8} {c.origin:22} {'':18} {c.via:16}")
                continue
            lines.append(
                f"{c.input_index:>4} {_show(c.char):2} {c.syllable or '-':8} {c.lexical or '-':8} {c.origin:22} "
                f"{c.sandhi or '-':18} {c.via or '-':16} {c.word}"
            )
        lines.extend(f"warning: {w}" for w in self.warnings)
        if self.error:
            lines.append(f"error: {self.error}")
        return "\n".join(lines)


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


def _show(c: str) -> str:
    return c if c.isprintable() and not c.isspace() else repr(c)


def _sandhi_kind(char: str, lexical: str, spoken: str) -> str:
    if lexical == spoken:
        return ""
    if char == "一":
        return "一 sandhi"
    if char == "不":
        return "不 sandhi"
    return "third-tone sandhi"


def explain_words(
    text: str,
    normalized: NormalizedText,
    words: Sequence[Word],
    spans: Sequence[Span],
    marked_pinyin: str,
    warnings: Sequence[str],
    error: str | None,
) -> Explanation:
    """Build the per-character explanation from the words the pipeline read (in order)."""
    norm = normalized.text
    index = normalized.source_index
    per_char: dict[int, tuple[str, str, str, str]] = {}  # normalized index → (spoken, lexical, origin, word)
    for w in words:
        for k, src in enumerate(w.sources):
            spoken = w.pinyin[k]
            lexical = w.lexical[k] if k < len(w.lexical) else spoken
            origin = w.origins[k] if k < len(w.origins) else ""
            per_char[src[0]] = (spoken, lexical, origin, w.text)
            for extra in src[1:]:
                per_char[extra] = ("", "", ORIGIN_ERHUA, w.text)
    chars: list[CharReading] = []
    for i, c in enumerate(norm):
        src = index[i] if i < len(index) else (len(text) - 1 if text else 0)
        in_char = text[src] if 0 <= src < len(text) else ""
        via = ""
        for sp in spans:
            if sp.start <= src < sp.end:
                via = f"span:{sp.kind}"
                break
        if not via and in_char != c:
            via = ORIGIN_NORMALIZER
        found = per_char.get(i)
        if found is None:
            chars.append(CharReading(src, in_char, c, None, None, ORIGIN_SILENT, "", via, ""))
            continue
        spoken, lexical, origin, word = found
        if not spoken:
            chars.append(CharReading(src, in_char, c, None, None, origin, "", via, word))
            continue
        chars.append(CharReading(src, in_char, c, spoken, lexical, origin, _sandhi_kind(c, lexical, spoken), via, word))
    return Explanation(text, norm, tuple(chars), marked_pinyin, tuple(warnings), error)
