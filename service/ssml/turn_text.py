"""An SSML turn's text for the call path: SSML deltas in, in document order: segments (with their spans, lexicon,
rate and volume), breaks, marks and warnings."""

from __future__ import annotations

from dataclasses import dataclass

from models.frontend.normalize import Span
from models.frontend.segmenter import Segment, Segmenter
from service.ssml.model import Cut, Event, MarkAt, SsmlWarning, TextPiece
from service.ssml.parser import SsmlStream


@dataclass(frozen=True)
class SsmlSegment(Segment):
    """A segment of an SSML turn and how to read it (offsets: code points of the document's text content)."""

    spans: tuple[Span, ...] = ()  # say-as spans inside the segment, relative to its text
    lexicon: tuple[tuple[str, str], ...] = ()  # <phoneme> readings inside it: (grapheme, pinyin), over the call's
    speaking_rate: float = 1.0  # <prosody rate> in force (the turn's rate outside every <prosody>); 1.0 = normal
    volume_db: float | None = 0.0  # <prosody volume> in force (the turn's outside); None = silent


@dataclass(frozen=True)
class Pause:
    """A <break>: ``ms`` of silence at text offset ``pos`` (after the audio of the text before it)."""

    pos: int
    ms: int


Item = SsmlSegment | Pause | MarkAt | SsmlWarning


class SsmlTurnText:
    """Drives a turn's Segmenter from SSML deltas: text pieces go in with their spans, every Cut ends a segment.

    ``push(delta)`` returns, in document order, what the delta completed: segments (SsmlSegment, planned at
    once: their spans, <phoneme> lexicon, rate and volume are known when their text is), breaks (Pause),
    marks (MarkAt) and warnings (SsmlWarning). ``complete()`` ends the document (raises SsmlError when it is
    not well-formed) and returns the rest. Offsets are code points of the document's text content (``text``).
    A <prosody rate> is carried by the segments it covers (``SsmlSegment.speaking_rate``); the engine applies it.
    """

    def __init__(self, segmenter: Segmenter, stream: SsmlStream | None = None) -> None:
        self.segmenter = segmenter
        self.stream = stream or SsmlStream()

    @property
    def text(self) -> str:
        """The text content so far (what heard text, word timings and marks refer to)."""
        return self.stream.document.text

    @property
    def pending_text(self) -> str:
        """Text content not yet cut into a segment."""
        return self.segmenter.pending_text

    def push(self, delta: str, now_s: float | None = None) -> list[Item]:
        """Parse a delta; returns what it completed. Raises SsmlError on bad SSML."""
        return self._apply(self.stream.feed(delta), now_s)

    def complete(self) -> list[Item]:
        """The turn's text is complete: close the document (SsmlError if it is still open) and cut what is pending."""
        out = self._apply(self.stream.close(), None)
        return out + self._planned(self.segmenter.flush())

    def poll_idle(self, now_s: float | None = None) -> list[Item]:
        """As Segmenter.poll_idle (text that waits too long is synthesized anyway)."""
        return self._planned(self.segmenter.poll_idle(now_s))

    def _apply(self, events: list[Event], now_s: float | None) -> list[Item]:
        out: list[Item] = []
        for ev in events:
            if isinstance(ev, TextPiece):
                spans = [(s.start, s.end) for s in (*ev.spans, *ev.phonemes)]
                out += self._planned(self.segmenter.push(ev.text, spans, now_s))
            elif isinstance(ev, Cut):
                out += self._planned(self.segmenter.flush())
                if ev.pause_ms > 0:
                    out.append(Pause(ev.pos, ev.pause_ms))
            elif isinstance(ev, (MarkAt, SsmlWarning)):
                out.append(ev)
            # ProsodyAt: the cut came with it; its rate and volume reach the segments through the document
        return out

    def _planned(self, segments: list[Segment]) -> list[Item]:
        return [self.plan(seg) for seg in segments]

    def plan(self, segment: Segment) -> SsmlSegment:
        """``segment`` with its spans, lexicon, rate and volume (all known once its text has been parsed)."""
        doc = self.stream.document
        spans = tuple(Span(s.start - segment.start, s.end - segment.start, s.kind) for s in doc.spans
                      if segment.start <= s.start and s.end <= segment.end)
        lexicon = tuple({doc.text[p.start:p.end].strip(): p.pinyin for p in doc.phonemes
                         if segment.start <= p.start and p.end <= segment.end}.items())
        speaking_rate, volume_db = doc.prosody_at(segment.start)
        return SsmlSegment(segment.text, segment.start, segment.end, segment.reason, spans=spans, lexicon=lexicon,
                           speaking_rate=speaking_rate, volume_db=volume_db)
