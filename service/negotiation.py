"""A call's negotiated settings: the client's SessionConfig checked against the server's defaults and limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from models.frontend.normalize import NormalizeOptions, Span
from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import wire
from service.audio.framer import frame_bytes
from service.config import ServiceConfig
from service.errors import InvalidArgument
from service.language import matches as language_matches
from service.pacing import checked_frames_per_event

ENCODINGS = {pb.AudioFormat.PCMU: "PCMU", pb.AudioFormat.PCMA: "PCMA", pb.AudioFormat.L16: "L16"}
ENCODING_ENUM = {v: k for k, v in ENCODINGS.items()}
PACING = {pb.Pacing.REALTIME: "REALTIME", pb.Pacing.ASAP: "ASAP"}
PACING_ENUM = {v: k for k, v in PACING.items()}
SPAN_KINDS = {
    pb.TextSpan.DIGITS: "digits",
    pb.TextSpan.TELEPHONE: "telephone",
    pb.TextSpan.CARDINAL: "cardinal",
    pb.TextSpan.ORDINAL: "cardinal",  # 第2 → 第二: the cardinal reader keeps the 第
    pb.TextSpan.AMOUNT: "amount",
    pb.TextSpan.DATE: "date",
    pb.TextSpan.TIME: "time",
    pb.TextSpan.VERIFICATION_CODE: "verification_code",
    pb.TextSpan.ID_CARD: "id_card",
    pb.TextSpan.BANK_CARD: "bank_card",
    pb.TextSpan.SPELL_OUT: "characters",
    pb.TextSpan.VERBATIM: "verbatim",
}
MAX_PREROLL_MS = 500
MAX_FADE_MS = 50
MAX_LEXICON_ENTRIES = 1000


def checked_volume_db(value: float, field_name: str) -> float:
    """A gain in dB within the wire's VOLUME_DB_RANGE; InvalidArgument names the field and the range."""
    lo, hi = wire.VOLUME_DB_RANGE
    if not lo <= value <= hi:  # NaN fails too
        raise InvalidArgument(f"{field_name} {value:g} is out of range; use {lo:g} to +{hi:g} dB")
    return float(value)


def checked_speaking_rate(value: float, field_name: str) -> float:
    """A speaking rate within the wire's SPEAKING_RATE_RANGE; InvalidArgument names the field and the range."""
    lo, hi = wire.SPEAKING_RATE_RANGE
    if not lo <= value <= hi:
        raise InvalidArgument(f"{field_name} {value:g} is out of range; use {lo:g} to {hi:g} (1.0 = natural rate)")
    return float(value)


def gain_of_db(volume_db: float) -> float:
    """Amplitude factor of a gain in dB."""
    return float(10.0 ** (volume_db / 20.0))


@dataclass(frozen=True)
class VoiceEntry:
    """A voice the engine has loaded, as the service advertises it."""

    name: str
    language: str
    sample_rate_hz: int
    license: str
    description: str
    is_default: bool
    step_samples: int = 0  # samples of one decoder step at sample_rate_hz (hop × reduction factor); 0 = unknown


@dataclass(frozen=True)
class SessionSettings:
    """Everything a call uses, every default filled in."""

    voice: VoiceEntry
    encoding: str
    sample_rate_hz: int
    frame_ms: int
    fade_ms: int
    pacing: str
    lead_ms: int
    preroll_ms: int
    language: str
    lexicon: Mapping[str, str] = field(default_factory=dict)
    normalize: NormalizeOptions = field(default_factory=NormalizeOptions)
    seed: int = 0
    word_timestamps: bool = False  # send WordTimestamps events (opt-in)
    volume_db: float = 0.0  # output gain of every turn unless the turn sets its own
    speaking_rate: float = 1.0  # every turn's rate unless the turn sets its own (the engine time-scales the mel)
    frames_per_event: int = 1  # audio frames per ServerEvent (more than 1: audio_batch events)

    @property
    def frame_bytes(self) -> int:
        """Payload bytes of one frame."""
        return frame_bytes(self.sample_rate_hz, self.frame_ms, self.encoding)

    def to_proto(self) -> pb.SessionConfig:
        """The effective config echoed in SessionStarted."""
        cfg = pb.SessionConfig(
            voice=self.voice.name,
            audio=pb.AudioFormat(
                encoding=ENCODING_ENUM[self.encoding], sample_rate_hz=self.sample_rate_hz,
                frame_ms=self.frame_ms, fade_ms=self.fade_ms,
            ),
            pacing=pb.Pacing(mode=PACING_ENUM[self.pacing], lead_ms=self.lead_ms),
            preroll_ms=self.preroll_ms,
            language=self.language,
            normalization=pb.NormalizationOptions(one_as_yao=self.normalize.one_as_yao),
            seed=self.seed,
            word_timestamps=self.word_timestamps,
            volume_db=self.volume_db,
            speaking_rate=self.speaking_rate,
            frames_per_event=self.frames_per_event,
        )
        cfg.lexicon.update(dict(self.lexicon))
        return cfg


