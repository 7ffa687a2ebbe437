"""What an SSML turn turns into: text content, typed spans, cuts (breaks), marks, prosody changes, warnings."""

from __future__ import annotations

from dataclasses import dataclass, field

from models.frontend.normalize import Span


class SsmlError(ValueError):
    """Malformed or refused SSML; ``line``/``column`` (1-based) locate it, the message says what to change."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"SSML line {line}, column {column}: {message}")
        self.detail = message
        self.line = line
        self.column = column


@dataclass(frozen=True)
class SsmlLimits:
    """Bounds on one document; exceeding a hard limit raises SsmlError, a break over the cap is clamped."""

    max_chars: int = 20_000  # code points of markup + text in the document
    max_depth: int = 24  # nesting of elements
    max_elements: int = 2_000  # start tags in the document
    max_break_ms: int = 10_000  # one <break>; longer ones are clamped with a warning
    max_total_break_ms: int = 60_000  # all breaks of a document together
    max_attr_chars: int = 256  # one attribute value


@dataclass(frozen=True)
class SsmlWarning:
    """Something ignored or adjusted; ``code`` is stable (Warning.code), ``message`` names the place."""

    code: str
    message: str


@dataclass(frozen=True)
class Phoneme:
    """text[start:end] is read with these tone-numbered pinyin syllables (one per character)."""

    start: int
    end: int
    pinyin: str


@dataclass(frozen=True)
class TextPiece:
    """Text content appended at ``start``; spans and phonemes inside it use absolute text offsets."""

    start: int
    text: str
    spans: tuple[Span, ...] = ()
    phonemes: tuple[Phoneme, ...] = ()


@dataclass(frozen=True)
class Cut:
    """The segment ends at ``pos`` (text offset); ``pause_ms`` of silence follow (0: a plain cut).

    ``reason``: "break" (<break>), "sentence" (<s>), "paragraph" (<p>), "prosody" (rate or volume change).
    """

    pos: int
    pause_ms: int
    reason: str


@dataclass(frozen=True)
class MarkAt:
    """<mark name=...> at text offset ``pos``: reached once the audio of text[:pos] has played."""

    pos: int
    name: str


@dataclass(frozen=True)
class ProsodyAt:
    """From text offset ``pos`` on: speaking rate (0.5-2.0, 1.0 = the voice's rate) and gain in dB.

    ``volume_db`` is None for silent (the text is not played: its time passes as silence).
    """

    pos: int
    speaking_rate: float
    volume_db: float | None


Event = TextPiece | Cut | MarkAt | ProsodyAt | SsmlWarning


@dataclass
class SsmlDocument:
    """Everything a (possibly still growing) SSML document yielded so far, in document order."""

    text: str = ""
    spans: list[Span] = field(default_factory=list)
    phonemes: list[Phoneme] = field(default_factory=list)
    cuts: list[Cut] = field(default_factory=list)
    marks: list[MarkAt] = field(default_factory=list)
    prosody: list[ProsodyAt] = field(default_factory=list)
    warnings: list[SsmlWarning] = field(default_factory=list)
    base_speaking_rate: float = 1.0  # rate and gain outside every <prosody> (the turn's)
    base_volume_db: float | None = 0.0

    def add(self, events: list[Event]) -> None:
        """Fold events (as SsmlStream.feed returns them) into this document."""
        parts = [self.text]
        for ev in events:
            if isinstance(ev, TextPiece):
                parts.append(ev.text)
                self.spans.extend(ev.spans)
                self.phonemes.extend(ev.phonemes)
            elif isinstance(ev, Cut):
                self.cuts.append(ev)
            elif isinstance(ev, MarkAt):
                self.marks.append(ev)
            elif isinstance(ev, ProsodyAt):
                self.prosody.append(ev)
            else:
                self.warnings.append(ev)
        self.text = "".join(parts)

    def pause_ms_at(self, pos: int) -> int:
        """Silence (ms) the breaks at text offset ``pos`` add."""
        return sum(c.pause_ms for c in self.cuts if c.pos == pos)

    def prosody_at(self, pos: int) -> tuple[float, float | None]:
        """(rate, volume_db) of the character at ``pos`` (the base values outside every <prosody>)."""
        speaking_rate, gain = self.base_speaking_rate, self.base_volume_db
        for p in self.prosody:
            if p.pos > pos:
                break
            speaking_rate, gain = p.speaking_rate, p.volume_db
        return speaking_rate, gain
