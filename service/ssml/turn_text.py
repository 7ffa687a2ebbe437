"""An SSML turn's text for the call path: SSML deltas in, segments out with their spans, lexicon, prosody and pauses."""

from __future__ import annotations

from dataclasses import dataclass

from models.frontend.normalize import Span
from models.frontend.segmenter import Segment, Segmenter
from service.ssml.model import Cut, Event, MarkAt, SsmlWarning, TextPiece
from service.ssml.parser import SsmlStream


@dataclass(frozen=True)
class SegmentPlan:
    """How to synthesize one segment of an SSML turn (offsets relative to the segment's text)."""

    segment: Segment
    spans: tuple[Span, ...]  # say-as spans inside the segment
    lexicon: dict[str, str]  # <phoneme> readings inside the segment: grapheme → pinyin (merge over the call's)
    rate: float  # speaking rate (0.5-2.0) of the segment
    volume_db: float | None  # gain; None = silent (the segment's time passes as silence)
    pause_before_ms: int  # silence from <break> before the segment's audio


class SsmlTurnText:
    """Drives a turn's Segmenter from SSML deltas: text pieces go in with their spans, every Cut ends a segment.

    ``push(delta)`` returns the segments now complete (as Segmenter.push does) and keeps the marks and
    warnings found (``take_marks()``, ``take_warnings()``); ``complete()`` ends the document (raises
    SsmlError when it is not well-formed) and returns the last segments; ``plan(segment)`` gives its
    spans, lexicon, prosody and pause; ``trailing_pause_ms`` is the silence after the last segment.
    Offsets are code points of the document's text content (``text``).
    """

    def __init__(self, segmenter: Segmenter, stream: SsmlStream | None = None) -> None:
        self.segmenter = segmenter
        self.stream = stream or SsmlStream()
        self._marks: list[MarkAt] = []
        self._warnings: list[SsmlWarning] = []
        self._last_start = -1  # start of the last segment emitted
        self._cuts: list[Cut] = []

    @property
    def text(self) -> str:
        """The text content so far (what heard text and marks refer to)."""
        return self.stream.document.text

    def push(self, delta: str, now_s: float | None = None) -> list[Segment]:
        """Parse a delta; returns the segments it completed. Raises SsmlError on bad SSML."""
        return self._apply(self.stream.feed(delta), now_s)

    def complete(self) -> list[Segment]:
        """The turn's text is complete: close the document and cut what is pending."""
        out = self._apply(self.stream.close(), None)
        out += self._note(self.segmenter.flush())
        return out

    def poll_idle(self, now_s: float | None = None) -> list[Segment]:
        """As Segmenter.poll_idle (text that waits too long is synthesized anyway)."""
        return self._note(self.segmenter.poll_idle(now_s))

    def take_marks(self) -> list[MarkAt]:
        """Marks found since the last call, in order."""
        out, self._marks = self._marks, []
        return out

    def take_warnings(self) -> list[SsmlWarning]:
        """Warnings found since the last call, in order."""
        out, self._warnings = self._warnings, []
        return out

    def _apply(self, events: list[Event], now_s: float | None) -> list[Segment]:
        out: list[Segment] = []
        for ev in events:
            if isinstance(ev, TextPiece):
                out += self.segmenter.push(ev.text, [(s.start, s.end) for s in (*ev.spans, *ev.phonemes)], now_s)
            elif isinstance(ev, Cut):
                out += self.segmenter.flush()
                self._cuts.append(ev)
            elif isinstance(ev, MarkAt):
                self._marks.append(ev)
            elif isinstance(ev, SsmlWarning):
                self._warnings.append(ev)
        return self._note(out)

    def _note(self, segments: list[Segment]) -> list[Segment]:
        if segments:
            self._last_start = segments[-1].start
        return segments

    def plan(self, segment: Segment, previous_start: int = -1) -> SegmentPlan:
        """Spans, lexicon, prosody and pause of ``segment``; ``previous_start``: the start of the segment before
        it in the turn (-1 for the first), whose breaks up to this one's start come before this one."""
        doc = self.stream.document
        spans = tuple(Span(s.start - segment.start, s.end - segment.start, s.kind) for s in doc.spans
                      if segment.start <= s.start and s.end <= segment.end)
        lexicon = {doc.text[p.start:p.end]: p.pinyin for p in doc.phonemes
                   if segment.start <= p.start and p.end <= segment.end}
        rate, volume_db = doc.prosody_at(segment.start)
        pause = sum(c.pause_ms for c in self._cuts if previous_start < c.pos <= segment.start)
        return SegmentPlan(segment, spans, lexicon, rate, volume_db, pause)

    @property
    def trailing_pause_ms(self) -> int:
        """Silence from breaks after the start of the last segment (played after its audio)."""
        return sum(c.pause_ms for c in self._cuts if c.pos > self._last_start)
