"""Incremental, hardened W3C SSML 1.1 subset parser: deltas in any split, the same events out."""

from __future__ import annotations

import logging
import re
from xml.parsers import expat

from defusedxml import DefusedXmlException
from defusedxml.common import DTDForbidden, EntitiesForbidden, ExternalReferenceForbidden

from service.ssml.builder import SSML_NS, Builder
from service.ssml.model import Event, SsmlDocument, SsmlError, SsmlLimits
from service.ssml.values import BREAK_STRENGTH_MS

log = logging.getLogger(__name__)

_EXPAT_HINTS = (
    ("mismatched tag", "close elements in the reverse order of opening them"),
    ("undefined entity", "only &amp; &lt; &gt; &quot; &apos; and numeric references like &#x4E2D; exist; "
                         "write a literal & as &amp;"),
    ("junk after document element", "put all the text and markup inside one <speak> element"),
    ("no element found", "the document ends before </speak>: close every element"),
    ("unclosed token", "the document ends inside a tag or comment: finish it and close every element"),
    ("not well-formed", "write < as &lt; and & as &amp; in text, and check the tag's syntax"),
    ("syntax error", "the document must start with <speak> (an <?xml ...?> declaration may come first)"),
    ("duplicate attribute", "give each attribute once"),
)
_END_TAG_RE = re.compile(r"</\s*([^\s>/]+)")


class SsmlStream:
    """Parses one SSML document fed in pieces; every piece returns the events it completed.

    Events come in document order and depend only on the document, not on how it was split: text is
    released as soon as expat has read it (text inside <say-as>, <sub> and <phoneme> when the element
    closes), and positioned events (Cut, MarkAt, ProsodyAt) follow the text before them. Raises SsmlError
    (line, column, what to change) on malformed or refused input, and again on every later call.
    """

    def __init__(self, limits: SsmlLimits | None = None, base_speaking_rate: float = 1.0,
                 base_volume_db: float | None = 0.0) -> None:
        self.limits = limits or SsmlLimits()
        self._builder = Builder(self.limits, base_speaking_rate, base_volume_db)
        self._parser = _hardened_expat(self._builder)
        self._builder.expat = self._parser
        self._fed: list[str] = []  # the document so far (at most max_chars): error messages quote its tags
        self._fed_chars = 0
        self._line, self._column = 1, 1  # position after the input fed so far (for the size limit)
        self._failed: SsmlError | None = None
        self._closed = False
        self.document = SsmlDocument(base_speaking_rate=base_speaking_rate, base_volume_db=base_volume_db)

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
        self._fed.append(delta)
        self._advance_position(delta)
        return self._run(lambda: self._parser.Parse(delta, False))

    def close(self) -> list[Event]:
        """The document is complete: raises SsmlError when it is not well-formed; returns the last events."""
        if self._failed is not None:
            raise self._failed
        if self._closed:
            return []
        self._closed = True
        return self._run(lambda: self._parser.Parse("", True))

    def _run(self, step) -> list[Event]:
        b = self._builder
        try:
            step()
        except expat.ExpatError as exc:
            hint = self._open_tags_hint(exc)
            core = expat.ErrorString(exc.code)
            message = f"{core}: {hint}" if hint.startswith("</") else _explain(core) + hint
            return self._failing(SsmlError(message, exc.lineno, exc.offset + 1))
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

    def _open_tags_hint(self, exc: expat.ExpatError) -> str:
        """The document's own tags for a nesting error: which element is still open, which end tag came instead."""
        open_tags = list(self._builder.stack)
        if not open_tags:
            return ""
        inner = open_tags[-1]
        inner_at = f"<{inner.tag}> (line {inner.line}, column {inner.column})"
        if exc.code == expat.errors.codes[expat.errors.XML_ERROR_TAG_MISMATCH]:
            found = _END_TAG_RE.match(self._text_at(exc.lineno, exc.offset - 2) or "")
            closing = found.group(1) if found else "?"
            if any(f.tag == closing for f in open_tags):
                return (f"</{closing}> comes while {inner_at} is still open; close elements in the reverse order "
                        f"of opening them: </{inner.tag}> before </{closing}>")
            return (f"</{closing}> closes no open element; the innermost open element is {inner_at}: "
                    f"close it with </{inner.tag}> or remove </{closing}>")
        if exc.code in (expat.errors.codes[expat.errors.XML_ERROR_NO_ELEMENTS],
                        expat.errors.codes[expat.errors.XML_ERROR_UNCLOSED_TOKEN]):
            still = ", ".join(f"<{f.tag}> (line {f.line}, column {f.column})" for f in reversed(open_tags))
            return f"; still open: {still}"
        return ""

    def _text_at(self, line: int, offset: int) -> str | None:
        """The fed document from 1-based ``line``, 0-based ``offset`` on (None when outside it)."""
        text = "".join(self._fed)
        start = 0
        for _ in range(line - 1):
            start = text.find("\n", start) + 1
            if start == 0:
                return None
        return text[start + offset:] if offset >= 0 else None

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


def _hardened_expat(builder: Builder) -> expat.XMLParserType:
    """A pyexpat parser without namespace processing (the Builder resolves prefixes, so an undeclared vendor
    prefix such as amazon: is a warning, not a failure) that refuses DTDs, entity declarations and external
    references as defusedxml does."""
    parser = expat.ParserCreate()

    def no_dtd(name, sysid, pubid, has_internal_subset):
        raise DTDForbidden(name, sysid, pubid)

    def no_entity(name, is_parameter_entity, value, base, sysid, pubid, notation_name):
        raise EntitiesForbidden(name, value, base, sysid, pubid, notation_name)

    def no_unparsed_entity(name, base, sysid, pubid, notation_name):
        raise EntitiesForbidden(name, None, base, sysid, pubid, notation_name)

    def no_external(context, base, sysid, pubid):
        raise ExternalReferenceForbidden(context, base, sysid, pubid)

    parser.StartDoctypeDeclHandler = no_dtd
    parser.EntityDeclHandler = no_entity
    parser.UnparsedEntityDeclHandler = no_unparsed_entity
    parser.ExternalEntityRefHandler = no_external
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    return parser


def _explain(expat_message: str) -> str:
    """expat's message (without its position) plus what to change."""
    core = expat_message.split(":")[0].strip()
    for key, hint in _EXPAT_HINTS:
        if key in core:
            return f"{core}; {hint}"
    return f"{core}; fix the XML at this position"


def parse_ssml(document: str, limits: SsmlLimits | None = None, base_speaking_rate: float = 1.0,
               base_volume_db: float | None = 0.0) -> SsmlDocument:
    """Parse a whole document (Synthesize); raises SsmlError."""
    stream = SsmlStream(limits, base_speaking_rate, base_volume_db)
    stream.feed(document)
    stream.close()
    return stream.document


__all__ = ["BREAK_STRENGTH_MS", "SSML_NS", "SsmlStream", "parse_ssml"]
