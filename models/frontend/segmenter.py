"""Streaming text segmenter: cuts a turn's text deltas into synthesizable segments, independent of how they were split.

Rules, in order:

* Never cut inside a protected span (offsets into the turn's text given by the dialog manager), and never
  between two digits (3.5, 1,000, 10:30, 13501234567).
* Sentence ends cut at once: 。！？；!?; and newlines. An ASCII ``.`` is a sentence end only when followed
  by whitespace or the end of the text (``flush``) and not between digits, so "3." waits for the next delta.
* The first segment of a turn may end at a clause mark (，、：,:) once it holds ``min_first_chars``
  speakable characters, to lower the time to first audio.
* A cut needs something to say before it: punctuation-only text stays with the following segment, and a
  punctuation-only remainder at ``flush`` is dropped (the offsets of emitted segments stay exact).
* A segment longer than ``max_chars`` is cut at the best boundary inside its first ``max_chars``
  characters: the last clause mark, else the last whitespace, else the last word boundary between two
  Hanzi (jieba over that window), else the last change between Hanzi, digits and Latin letters. A digit or
  Latin run with no boundary in the window is kept whole up to ``hard_max_chars``.

Every decision depends only on the text itself (at most one character of lookahead), so pushing the text in
any pieces gives the same segments as pushing it at once; only ``poll_idle`` (a timing event) and
``flush`` cut early.
"""

from __future__ import annotations

import dataclasses
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

SENTENCE_MARKS = frozenset("。！？；!?;\n\r\u2028\u2029")
CLAUSE_MARKS = frozenset("，、：,:")
_WAIT = object()
_SpanT = TypeVar("_SpanT")


class _HasOffsets(Protocol):
    start: int
    end: int


class SegmenterError(ValueError):
    """Invalid segmenter settings or spans."""


@dataclass(frozen=True)
class Segment:
    """A cut of the turn's text: ``text == turn_text[start:end]``; ``reason`` says what closed it."""

    text: str
    start: int
    end: int
    reason: str  # "sentence", "clause", "cap", "flush", "idle"


def has_speakable(text: str) -> bool:
    """True when `text` has a character to read aloud (a letter or a digit of any script): a segment needs one,
    so text of only punctuation, symbols or emoji is never synthesized."""
    return any(c.isalnum() for c in text)


def _is_han(c: str) -> bool:
    return c.isalpha() and unicodedata.name(c, "").startswith("CJK ")


def _char_class(c: str) -> str:
    if c.isdigit():
        return "digit"
    if c.isascii() and c.isalpha():
        return "latin"
    if _is_han(c):
        return "han"
    if c.isalpha():
        return "alpha"
    return "other"


def _is_digit(c: str) -> bool:
    return c.isdigit()


