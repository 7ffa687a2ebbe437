"""What of one turn's text a listener has heard, from the events a client received: shared by the client library's
failover (what to resend) and the framework adapters' word timing (clients/integrations/session.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clients.conversation import WordTime


@dataclass(frozen=True, slots=True)
class WordPiece:
    """A piece of the turn's text covering one timed word and the text before it since the previous piece
    (spaces, punctuation), with the word's media time; pieces joined give back the turn's text."""

    text: str
    start_char: int
    end_char: int
    start_pts_ms: int
    end_pts_ms: int


@dataclass
class HeardTurn:
    """One turn's text (as sent) and what of it was heard: the server's word timings, the audio received, and the
    marks reached. Media times are on one clock (the caller's), text offsets count code points of `text`."""

    text: str = ""
    words: list["WordTime"] = field(default_factory=list)  # the server's word timings, in text order
    reached_char: int = 0  # furthest text position of a reached mark
    floor_char: int = 0  # text known heard without a word or mark for it (an earlier stream's heard text)
    first_audio_pts_ms: int | None = None  # start of the turn's first speech frame
    audio_end_pts_ms: int | None = None  # end of the last speech frame received
    covered_char: int = 0  # word pieces: the text handed out so far ends here

    def add_text(self, delta: str) -> None:
        self.text += delta

    def mark_reached(self, pos: int) -> None:
        """The audio up to a mark placed at text position `pos` was released: the text before it counts as heard."""
        self.reached_char = max(self.reached_char, pos)

    def audio(self, pts_ms: int, duration_ms: int, silence: bool) -> None:
        """A frame of this turn was received (silence frames carry no text)."""
        if silence:
            return
        if self.first_audio_pts_ms is None:
            self.first_audio_pts_ms = pts_ms
        self.audio_end_pts_ms = max(self.audio_end_pts_ms or 0, pts_ms + duration_ms)

    def add_words(self, words) -> None:
        self.words.extend(words)

    def heard_chars(self) -> int:
        """Text position up to which the listener heard the turn: the end of the last word whose audio was received
        in full, else the furthest reached mark; text after it (a word heard only in part included) is unheard."""
        heard = max(self.floor_char, self.reached_char)
        end = self.audio_end_pts_ms
        if end is not None:
            for w in self.words:
                if w.end_pts_ms <= end:
                    heard = max(heard, w.end_char)
        return min(heard, len(self.text))

    def pieces(self, words) -> list[WordPiece]:
        """Word pieces for newly timed words: the text between two words goes with the next word, so the pieces
        joined give back the turn's text (a word beyond the text known here keeps its own text)."""
        out = []
        for w in words:
            start_char = min(self.covered_char, w.start_char)
            text = self.text[start_char:w.end_char] if w.end_char <= len(self.text) else w.text
            self.covered_char = max(self.covered_char, w.end_char)
            out.append(WordPiece(text, start_char, w.end_char, w.start_pts_ms, w.end_pts_ms))
        return out

    def tail(self, at_pts_ms: int) -> WordPiece | None:
        """A completed turn's text after its last word piece (closing punctuation), at `at_pts_ms`; None if none."""
        if self.covered_char >= len(self.text):
            return None
        piece = WordPiece(self.text[self.covered_char:], self.covered_char, len(self.text), at_pts_ms, at_pts_ms)
        self.covered_char = len(self.text)
        return piece
