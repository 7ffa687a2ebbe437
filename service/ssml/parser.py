"""Incremental, hardened W3C SSML 1.1 subset parser: deltas in any split, the same events out."""

from __future__ import annotations

import logging
from xml.etree.ElementTree import ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

from service.ssml.builder import SSML_NS, Builder
from service.ssml.model import Event, SsmlDocument, SsmlError, SsmlLimits
from service.ssml.values import BREAK_STRENGTH_MS

log = logging.getLogger(__name__)

_EXPAT_HINTS = (
    ("mismatched tag", "close elements in the reverse order of opening them (</say-as> before </s>)"),
    ("undefined entity", "only &amp; &lt; &gt; &quot; &apos; and numeric references like &#x4E2D; exist; "
                         "write a literal & as &amp;"),
    ("junk after document element", "put all the text and markup inside one <speak> element"),
    ("no element found", "the document ends before </speak>: close every element"),
    ("unclosed token", "the document ends inside a tag or comment: finish it and close every element"),
    ("not well-formed", "write < as &lt; and & as &amp; in text, and check the tag's syntax"),
    ("syntax error", "the document must start with <speak> (an <?xml ...?> declaration may come first)"),
    ("duplicate attribute", "give each attribute once"),
    ("unbound prefix", "declare the namespace prefix (xmlns:x=\"...\") or drop it"),
)



class SsmlStream:
    """Parses one SSML document fed in pieces; every piece returns the events it completed.

    Events come in document order and depend only on the document, not on how it was split: text is
    released as soon as expat has read it (text inside <say-as>, <sub> and <phoneme> when the element
    closes), and positioned events (Cut, MarkAt, ProsodyAt) follow the text before them. Raises SsmlError
    (line, column, what to change) on malformed or refused input, and again on every later call.
    """

    def __init__(self, limits: SsmlLimits | None = None, base_rate: float = 1.0,
                 base_volume_db: float | None = 0.0) -> None:
        self.limits = limits or SsmlLimits()
        self._builder = Builder(self.limits, base_rate, base_volume_db)
        self._parser = DefusedXMLParser(target=self._builder, forbid_dtd=True, forbid_entities=True,
                                        forbid_external=True)
        self._builder.expat = self._parser.parser
        self._fed_chars = 0
        self._line, self._column = 1, 1  # position after the input fed so far (for the size limit)
        self._failed: SsmlError | None = None
        self._closed = False
        self.document = SsmlDocument(base_rate=base_rate, base_volume_db=base_volume_db)

    @property
    def complete(self) -> bool:
        """True once </speak> has been read."""
        return self._builder.root_closed

    def feed(self, delta: str) -> list[Event]:
        """Parse more of the document; returns the events it completed (possibly none)."""
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise SsmlError("text after the end of the SSML document; start a new turn", self._line, self._column)
        if not isinstance(delta, str):
            raise TypeError(f"delta must be a str, got {type(delta).__name__}")
        room = self.limits.max_chars - self._fed_chars
        if len(delta) > room:
            self._advance_position(delta[:room])
            return self._failing(SsmlError(f"the document is longer than {self.limits.max_chars} characters; "
                                           "split it into several turns", self._line, self._column))
        self._fed_chars += len(delta)
        self._advance_position(delta)
        return self._run(lambda: self._parser.feed(delta))

    def close(self) -> list[Event]:
        """The document is complete: raises SsmlError when it is not well-formed; returns the last events."""
        if self._failed is not None:
            raise self._failed
        if self._closed:
            return []
        self._closed = True
        return self._run(self._parser.close)

    def _run(self, step) -> list[Event]:
        b = self._builder
        try:
            step()
        except ParseError as exc:
            line, offset = exc.position
            return self._failing(SsmlError(_explain(str(exc)), line, offset + 1))
        except DefusedXmlException as exc:
            line, column = b.where()
            return self._failing(SsmlError(
                f"{type(exc).__name__}: DOCTYPE, entity declarations and external entities are not allowed in "
                "SSML; remove the <!DOCTYPE ...> and <!ENTITY ...>", line, column))
        except SsmlError as exc:
            return self._failing(exc)
        b.flush_text()
        events, b.events = b.events, []
        self.document.add(events)
        return events

    def _failing(self, error: SsmlError) -> list[Event]:
        self._failed = error
        log.debug("ssml: document refused at line %d, column %d", error.line, error.column)  # no caller text
        raise error

    def _advance_position(self, text: str) -> None:
        newlines = text.count("\n")
        if newlines:
            self._line += newlines
            self._column = len(text) - text.rfind("\n")
        else:
            self._column += len(text)


def _explain(expat_message: str) -> str:
    """expat's message (without its position) plus what to change."""
    core = expat_message.split(":")[0].strip()
    for key, hint in _EXPAT_HINTS:
        if key in core:
            return f"{core}; {hint}"
    return f"{core}; fix the XML at this position"


def parse_ssml(document: str, limits: SsmlLimits | None = None, base_rate: float = 1.0,
               base_volume_db: float | None = 0.0) -> SsmlDocument:
    """Parse a whole document (Synthesize); raises SsmlError."""
    stream = SsmlStream(limits, base_rate, base_volume_db)
    stream.feed(document)
    stream.close()
    return stream.document


__all__ = ["BREAK_STRENGTH_MS", "SSML_NS", "SsmlStream", "parse_ssml"]
