"""What each SSML element does: the start and end handlers the parser's Builder calls (breaks, marks, say-as, sub,
phoneme, prosody, and the elements that are only warned about)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from models.frontend.g2p import Lexicon, LexiconError
from models.frontend.normalize import Span
from service.ssml.model import MarkAt, Phoneme, TextPiece
from service.ssml.values import (
    DATE_FORMATS,
    DURATION_FORMATS,
    PINYIN_ALPHABETS,
    RATE_MAX,
    RATE_MIN,
    SAY_AS_KINDS,
    VOLUME_MAX_DB,
    VOLUME_MIN_DB,
    ValueProblem,
    aliyun_rate,
    aliyun_volume_db,
    break_ms,
    clamp,
    pinyin_syllables,
    prosody_rate,
    prosody_volume,
)

_EMPHASIS_LEVELS = frozenset({"strong", "moderate", "none", "reduced"})
#: <speak> attributes that change nothing here (W3C's, and Aliyun's audio options).
_SPEAK_NEUTRAL = frozenset({"version", "xml:lang", "xml:base", "xmlns", "onlogicerror"})
#: ph that can only be tone-numbered pinyin ("chao2 yang2", "chao2yang2").
_TONE_PINYIN_RE = re.compile(r"(?:[a-zv:ü]+[1-5][\s'-]*)+")
#: A Polly time: minutes and seconds written 1'21" (a duration, not a clock time).
_POLLY_DURATION_RE = re.compile(r"\s*(?:\d+')?\s*(?:\d+(?:\.\d+)?\")?\s*")


@dataclass
class Frame:
    """One open element."""

    name: str  # local name ("" for a foreign element)
    line: int
    column: int
    speaking_rate: float  # prosody in force inside the element
    volume_db: float | None
    kind: str | None = None  # say-as span kind
    ordinal: bool = False
    alias: str | None = None  # sub
    pinyin: str | None = None  # phoneme with a pinyin alphabet
    silent: bool = False  # content not spoken
    tag: str = ""  # the element's name as written (with its prefix), for messages
    prefixes: dict[str, str] = field(default_factory=dict)  # namespace prefixes in force: prefix → URI


class ElementHandlers:
    """Mixed into the Builder: ``_start_<name>(frame, attrib)`` and ``_end_<name>(frame)`` per element (the Builder
    owns the state they use: the open elements, the released text, the limits, cut/warn/emit)."""

    def _start_speak(self, frame: Frame, attrib: dict[str, str]) -> None:
        """The root: Aliyun puts the document's rate, volume and pitch here (integers, not W3C values)."""
        if len(self.stack) > 1:
            return  # a <speak> inside Google's <media>: its text is spoken in document order
        speaking_rate, volume = frame.speaking_rate, frame.volume_db
        if "rate" in attrib:
            factor = aliyun_rate(attrib["rate"])
            try:
                wanted = factor * speaking_rate if factor is not None else prosody_rate(attrib["rate"], speaking_rate)
            except ValueProblem:
                raise ValueProblem(f'speak rate="{attrib["rate"]}" is not a rate; Aliyun\'s rate is an integer '
                                   "-500 to 500 (0 = the normal rate), or use <prosody rate>") from None
            speaking_rate = clamp(wanted, RATE_MIN, RATE_MAX)
            if speaking_rate != wanted:
                self.warn("ssml_rate_clamped", f'speak rate="{attrib["rate"]}" is {wanted:g} × the normal rate; '
                                               f"clamped to {speaking_rate:g} (the range is {RATE_MIN:g}-{RATE_MAX:g})")
        if "volume" in attrib:
            gain = aliyun_volume_db(attrib["volume"])
            volume = None if gain is None or volume is None else clamp(volume + gain, VOLUME_MIN_DB, VOLUME_MAX_DB)
        ignored = sorted(k for k in attrib if k not in _SPEAK_NEUTRAL and k not in ("rate", "volume") and ":" not in k)
        if "pitch" in attrib:
            self.warn("ssml_prosody_ignored", f'speak pitch="{attrib["pitch"]}" is not supported (the voice has '
                                              "one pitch); rate and volume are")
            ignored.remove("pitch")
        if ignored:
            self.warn("ssml_attribute_ignored", f"speak {', '.join(ignored)}: not supported here (the session's "
                                                "voice and audio format apply); the text is spoken")
        if (speaking_rate, volume) != (frame.speaking_rate, frame.volume_db):
            frame.speaking_rate, frame.volume_db = speaking_rate, volume
            self.prosody_wanted = (speaking_rate, volume)

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

    def _start_bookmark(self, frame: Frame, attrib: dict[str, str]) -> None:
        """Azure's mark: <bookmark mark="name"/>."""
        name = attrib.get("mark")
        if not name:
            raise ValueProblem('<bookmark> needs a mark: <bookmark mark="after-greeting"/>')
        self._emit(MarkAt(self.position(), name))

    def _start_soundEvent(self, frame: Frame, attrib: dict[str, str]) -> None:  # noqa: N802 (Aliyun's name)
        self.warn("ssml_audio_not_played", f'<soundEvent src="{attrib.get("src", "")}"> is not played (no audio '
                                           "is fetched)")

    def _start_say_as(self, frame: Frame, attrib: dict[str, str]) -> None:
        interpret = attrib.get("interpret-as")
        if not interpret:
            raise ValueProblem('<say-as> needs interpret-as, e.g. <say-as interpret-as="telephone">')
        key = interpret.strip().lower()
        kind = SAY_AS_KINDS.get(key)
        if kind is None:
            self.warn("ssml_say_as_ignored", f'say-as interpret-as="{interpret}" is not supported (supported: '
                                             f'{", ".join(sorted(SAY_AS_KINDS))}); the text is read normally')
        fmt = (attrib.get("format") or "").strip().lower()
        if kind == "date" and fmt:
            order = "".join(c for i, c in enumerate(fmt) if c in "ymd" and c not in fmt[:i])
            if order in DATE_FORMATS and set(fmt) <= set("ymd-/. "):
                kind = f"date_{order}"
            else:
                self.warn("ssml_say_as_format", f'say-as date format="{fmt}" is not supported (use one of '
                                                f'{", ".join(DATE_FORMATS)}); the date is read year-month-day')
        elif kind == "duration" and fmt:
            order = fmt.replace(":", "")
            if order in DURATION_FORMATS:
                kind = f"duration_{order}"
            else:
                self.warn("ssml_say_as_format", f'say-as duration format="{fmt}" is not supported (use hms, hm '
                                                "or ms); 3 parts are read h:m:s, 2 parts m:s")
        frame.kind = kind
        frame.ordinal = key == "ordinal"
        self.held = []

    def _end_say_as(self, frame: Frame) -> None:
        text = "".join(self.held or [])
        self.held = None
        lead = len(text) - len(text.lstrip(" "))
        if frame.ordinal and text[lead:] and not text[lead:].startswith("第"):
            text = text[:lead] + "第" + text[lead:]
        if not text[lead:]:
            return
        kind = frame.kind
        if kind == "time" and ("'" in text or '"' in text) and _POLLY_DURATION_RE.fullmatch(text):
            kind = "duration"  # Polly's time is a duration in minutes and seconds: 1'21"
        self.flush_text()
        start = self.text_len
        spans = (Span(start + lead, start + len(text), kind),) if kind else ()
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
        if ph is None and "py" in attrib:  # <phoneme py="shan4">: pinyin without an alphabet
            ph, alphabet = attrib["py"], "py"
        if ph is None:
            raise ValueProblem('<phoneme> needs ph: <phoneme alphabet="pinyin" ph="chao2 yang2">朝阳</phoneme>')
        if not alphabet and _TONE_PINYIN_RE.fullmatch(ph.strip().lower()):
            alphabet = "pinyin"  # no alphabet, but tone-numbered pinyin: what every Mandarin vendor means
        if alphabet not in PINYIN_ALPHABETS:
            self.warn("ssml_phoneme_ignored", f'phoneme alphabet="{alphabet or "(none)"}" is not supported; use '
                                              'alphabet="pinyin" (or py, sapi, x-amazon-pinyin) with tone numbers; '
                                              "the text is read normally")
            return
        frame.pinyin = pinyin_syllables(ph)
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
        speaking_rate, volume = frame.speaking_rate, frame.volume_db
        if "rate" in attrib:
            wanted = prosody_rate(attrib["rate"], speaking_rate)
            speaking_rate = clamp(wanted, RATE_MIN, RATE_MAX)
            if speaking_rate != wanted:
                self.warn("ssml_rate_clamped", f'prosody rate="{attrib["rate"]}" is {wanted:g} × the normal rate; '
                                               f"clamped to {speaking_rate:g} (the range is {RATE_MIN:g}-{RATE_MAX:g})")
        if "volume" in attrib:
            wanted_db = prosody_volume(attrib["volume"], volume)
            volume = None if wanted_db is None else clamp(wanted_db, VOLUME_MIN_DB, VOLUME_MAX_DB)
            if volume != wanted_db:
                self.warn("ssml_volume_clamped", f'prosody volume="{attrib["volume"]}" is {wanted_db:+g} dB; '
                                                 f"clamped to {volume:+g} dB (the range is {VOLUME_MIN_DB:+g} to "
                                                 f"{VOLUME_MAX_DB:+g} dB)")
        for ignored in ("pitch", "contour", "range", "duration", *(k for k in attrib if ":" in k)):
            if ignored in attrib:
                self.warn("ssml_prosody_ignored", f"prosody {ignored} is not supported; rate and volume are")
        frame.speaking_rate, frame.volume_db = speaking_rate, volume
        self.prosody_wanted = (speaking_rate, volume)

    def _end_prosody(self, frame: Frame) -> None:
        parent = self.stack[-1]
        self.prosody_wanted = (parent.speaking_rate, parent.volume_db)

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

    _start_w = _start_token = _start_word = _start_lang

    def _start_emotion(self, frame: Frame, attrib: dict[str, str]) -> None:
        self.warn("ssml_element_ignored", "<emotion> is not supported (the voice has one style); its text is "
                                          "spoken", once=True, once_key="emotion")

    def _start_par(self, frame: Frame, attrib: dict[str, str]) -> None:
        self.warn("ssml_element_ignored", f"<{frame.tag}> is not supported (nothing is mixed or timed); the text "
                                          "in it is spoken in document order", once=True, once_key=frame.tag)

    _start_seq = _start_media = _start_par