class Segmenter:
    """Cuts streamed text of one turn into segments; create one per turn.

    ``push(delta)`` appends text and returns the segments it completes; ``flush()`` ends the pending text
    (end of the turn's text or a client Flush); ``poll_idle(now_s)`` cuts pending text once no delta has
    arrived for ``idle_timeout_s``. ``clock`` (seconds) stamps pushes made without ``now_s``.
    """

    def __init__(
        self,
        max_chars: int = 80,
        first_clause_cut: bool = True,
        min_first_chars: int = 2,
        idle_timeout_s: float = 1.0,
        hard_max_chars: int | None = None,
        word_boundaries: Callable[[str], Sequence[int]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(max_chars, int) or max_chars < 2:
            raise SegmenterError(f"max_chars must be an integer ≥ 2, got {max_chars!r}")
        if min_first_chars < 0:
            raise SegmenterError(f"min_first_chars must be ≥ 0, got {min_first_chars!r}")
        if idle_timeout_s <= 0:
            raise SegmenterError(f"idle_timeout_s must be > 0, got {idle_timeout_s!r}")
        self.max_chars = max_chars
        self.hard_max_chars = hard_max_chars if hard_max_chars is not None else 4 * max_chars
        if self.hard_max_chars < max_chars:
            raise SegmenterError("hard_max_chars must be ≥ max_chars")
        self.first_clause_cut = first_clause_cut
        self.min_first_chars = min_first_chars
        self.idle_timeout_s = idle_timeout_s
        self._word_boundaries = word_boundaries
        self._clock = clock
        self._pending = ""  # turn text from self._start on
        self._start = 0  # absolute offset of the pending text
        self._next_end = 1  # next cut position (absolute) to decide
        self._overflow = False  # the cap window had no boundary: looking past max_chars
        self._first = True
        self._spans: list[tuple[int, int]] = []
        self._last_push_s: float | None = None
        self._window_start = -1  # start offset of the cap window whose word boundaries are cached
        self._window_cuts: frozenset[int] = frozenset()

    @property
    def pending_text(self) -> str:
        """Text received but not yet cut into a segment."""
        return self._pending

    @property
    def consumed(self) -> int:
        """Offset in the turn's text up to which segments have been cut."""
        return self._start

    def push(
        self, delta: str, spans: Sequence[_HasOffsets | tuple[int, int]] = (), now_s: float | None = None
    ) -> list[Segment]:
        """Append a text delta (and protected spans, absolute offsets); returns the segments now complete."""
        if not isinstance(delta, str):
            raise SegmenterError(f"delta must be a str, got {type(delta).__name__}")
        for sp in spans:
            start, end = (sp[0], sp[1]) if isinstance(sp, tuple) else (sp.start, sp.end)
            if not (isinstance(start, int) and isinstance(end, int)) or start < 0 or end < start:
                raise SegmenterError(f"span ({start!r}, {end!r}) must be 0 ≤ start ≤ end")
            if end - start >= 2:
                self._spans.append((start, end))
        self._pending += delta
        self._last_push_s = self._clock() if now_s is None else now_s
        return self._advance(final=False)

    def flush(self) -> list[Segment]:
        """Cut everything pending (the text so far is complete); returns the resulting segments."""
        return self._advance(final=True, reason="flush")

    def poll_idle(self, now_s: float | None = None) -> list[Segment]:
        """Cut pending text if nothing has arrived for ``idle_timeout_s``; call it periodically."""
        now = self._clock() if now_s is None else now_s
        if not self._pending or self._last_push_s is None or now - self._last_push_s < self.idle_timeout_s:
            return []
        return self._advance(final=True, reason="idle")

    # -- internals ---------------------------------------------------------------------------------

    def _char(self, pos: int) -> str:
        """Character at absolute position ``pos`` ("" when not received yet or before the pending text)."""
        i = pos - self._start
        return self._pending[i] if 0 <= i < len(self._pending) else ""

    def _protected(self, end: int) -> bool:
        """True when a cut at ``end`` would fall strictly inside a protected span."""
        return any(s < end < e for s, e in self._spans)

    def _speakable(self, end: int) -> int:
        return sum(1 for c in self._pending[: end - self._start] if c.isalnum())

    def _natural(self, end: int, final: bool) -> object:
        """Decide a cut at ``end`` from punctuation: True, False or _WAIT (needs the next character)."""
        c = self._char(end - 1)
        nxt = self._char(end)
        known = nxt != "" or final
        if c in SENTENCE_MARKS:
            ok = True
        elif c == ".":
            if not known:
                return _WAIT
            ok = (nxt == "" or nxt.isspace()) and not (_is_digit(self._char(end - 2)) and _is_digit(nxt))
        elif c in CLAUSE_MARKS and self._first and self.first_clause_cut:
            if _is_digit(self._char(end - 2)):
                if not known:
                    return _WAIT
                if _is_digit(nxt):
                    return False
            ok = self._speakable(end) >= max(1, self.min_first_chars)
        else:
            return False
        return ok and not self._protected(end) and self._speakable(end) > 0

    def _boundary_ok(self, end: int) -> bool:
        """A cut at ``end`` between two known characters that splits no digit/Latin run and no span."""
        a, b = self._char(end - 1), self._char(end)
        if not a or not b or self._protected(end):
            return False
        ca, cb = _char_class(a), _char_class(b)
        if a.isspace():
            return True
        if ca == "other" or cb == "other":
            return False
        if ca == cb and ca != "han":
            return False
        return True

    def _cap_cut(self) -> int | None:
        """Best cut inside the first max_chars characters of the pending text, or None."""
        lo, hi = self._start + 1, self._start + self.max_chars
        clause = space = han = change = None
        for end in range(hi, lo - 1, -1):
            a, b = self._char(end - 1), self._char(end)
            if self._protected(end) or self._speakable(end) == 0:
                continue
            if clause is None and (a in CLAUSE_MARKS or a in SENTENCE_MARKS) and not (
                _is_digit(self._char(end - 2)) and _is_digit(b)
            ):
                clause = end
                break
            if space is None and a.isspace() and not b.isspace():
                space = end
            if han is None and _is_han(a) and _is_han(b) and self._word_boundary(end):
                han = end
            if change is None and _char_class(a) != _char_class(b) and self._boundary_ok(end):
                change = end
        for cand in (clause, space, han, change):
            if cand is not None:
                return cand
        return None

    def _word_boundary(self, end: int) -> bool:
        """True when ``end`` (between two Hanzi) is a word boundary of the cap window."""
        if self._word_boundaries is None:
            from .prosody import default_segmenter

            seg = default_segmenter()
            self._word_boundaries = lambda text: _boundaries_from_words(seg.cut(text))
        if self._window_start != self._start:
            window = self._pending[: self.max_chars + 1]
            self._window_cuts = frozenset(self._start + k for k in self._word_boundaries(window))
            self._window_start = self._start
        return end in self._window_cuts

    def _emit(self, end: int, reason: str, out: list[Segment]) -> None:
        text = self._pending[: end - self._start]
        if has_speakable(text):
            out.append(Segment(text, self._start, end, reason))
            self._first = False
        self._pending = self._pending[end - self._start:]
        self._start = end
        self._next_end = end + 1
        self._overflow = False
        self._spans = [(s, e) for s, e in self._spans if e > end]

    def _advance(self, final: bool, reason: str = "") -> list[Segment]:
        out: list[Segment] = []
        while self._pending:
            limit = self._start + len(self._pending)  # absolute end of the received text
            end = self._next_end
            if end > limit:
                if final:
                    self._emit(limit, reason, out)
                return out
            if not self._overflow and end - self._start > self.max_chars:
                cut = self._cap_cut()
                if cut is not None:
                    self._emit(cut, "cap", out)
                    continue
                self._overflow = True
            decision = self._natural(end, final)
            if decision is _WAIT:
                if final:
                    decision = True
                else:
                    return out
            if decision:
                self._emit(end, "clause" if self._char(end - 1) in CLAUSE_MARKS else "sentence", out)
                continue
            if self._overflow:
                if end - self._start >= self.hard_max_chars:
                    self._emit(end, "cap", out)
                    continue
                if end < limit and self._boundary_ok(end):
                    self._emit(end, "cap", out)
                    continue
                if end == limit and not final:
                    return out
            self._next_end += 1
        return out


def spans_in_segment(segment: Segment, spans: Sequence[_SpanT]) -> list[_SpanT]:
    """The spans (dataclasses with start/end, e.g. normalize.Span) inside ``segment``, rebased to its start.

    Use it to pass a segment's say-as spans to ``MandarinFrontend.to_ids(segment.text, spans=...)``.
    """
    out = []
    for sp in spans:
        if segment.start <= sp.start and sp.end <= segment.end:  # type: ignore[attr-defined]
            out.append(dataclasses.replace(sp, start=sp.start - segment.start, end=sp.end - segment.start))  # type: ignore[attr-defined,type-var]
    return out


def _boundaries_from_words(words: Sequence[str]) -> list[int]:
    """Offsets between consecutive words."""
    out, pos = [], 0
    for w in words[:-1]:
        pos += len(w)
        out.append(pos)
    return out
