"""The SSML parser's handlers: expat's callbacks (start, end, data) turned into events, with positions, namespace
prefixes and limits."""

from __future__ import annotations

from service.ssml.elements import ElementHandlers, Frame
from service.ssml.model import Cut, Event, ProsodyAt, SsmlError, SsmlLimits, SsmlWarning, TextPiece
from service.ssml.values import ValueProblem

SSML_NS = "http://www.w3.org/2001/10/synthesis"
_XML_NS = "http://www.w3.org/XML/1998/namespace"
#: Elements whose content is spoken as ordinary text (their own effect is applied or warned about); emotion
#: (Aliyun), par, seq and media (Google) and word (Tencent) are vendor elements without a namespace.
_INLINE = frozenset({"speak", "p", "s", "paragraph", "sentence", "lang", "emphasis", "audio", "voice", "w", "token",
                     "lookup", "prosody", "emotion", "par", "seq", "media", "word"})
#: Elements whose content is never spoken.
_SILENT = frozenset({"meta", "metadata", "desc", "lexicon"})
#: Elements whose text is collected whole before it is released (their span or replacement needs all of it).
_ATOMIC = frozenset({"say-as", "sub", "phoneme"})
#: Empty elements: bookmark is Azure's mark, soundEvent Aliyun's inserted sound.
_EMPTY = frozenset({"break", "mark", "bookmark", "soundEvent"})
SUPPORTED = sorted(_INLINE | _SILENT | _ATOMIC | _EMPTY)
_MAX_WARNINGS = 32


def _is_cjk(c: str) -> bool:
    """Han characters and CJK/fullwidth punctuation: a space next to one is layout, not a word gap."""
    cp = ord(c)
    return (0x2E80 <= cp <= 0x9FFF or 0xF900 <= cp <= 0xFAFF or 0xFE30 <= cp <= 0xFE4F or 0xFF00 <= cp <= 0xFFEF
            or 0x20000 <= cp <= 0x3FFFF)


class Builder(ElementHandlers):
    """The parser's target: turns expat callbacks into events (one instance per document)."""

    def __init__(self, limits: SsmlLimits, base_speaking_rate: float, base_volume_db: float | None) -> None:
        self.limits = limits
        self.expat = None  # set by SsmlStream: the pyexpat parser, for positions
        self.stack: list[Frame] = []
        self.elements = 0
        self.root_seen = False
        self.root_closed = False
        self.base_speaking_rate = base_speaking_rate
        self.base_volume_db = base_volume_db
        self.events: list[Event] = []
        self.text_len = 0  # code points released so far
        self.release: list[str] = []  # text not yet put in a TextPiece
        self.held: list[str] | None = None  # content of the open atomic element
        self.last_char: str | None = None
        self.pending_space = False
        self.total_break_ms = 0
        self.last_cut_pos = -1
        self.prosody_emitted: tuple[float, float | None] = (base_speaking_rate, base_volume_db)
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

    def warn(self, code: str, message: str, once: bool = False, once_key: str = "") -> None:
        """An in-band warning at the current position; ``once``: only the first per code (and ``once_key``)."""
        if once:
            key = f"{code}:{once_key}"
            if key in self.warned:
                return
            self.warned.add(key)
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

    # -- the handlers pyexpat calls (start and end tags as written, prefixes unresolved; character data) ----------

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        at = self.where()
        self.elements += 1
        if self.elements > self.limits.max_elements:
            raise self.fail(f"more than {self.limits.max_elements} elements; split the text into several turns")
        if len(self.stack) >= self.limits.max_depth:
            raise self.fail(f"elements nest deeper than {self.limits.max_depth} levels; flatten the markup")
        for key, value in attrib.items():
            if len(value) > self.limits.max_attr_chars:
                raise self.fail(f"attribute {key} is longer than {self.limits.max_attr_chars} characters; shorten it")
        parent = self.stack[-1] if self.stack else None
        prefixes = parent.prefixes if parent else {"xml": _XML_NS}
        declared = {k: v for k, v in attrib.items() if k == "xmlns" or k.startswith("xmlns:")}
        if declared:
            prefixes = {**prefixes, **{k.partition(":")[2]: v for k, v in declared.items()}}
            attrib = {k: v for k, v in attrib.items() if k not in declared}
        prefix, _, local = tag.rpartition(":")
        ns = prefixes.get(prefix) if prefix else prefixes.get("", "")
        speaking_rate = parent.speaking_rate if parent else self.base_speaking_rate
        volume = parent.volume_db if parent else self.base_volume_db
        frame = Frame(local, at[0], at[1], speaking_rate, volume, silent=bool(parent and parent.silent), tag=tag,
                      prefixes=prefixes)
        ours = ns in ("", SSML_NS)
        if not self.root_seen:
            if local != "speak" or not ours:
                raise self.fail(f"the root element is <{tag}>; an SSML document is one <speak> element")
            self.root_seen = True
        elif local == "speak" and ours and not (parent and parent.name == "media"):
            raise self.fail("<speak> inside <speak>; use <p>, <s> or <voice> to structure the text")
        if self.held is not None:
            raise self.fail(f"<{tag}> inside <{self.stack[-1].tag}>, which holds text only; move it outside")
        if frame.silent:  # inside <meta>, <desc>...: nothing in there is spoken or applied
            frame.name = ""
            self.stack.append(frame)
            return
        if not ours:
            where = (f"its prefix {prefix}: is not declared" if ns is None else f"namespace {ns}")
            self.warn("ssml_element_ignored", f"<{tag}> ({where}) is not supported; its text, if any, is spoken",
                      once=True, once_key=tag)
            frame.name = ""
            self.stack.append(frame)
            return
        handler = getattr(self, "_start_" + local.replace("-", "_"), None)
        if local not in SUPPORTED or handler is None:
            raise self.fail(f"unsupported element <{tag}>; supported: {', '.join(SUPPORTED)}")
        lang = attrib.get("xml:lang")
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
                # at the first character that is not a space, however the data was split
                lead = text[:len(text) - len(text.lstrip())]
                line, column = self.where()
                if "\n" in lead:
                    line, column = line + lead.count("\n"), len(lead) - lead.rfind("\n")
                else:
                    column += len(lead)
                raise self.fail(f"<{frame.tag}> is empty; move the text after it", (line, column))
            return
        if frame.alias is not None:
            return  # <sub>: the written form is replaced by the alias
        self.put_text(text, self.held if self.held is not None else self.release)