def negotiate(
    audio: pb.AudioFormat,
    pacing: pb.Pacing,
    voice_name: str,
    preroll_ms: int,
    language: str,
    lexicon: Mapping[str, str],
    normalization: pb.NormalizationOptions,
    seed: int | None,
    voices: Mapping[str, VoiceEntry],
    cfg: ServiceConfig,
    default_pacing: str,
    word_timestamps: bool = False,
    volume_db: float | None = None,
    speaking_rate: float | None = None,
    frames_per_event: int = 0,
) -> SessionSettings:
    """Validate the client's choices; InvalidArgument names the field and the accepted values."""
    name = voice_name or next((v.name for v in voices.values() if v.is_default), "")
    voice = voices.get(name)
    if voice is None:
        raise InvalidArgument(f"unknown voice {voice_name!r}; available voices: {', '.join(sorted(voices))}")
    if language and voice.language and not language_matches(language, voice.language):
        raise InvalidArgument(f"voice {voice.name} speaks {voice.language}, not {language!r}; leave language empty")
    encoding = cfg.audio.encoding
    if audio.encoding:
        if audio.encoding not in ENCODINGS:
            raise InvalidArgument(f"unsupported audio.encoding {audio.encoding}; use PCMU, PCMA or L16")
        encoding = ENCODINGS[audio.encoding]
    sample_rate_hz = audio.sample_rate_hz or cfg.audio.sample_rate_hz
    try:
        wire.check_sample_rate(sample_rate_hz)
        wire.check_encoding_rate(encoding, sample_rate_hz)
        # an unset frame_ms takes the server's default, or the nearest length that holds whole samples at the rate
        frame_ms = audio.frame_ms or wire.fitting_frame_ms(sample_rate_hz, cfg.audio.frame_ms)
        wire.check_frame_ms(sample_rate_hz, frame_ms)
    except wire.WireFormatError as exc:
        raise InvalidArgument(str(exc)) from None
    fade_ms = audio.fade_ms if audio.HasField("fade_ms") else cfg.audio.fade_ms
    if fade_ms > MAX_FADE_MS:
        raise InvalidArgument(f"audio.fade_ms {fade_ms} is over the maximum {MAX_FADE_MS}")
    mode = default_pacing
    if pacing.mode:
        if pacing.mode not in PACING:
            raise InvalidArgument(f"unsupported pacing.mode {pacing.mode}; use REALTIME or ASAP")
        mode = PACING[pacing.mode]
    lead_ms = pacing.lead_ms if pacing.HasField("lead_ms") else cfg.audio.lead_ms
    if lead_ms > wire.MAX_LEAD_MS:
        raise InvalidArgument(f"pacing.lead_ms {lead_ms} is over the maximum {wire.MAX_LEAD_MS}")
    packed = checked_frames_per_event(frames_per_event, frame_ms, lead_ms, mode)
    preroll = preroll_ms or cfg.audio.preroll_ms
    if preroll > MAX_PREROLL_MS:
        raise InvalidArgument(f"preroll_ms {preroll} is over the maximum {MAX_PREROLL_MS}")
    if len(lexicon) > MAX_LEXICON_ENTRIES:
        raise InvalidArgument(f"lexicon has {len(lexicon)} entries; at most {MAX_LEXICON_ENTRIES}")
    volume = 0.0 if volume_db is None else checked_volume_db(volume_db, "volume_db")
    rate_x = 1.0 if speaking_rate is None else checked_speaking_rate(speaking_rate, "speaking_rate")
    one_as_yao = normalization.one_as_yao if normalization.HasField("one_as_yao") else cfg.frontend.one_as_yao
    return SessionSettings(
        voice=voice,
        encoding=encoding,
        sample_rate_hz=sample_rate_hz,
        frame_ms=frame_ms,
        fade_ms=fade_ms,
        pacing=mode,
        lead_ms=lead_ms,
        preroll_ms=preroll,
        language=language or voice.language,
        lexicon=dict(lexicon),
        normalize=NormalizeOptions(one_as_yao=one_as_yao),
        seed=int(seed or 0),
        word_timestamps=bool(word_timestamps and voice.step_samples > 0),
        volume_db=volume,
        speaking_rate=rate_x,
        frames_per_event=packed,
    )


def spans_from_proto(spans, text_chars: int, offset: int = 0) -> list[Span]:
    """Say-as spans of a message, shifted by `offset`; InvalidArgument for out-of-range, empty or overlapping ones."""
    out: list[Span] = []
    for sp in spans:
        if sp.kind not in SPAN_KINDS:
            raise InvalidArgument(f"span {sp.start}-{sp.end}: unknown kind {sp.kind}")
        if not sp.start < sp.end <= text_chars:
            raise InvalidArgument(
                f"span {sp.start}-{sp.end} is outside the text (0-{text_chars} code points) or empty"
            )
        out.append(Span(sp.start + offset, sp.end + offset, SPAN_KINDS[sp.kind]))
    out.sort(key=lambda s: s.start)
    for a, b in zip(out, out[1:]):
        if b.start < a.end:
            raise InvalidArgument(f"spans {a.start - offset}-{a.end - offset} and {b.start - offset}-{b.end - offset} overlap")
    return out
