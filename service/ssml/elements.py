"""What each SSML element does: the start and end handlers the parser's Builder calls (breaks, marks, say-as, sub,
phoneme, prosody, and the elements that are only warned about)."""

from __future__ import annotations

from dataclasses import dataclass, field

from models.frontend.g2p import Lexicon, LexiconError
from models.frontend.normalize import Span
from service.ssml.model import MarkAt, Phoneme, TextPiece
from service.ssml.values import (
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

_EMPHASIS_LEVELS = frozenset({"strong", "moderate", "none", "reduced"})


@dataclass
class Frame:
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
    tag: str = ""  # the element's name as written (with its prefix), for messages
    prefixes: dict[str, str] = field(default_factory=dict)  # namespace prefixes in force: prefix → URI
    say_as_format: str = ""  # say-as format (dates, durations)


class ElementHandlers:
    """Mixed into the Builder: ``_start_<name>(frame, attrib)`` and ``_end_<name>(frame)`` per element (the Builder
    owns the state they use: the open elements, the released text, the limits, cut/warn/emit)."""

    def _start_speak(self, frame: Frame, attrib: dict[str, str]) -> None:
        pass

    def _start_p(self, frame: Frame, attrib: dict[str, str]) -> None:
        self.cut(0, "paragraph")

    def _end_p(self, frame: Frame) -> None:
        self.cut(0, "paragraph")

    def _start_s(self, frame: Frame, attrib: dict[str, str]) -> None:
        self.cut(0, "sentence")

    def _end_s(self, frame: Frame) -> None:
        self.cut(0, "sentence")

    _start_paragraph, _end_paragraph = _start_p, _end_p
    _start_sentence, _end_sentence = _start_s, _end_s

    def _start_break(self, frame: Frame, attrib: dict[str, str]) -> None:
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

    def _start_mark(self, frame: Frame, attrib: dict[str, str]) -> None:
        name = attrib.get("name")
        if not name:
            raise ValueProblem('<mark> needs a name: <mark name="after-greeting"/>')
        self._emit(MarkAt(self.position(), name))

    def _start_say_as(self, frame: Frame, attrib: dict[str, str]) -> None:
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

    def _end_say_as(self, frame: Frame) -> None:
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

    def _start_sub(self, frame: Frame, attrib: dict[str, str]) -> None:
        alias = attrib.get("alias")
        if alias is None:
            raise ValueProblem('<sub> needs an alias: <sub alias="世界卫生组织">WHO</sub>')
        frame.alias = alias

    def _end_sub(self, frame: Frame) -> None:
        self.put_text(frame.alias or "", self.release)

    def _start_phoneme(self, frame: Frame, attrib: dict[str, str]) -> None:
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

    def _end_phoneme(self, frame: Frame) -> None:
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

    def _start_prosody(self, frame: Frame, attrib: dict[str, str]) -> None:
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

    def _end_prosody(self, frame: Frame) -> None:
        parent = self.stack[-1]
        self.prosody_wanted = (parent.rate, parent.volume_db)

    def _start_emphasis(self, frame: Frame, attrib: dict[str, str]) -> None:
        level = attrib.get("level", "moderate").strip().lower()
        if level not in _EMPHASIS_LEVELS:
            raise ValueProblem(f'emphasis level="{level}" is unknown; use strong, moderate, none or reduced')
        self.warn("ssml_emphasis_ignored", "<emphasis> has no effect with this voice; its text is spoken", once=True)

    def _start_audio(self, frame: Frame, attrib: dict[str, str]) -> None:
        self.warn("ssml_audio_not_played", f'<audio src="{attrib.get("src", "")}"> is not played (no audio is '
                                           "fetched); its fallback text is spoken")

    def _start_voice(self, frame: Frame, attrib: dict[str, str]) -> None:
        self.warn("ssml_voice_ignored", "<voice> is ignored: the session's voice speaks its text")

    def _start_lookup(self, frame: Frame, attrib: dict[str, str]) -> None:
        self.warn("ssml_lookup_ignored", "<lookup> is ignored (use SessionConfig.lexicon); its text is spoken")

    def _start_lexicon(self, frame: Frame, attrib: dict[str, str]) -> None:
        self.warn("ssml_lexicon_ignored", "<lexicon> is ignored: no lexicon is fetched; use SessionConfig.lexicon")
        frame.silent = True

    def _start_meta(self, frame: Frame, attrib: dict[str, str]) -> None:
        frame.silent = True

    _start_metadata = _start_desc = _start_meta

    def _start_lang(self, frame: Frame, attrib: dict[str, str]) -> None:
        pass

    _start_w = _start_token = _start_lang
