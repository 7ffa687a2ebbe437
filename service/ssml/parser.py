"""Incremental, hardened W3C SSML 1.1 subset parser: deltas in any split, the same events out."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from xml.etree.ElementTree import ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

from models.frontend.g2p import Lexicon, LexiconError
from models.frontend.normalize import Span
from service.ssml.model import (
    Cut,
    Event,
    MarkAt,
    Phoneme,
    ProsodyAt,
    SsmlDocument,
    SsmlError,
    SsmlLimits,
    SsmlWarning,
    TextPiece,
)
from service.ssml.values import (
    BREAK_STRENGTH_MS,
    PINYIN_ALPHABETS,
    RATE_MAX,
    RATE_MIN,
    SAY_AS_KINDS,
    VOLUME_MAX_DB,
    VOLUME_MIN_DB,
    ValueProblem,
    break_ms,
    clamp,
    prosody_rate,
    prosody_volume,
)

log = logging.getLogger(__name__)

SSML_NS = "http://www.w3.org/2001/10/synthesis"
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
#: Elements whose content is spoken as ordinary text (their own effect is applied or warned about).
_INLINE = frozenset({"speak", "p", "s", "paragraph", "sentence", "lang", "emphasis", "audio", "voice", "w", "token",
                     "lookup", "prosody"})
#: Elements whose content is never spoken.
_SILENT = frozenset({"meta", "metadata", "desc", "lexicon"})
#: Elements whose text is collected whole before it is released (their span or replacement needs all of it).
_ATOMIC = frozenset({"say-as", "sub", "phoneme"})
_EMPTY = frozenset({"break", "mark"})
SUPPORTED = sorted(_INLINE | _SILENT | _ATOMIC | _EMPTY)
_EMPHASIS_LEVELS = frozenset({"strong", "moderate", "none", "reduced"})
_MAX_WARNINGS = 32

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


def _is_cjk(c: str) -> bool:
    """Han characters and CJK/fullwidth punctuation: a space next to one is layout, not a word gap."""
    cp = ord(c)
    return (0x2E80 <= cp <= 0x9FFF or 0xF900 <= cp <= 0xFAFF or 0xFE30 <= cp <= 0xFE4F or 0xFF00 <= cp <= 0xFFEF
            or 0x20000 <= cp <= 0x3FFFF)


@dataclass
class _Frame:
    """One open element."""

    name: str  # local name ("" for a foreign element)
    line: int
    column: int
    rate: float  # prosody in force inside the element
    volume_db: float | None
    kind: str | None = None  # say-as span kind
    ordinal: bool = False
    alias: str | None = None  # sub
    pinyin: str | None = None  # phoneme with a pinyin alphabet
    silent: bool = False  # content not spoken


class _Builder:
    """The parser's target: turns expat callbacks into events (one instance per document)."""

    def __init__(self, limits: SsmlLimits, base_rate: float, base_volume_db: float | None) -> None:
        self.limits = limits
        self.expat = None  # set by SsmlStream: the pyexpat parser, for positions
        self.stack: list[_Frame] = []
        self.elements = 0
        self.root_seen = False
        self.root_closed = False
        self.base_rate = base_rate
        self.base_volume_db = base_volume_db
        self.events: list[Event] = []
        self.text_len = 0  # code points released so far
        self.release: list[str] = []  # text not yet put in a TextPiece
        self.held: list[str] | None = None  # content of the open atomic element
        self.last_char: str | None = None
        self.pending_space = False
        self.total_break_ms = 0
        self.last_cut_pos = -1
        self.prosody_emitted: tuple[float, float | None] = (base_rate, base_volume_db)
        self.prosody_wanted = self.prosody_emitted  # applied at the next character (no empty ranges)
        self.warned: set[str] = set()
        self.n_warnings = 0

    # -- positions, errors, warnings -------------------------------------------------------------------

    def where(self) -> tuple[int, int]:
        """1-based line and column of the construct expat is reporting."""
        return int(self.expat.CurrentLineNumber), int(self.expat.CurrentColumnNumber) + 1

    def fail(self, message: str, at: tuple[int, int] | None = None) -> SsmlError:
        line, column = at or self.where()
        return SsmlError(message, line, column)

    def warn(self, code: str, message: str, once: bool = False) -> None:
        if once:
            if code in self.warned:
                return
            self.warned.add(code)
        self.n_warnings += 1
        if self.n_warnings > _MAX_WARNINGS:
            if self.n_warnings == _MAX_WARNINGS + 1:
                self._emit(SsmlWarning("ssml_warnings_truncated", f"more than {_MAX_WARNINGS} SSML warnings; "
                                                                  "the rest are not reported"))
            return
        line, column = self.where()
        self._emit(SsmlWarning(code, f"line {line}, column {column}: {message}"))

    # -- output ------------------------------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        self.flush_text()  # text before the event comes first, however the input was split
        self.events.append(event)

    def flush_text(self) -> None:
        """Put the released characters into a TextPiece (before any positioned event)."""
        if self.release:
            text = "".join(self.release)
            self.release.clear()
            self.events.append(TextPiece(self.text_len, text))
            self.text_len += len(text)

    def position(self) -> int:
        """Text offset of the next character (a pending space is not counted yet)."""
        return self.text_len + sum(len(s) for s in self.release)

    def cut(self, pause_ms: int, reason: str) -> None:
        """Segment boundary here; a pending space is dropped (a boundary is a pause anyway)."""
        self.pending_space = False
        pos = self.position()
        if pause_ms == 0 and (pos == 0 or pos == self.last_cut_pos):
            return
        self.last_cut_pos = pos
        self._emit(Cut(pos, pause_ms, reason))

    def put_text(self, data: str, sink: list[str]) -> None:
        """Append character data with XML whitespace collapsed: a run becomes one space between non-CJK text."""
        for c in data:
            if c.isspace():
                self.pending_space = True
                continue
            if self.prosody_wanted != self.prosody_emitted:
                self.apply_prosody()
            if self.pending_space:
                self.pending_space = False
                if self.last_char is not None and not _is_cjk(self.last_char) and not _is_cjk(c):
                    sink.append(" ")
            sink.append(c)
            self.last_char = c

    def apply_prosody(self) -> None:
        """The prosody in force changed since the last character: cut and say so, here."""
        self.cut(0, "prosody")
        self.prosody_emitted = self.prosody_wanted
        self._emit(ProsodyAt(self.position(), *self.prosody_wanted))

    # -- the target interface (xml.etree.ElementTree.XMLParser calls these) -------------------------------

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        at = self.where()
        self.elements += 1
        if self.elements > self.limits.max_elements:
            raise self.fail(f"more than {self.limits.max_elements} elements; split the text into several turns")
        if len(self.stack) >= self.limits.max_depth:
            raise self.fail(f"elements nest deeper than {self.limits.max_depth} levels; flatten the markup")
        for key, value in attrib.items():
            if len(value) > self.limits.max_attr_chars:
                raise self.fail(f"attribute {key.split('}')[-1]} is longer than {self.limits.max_attr_chars} "
                                "characters; shorten it")
        ns, _, local = tag[1:].partition("}") if tag.startswith("{") else ("", "", tag)
        parent = self.stack[-1] if self.stack else None
        rate = parent.rate if parent else self.base_rate
        volume = parent.volume_db if parent else self.base_volume_db
        frame = _Frame(local, at[0], at[1], rate, volume, silent=bool(parent and parent.silent))
        if not self.root_seen:
            if local != "speak" or ns not in ("", SSML_NS):
                raise self.fail(f"the root element is <{local}>; an SSML document is one <speak> element")
            self.root_seen = True
        elif local == "speak" and ns in ("", SSML_NS):
            raise self.fail("<speak> inside <speak>; use <p>, <s> or <voice> to structure the text")
        if self.held is not None:
            raise self.fail(f"<{local}> inside <{self.stack[-1].name}>, which holds text only; move it outside")
        if frame.silent:  # inside <meta>, <desc>...: nothing in there is spoken or applied
            frame.name = ""
            self.stack.append(frame)
            return
        if ns not in ("", SSML_NS):
            self.warn("ssml_element_ignored", f"element <{local}> of namespace {ns} is not supported; "
                                              "its text is spoken")
            frame.name = ""
            self.stack.append(frame)
            return
        handler = getattr(self, "_start_" + local.replace("-", "_"), None)
        if local not in SUPPORTED or handler is None:
            raise self.fail(f"unsupported element <{local}>; supported: {', '.join(SUPPORTED)}")
        lang = attrib.get(_XML_LANG)
        if lang and lang.split("-")[0].lower() not in ("zh", "cmn"):
            self.warn("ssml_language_ignored", f'xml:lang="{lang}": the voice speaks Mandarin only; the text is '
                                               "read as Mandarin")
        self.stack.append(frame)
        try:
            handler(frame, attrib)
        except ValueProblem as exc:
            raise self.fail(str(exc), at) from None

    def end(self, tag: str) -> None:
        frame = self.stack.pop()
        handler = getattr(self, "_end_" + frame.name.replace("-", "_"), None) if frame.name else None
        if handler is not None:
            handler(frame)
        if not self.stack:
            self.root_closed = True
            self.pending_space = False
            self.flush_text()

    def data(self, text: str) -> None:
        if not self.stack or self.stack[-1].silent:
            return
        frame = self.stack[-1]
        if frame.name in _EMPTY:
            if text.strip():
                raise self.fail(f"<{frame.name}> is empty; move the text after it")
            return
        if frame.alias is not None:
            return  # <sub>: the written form is replaced by the alias
        self.put_text(text, self.held if self.held is not None else self.release)

    # -- elements ----------------------------------------------------------------------------------------

    def _start_speak(self, frame: _Frame, attrib: dict[str, str]) -> None:
        pass

    def _start_p(self, frame: _Frame, attrib: dict[str, str]) -> None:
        self.cut(0, "paragraph")

    def _end_p(self, frame: _Frame) -> None:
        self.cut(0, "paragraph")

    def _start_s(self, frame: _Frame, attrib: dict[str, str]) -> None:
        self.cut(0, "sentence")

    def _end_s(self, frame: _Frame) -> None:
        self.cut(0, "sentence")

    _start_paragraph, _end_paragraph = _start_p, _end_p
    _start_sentence, _end_sentence = _start_s, _end_s

    def _start_break(self, frame: _Frame, attrib: dict[str, str]) -> None:
        strength = attrib.get("strength")
        ms = break_ms(attrib.get("time"), strength)
        if ms == 0 and strength is not None and strength.strip().lower() == "none" and "time" not in attrib:
            return  # strength="none": explicitly no boundary
        if ms > self.limits.max_break_ms:
            self.warn("ssml_break_clamped", f"break of {ms} ms clamped to {self.limits.max_break_ms} ms")
            ms = self.limits.max_break_ms
        room = self.limits.max_total_break_ms - self.total_break_ms
        if ms > room:
            self.warn("ssml_break_clamped", f"breaks add up to more than {self.limits.max_total_break_ms} ms; "
                                            f"this one is shortened to {room} ms")
            ms = room
        self.total_break_ms += ms
        self.cut(ms, "break")

    def _start_mark(self, frame: _Frame, attrib: dict[str, str]) -> None:
        name = attrib.get("name")
        if not name:
            raise ValueProblem('<mark> needs a name: <mark name="after-greeting"/>')
        self._emit(MarkAt(self.position(), name))

    def _start_say_as(self, frame: _Frame, attrib: dict[str, str]) -> None:
        interpret = attrib.get("interpret-as")
        if not interpret:
            raise ValueProblem('<say-as> needs interpret-as, e.g. <say-as interpret-as="telephone">')
        kind = SAY_AS_KINDS.get(interpret.strip().lower())
        if kind is None:
            self.warn("ssml_say_as_ignored", f'say-as interpret-as="{interpret}" is not supported (supported: '
                                             f'{", ".join(sorted(SAY_AS_KINDS))}); the text is read normally')
        fmt = attrib.get("format", "")
        if kind == "date" and fmt and fmt.lower() not in ("ymd", "ym", "md", "y", "m", "d"):
            self.warn("ssml_say_as_format", f'say-as date format="{fmt}" is not supported; dates are read as '
                                            "year-month-day (write 2026-11-22)")
        frame.kind = kind
        frame.ordinal = interpret.strip().lower() == "ordinal"
        self.held = []

    def _end_say_as(self, frame: _Frame) -> None:
        text = "".join(self.held or [])
        self.held = None
        lead = len(text) - len(text.lstrip(" "))
        if frame.ordinal and text[lead:] and not text[lead:].startswith("第"):
            text = text[:lead] + "第" + text[lead:]
        if not text[lead:]:
            return
        self.flush_text()
        start = self.text_len
        spans = (Span(start + lead, start + len(text), frame.kind),) if frame.kind else ()
        self.events.append(TextPiece(start, text, spans=spans))
        self.text_len += len(text)

    def _start_sub(self, frame: _Frame, attrib: dict[str, str]) -> None:
        alias = attrib.get("alias")
        if alias is None:
            raise ValueProblem('<sub> needs an alias: <sub alias="世界卫生组织">WHO</sub>')
        frame.alias = alias

    def _end_sub(self, frame: _Frame) -> None:
        self.put_text(frame.alias or "", self.release)

    def _start_phoneme(self, frame: _Frame, attrib: dict[str, str]) -> None:
        alphabet = (attrib.get("alphabet") or "").strip().lower()
        ph = attrib.get("ph")
        if ph is None:
            raise ValueProblem('<phoneme> needs ph: <phoneme alphabet="pinyin" ph="chao2 yang2">朝阳</phoneme>')
        if alphabet not in PINYIN_ALPHABETS:
            self.warn("ssml_phoneme_ignored", f'phoneme alphabet="{alphabet or "(none)"}" is not supported; use '
                                              'alphabet="pinyin" with tone numbers; the text is read normally')
            return
        frame.pinyin = " ".join(ph.split())
        self.held = []

    def _end_phoneme(self, frame: _Frame) -> None:
        if frame.pinyin is None:
            return
        text = "".join(self.held or [])
        self.held = None
        lead = len(text) - len(text.lstrip(" "))
        word = text[lead:]
        try:
            Lexicon({word: frame.pinyin})
        except LexiconError as exc:
            raise self.fail(f"<phoneme>: {exc}", (frame.line, frame.column)) from None
        self.flush_text()
        start = self.text_len
        self.events.append(TextPiece(start, text, phonemes=(Phoneme(start + lead, start + len(text), frame.pinyin),)))
        self.text_len += len(text)

    def _start_prosody(self, frame: _Frame, attrib: dict[str, str]) -> None:
        rate, volume = frame.rate, frame.volume_db
        if "rate" in attrib:
            wanted = prosody_rate(attrib["rate"], rate)
            rate = clamp(wanted, RATE_MIN, RATE_MAX)
            if rate != wanted:
                self.warn("ssml_rate_clamped", f'prosody rate="{attrib["rate"]}" is {wanted:g} × the normal rate; '
                                               f"clamped to {rate:g} (the range is {RATE_MIN:g}-{RATE_MAX:g})")
        if "volume" in attrib:
            wanted_db = prosody_volume(attrib["volume"], volume)
            volume = None if wanted_db is None else clamp(wanted_db, VOLUME_MIN_DB, VOLUME_MAX_DB)
            if volume != wanted_db:
                self.warn("ssml_volume_clamped", f'prosody volume="{attrib["volume"]}" is {wanted_db:+g} dB; '
                                                 f"clamped to {volume:+g} dB (the range is {VOLUME_MIN_DB:+g} to "
                                                 f"{VOLUME_MAX_DB:+g} dB)")
        for ignored in ("pitch", "contour", "range", "duration"):
            if ignored in attrib:
                self.warn("ssml_prosody_ignored", f"prosody {ignored} is not supported; rate and volume are")
        frame.rate, frame.volume_db = rate, volume
        self.prosody_wanted = (rate, volume)

    def _end_prosody(self, frame: _Frame) -> None:
        parent = self.stack[-1]
        self.prosody_wanted = (parent.rate, parent.volume_db)

    def _start_emphasis(self, frame: _Frame, attrib: dict[str, str]) -> None:
        level = attrib.get("level", "moderate").strip().lower()
        if level not in _EMPHASIS_LEVELS:
            raise ValueProblem(f'emphasis level="{level}" is unknown; use strong, moderate, none or reduced')
        self.warn("ssml_emphasis_ignored", "<emphasis> has no effect with this voice; its text is spoken", once=True)

    def _start_audio(self, frame: _Frame, attrib: dict[str, str]) -> None:
        self.warn("ssml_audio_not_played", f'<audio src="{attrib.get("src", "")}"> is not played (no audio is '
                                           "fetched); its fallback text is spoken")

    def _start_voice(self, frame: _Frame, attrib: dict[str, str]) -> None:
        self.warn("ssml_voice_ignored", "<voice> is ignored: the session's voice speaks its text")

    def _start_lookup(self, frame: _Frame, attrib: dict[str, str]) -> None:
        self.warn("ssml_lookup_ignored", "<lookup> is ignored (use SessionConfig.lexicon); its text is spoken")

    def _start_lexicon(self, frame: _Frame, attrib: dict[str, str]) -> None:
        self.warn("ssml_lexicon_ignored", "<lexicon> is ignored: no lexicon is fetched; use SessionConfig.lexicon")
        frame.silent = True

    def _start_meta(self, frame: _Frame, attrib: dict[str, str]) -> None:
        frame.silent = True

    _start_metadata = _start_desc = _start_meta

    def _start_lang(self, frame: _Frame, attrib: dict[str, str]) -> None:
        pass

    _start_w = _start_token = _start_lang


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
        self._builder = _Builder(self.limits, base_rate, base_volume_db)
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
        log.debug("ssml: %s", error)
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
