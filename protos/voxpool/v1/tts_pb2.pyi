from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AudioFormat(_message.Message):
    __slots__ = ("encoding", "sample_rate_hz", "frame_ms", "fade_ms")
    class Encoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ENCODING_UNSPECIFIED: _ClassVar[AudioFormat.Encoding]
        PCMU: _ClassVar[AudioFormat.Encoding]
        PCMA: _ClassVar[AudioFormat.Encoding]
        L16: _ClassVar[AudioFormat.Encoding]
    ENCODING_UNSPECIFIED: AudioFormat.Encoding
    PCMU: AudioFormat.Encoding
    PCMA: AudioFormat.Encoding
    L16: AudioFormat.Encoding
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    FRAME_MS_FIELD_NUMBER: _ClassVar[int]
    FADE_MS_FIELD_NUMBER: _ClassVar[int]
    encoding: AudioFormat.Encoding
    sample_rate_hz: int
    frame_ms: int
    fade_ms: int
    def __init__(self, encoding: _Optional[_Union[AudioFormat.Encoding, str]] = ..., sample_rate_hz: _Optional[int] = ..., frame_ms: _Optional[int] = ..., fade_ms: _Optional[int] = ...) -> None: ...

class Pacing(_message.Message):
    __slots__ = ("mode", "lead_ms")
    class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        MODE_UNSPECIFIED: _ClassVar[Pacing.Mode]
        REALTIME: _ClassVar[Pacing.Mode]
        ASAP: _ClassVar[Pacing.Mode]
    MODE_UNSPECIFIED: Pacing.Mode
    REALTIME: Pacing.Mode
    ASAP: Pacing.Mode
    MODE_FIELD_NUMBER: _ClassVar[int]
    LEAD_MS_FIELD_NUMBER: _ClassVar[int]
    mode: Pacing.Mode
    lead_ms: int
    def __init__(self, mode: _Optional[_Union[Pacing.Mode, str]] = ..., lead_ms: _Optional[int] = ...) -> None: ...

class NormalizationOptions(_message.Message):
    __slots__ = ("one_as_yao",)
    ONE_AS_YAO_FIELD_NUMBER: _ClassVar[int]
    one_as_yao: bool
    def __init__(self, one_as_yao: _Optional[bool] = ...) -> None: ...

class TextSpan(_message.Message):
    __slots__ = ("start", "end", "kind")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[TextSpan.Kind]
        DIGITS: _ClassVar[TextSpan.Kind]
        TELEPHONE: _ClassVar[TextSpan.Kind]
        CARDINAL: _ClassVar[TextSpan.Kind]
        ORDINAL: _ClassVar[TextSpan.Kind]
        AMOUNT: _ClassVar[TextSpan.Kind]
        DATE: _ClassVar[TextSpan.Kind]
        TIME: _ClassVar[TextSpan.Kind]
        VERIFICATION_CODE: _ClassVar[TextSpan.Kind]
        ID_CARD: _ClassVar[TextSpan.Kind]
        BANK_CARD: _ClassVar[TextSpan.Kind]
        SPELL_OUT: _ClassVar[TextSpan.Kind]
        VERBATIM: _ClassVar[TextSpan.Kind]
    KIND_UNSPECIFIED: TextSpan.Kind
    DIGITS: TextSpan.Kind
    TELEPHONE: TextSpan.Kind
    CARDINAL: TextSpan.Kind
    ORDINAL: TextSpan.Kind
    AMOUNT: TextSpan.Kind
    DATE: TextSpan.Kind
    TIME: TextSpan.Kind
    VERIFICATION_CODE: TextSpan.Kind
    ID_CARD: TextSpan.Kind
    BANK_CARD: TextSpan.Kind
    SPELL_OUT: TextSpan.Kind
    VERBATIM: TextSpan.Kind
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    kind: TextSpan.Kind
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ..., kind: _Optional[_Union[TextSpan.Kind, str]] = ...) -> None: ...

class ClientEvent(_message.Message):
    __slots__ = ("config", "text", "flush", "mark", "clear", "end", "keepalive")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FLUSH_FIELD_NUMBER: _ClassVar[int]
    MARK_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    KEEPALIVE_FIELD_NUMBER: _ClassVar[int]
    config: SessionConfig
    text: TextDelta
    flush: Flush
    mark: Mark
    clear: Clear
    end: End
    keepalive: Keepalive
    def __init__(self, config: _Optional[_Union[SessionConfig, _Mapping]] = ..., text: _Optional[_Union[TextDelta, _Mapping]] = ..., flush: _Optional[_Union[Flush, _Mapping]] = ..., mark: _Optional[_Union[Mark, _Mapping]] = ..., clear: _Optional[_Union[Clear, _Mapping]] = ..., end: _Optional[_Union[End, _Mapping]] = ..., keepalive: _Optional[_Union[Keepalive, _Mapping]] = ...) -> None: ...

class SessionConfig(_message.Message):
    __slots__ = ("voice", "audio", "pacing", "preroll_ms", "language", "lexicon", "normalization", "seed", "speaking_rate", "volume_db", "word_timestamps", "frames_per_event")
    class LexiconEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VOICE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    PACING_FIELD_NUMBER: _ClassVar[int]
    PREROLL_MS_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    LEXICON_FIELD_NUMBER: _ClassVar[int]
    NORMALIZATION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    SPEAKING_RATE_FIELD_NUMBER: _ClassVar[int]
    VOLUME_DB_FIELD_NUMBER: _ClassVar[int]
    WORD_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    FRAMES_PER_EVENT_FIELD_NUMBER: _ClassVar[int]
    voice: str
    audio: AudioFormat
    pacing: Pacing
    preroll_ms: int
    language: str
    lexicon: _containers.ScalarMap[str, str]
    normalization: NormalizationOptions
    seed: int
    speaking_rate: float
    volume_db: float
    word_timestamps: bool
    frames_per_event: int
    def __init__(self, voice: _Optional[str] = ..., audio: _Optional[_Union[AudioFormat, _Mapping]] = ..., pacing: _Optional[_Union[Pacing, _Mapping]] = ..., preroll_ms: _Optional[int] = ..., language: _Optional[str] = ..., lexicon: _Optional[_Mapping[str, str]] = ..., normalization: _Optional[_Union[NormalizationOptions, _Mapping]] = ..., seed: _Optional[int] = ..., speaking_rate: _Optional[float] = ..., volume_db: _Optional[float] = ..., word_timestamps: _Optional[bool] = ..., frames_per_event: _Optional[int] = ...) -> None: ...

class TurnOptions(_message.Message):
    __slots__ = ("text_format", "speaking_rate", "volume_db")
    class TextFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        TEXT_FORMAT_UNSPECIFIED: _ClassVar[TurnOptions.TextFormat]
        PLAIN: _ClassVar[TurnOptions.TextFormat]
        SSML: _ClassVar[TurnOptions.TextFormat]
    TEXT_FORMAT_UNSPECIFIED: TurnOptions.TextFormat
    PLAIN: TurnOptions.TextFormat
    SSML: TurnOptions.TextFormat
    TEXT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SPEAKING_RATE_FIELD_NUMBER: _ClassVar[int]
    VOLUME_DB_FIELD_NUMBER: _ClassVar[int]
    text_format: TurnOptions.TextFormat
    speaking_rate: float
    volume_db: float
    def __init__(self, text_format: _Optional[_Union[TurnOptions.TextFormat, str]] = ..., speaking_rate: _Optional[float] = ..., volume_db: _Optional[float] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("text", "turn_id", "spans", "turn_options")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    SPANS_FIELD_NUMBER: _ClassVar[int]
    TURN_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    text: str
    turn_id: str
    spans: _containers.RepeatedCompositeFieldContainer[TextSpan]
    turn_options: TurnOptions
    def __init__(self, text: _Optional[str] = ..., turn_id: _Optional[str] = ..., spans: _Optional[_Iterable[_Union[TextSpan, _Mapping]]] = ..., turn_options: _Optional[_Union[TurnOptions, _Mapping]] = ...) -> None: ...

class Flush(_message.Message):
    __slots__ = ("turn_id",)
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    def __init__(self, turn_id: _Optional[str] = ...) -> None: ...

class Keepalive(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Mark(_message.Message):
    __slots__ = ("name", "turn_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    turn_id: str
    def __init__(self, name: _Optional[str] = ..., turn_id: _Optional[str] = ...) -> None: ...

class Clear(_message.Message):
    __slots__ = ("turn_id",)
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    def __init__(self, turn_id: _Optional[str] = ...) -> None: ...

class End(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ServerEvent(_message.Message):
    __slots__ = ("started", "audio", "turn_done", "mark_reached", "cleared", "warning", "error", "words", "audio_batch")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    TURN_DONE_FIELD_NUMBER: _ClassVar[int]
    MARK_REACHED_FIELD_NUMBER: _ClassVar[int]
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_BATCH_FIELD_NUMBER: _ClassVar[int]
    started: SessionStarted
    audio: AudioFrame
    turn_done: TurnDone
    mark_reached: MarkReached
    cleared: Cleared
    warning: Warning
    error: Error
    words: WordTimestamps
    audio_batch: AudioBatch
    def __init__(self, started: _Optional[_Union[SessionStarted, _Mapping]] = ..., audio: _Optional[_Union[AudioFrame, _Mapping]] = ..., turn_done: _Optional[_Union[TurnDone, _Mapping]] = ..., mark_reached: _Optional[_Union[MarkReached, _Mapping]] = ..., cleared: _Optional[_Union[Cleared, _Mapping]] = ..., warning: _Optional[_Union[Warning, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., words: _Optional[_Union[WordTimestamps, _Mapping]] = ..., audio_batch: _Optional[_Union[AudioBatch, _Mapping]] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("max_delta_chars", "max_buffered_chars", "max_session_s", "idle_timeout_ms", "max_marks", "max_control_per_s", "max_lead_ms", "max_lookahead_ms", "max_synthesize_chars", "text_idle_flush_ms", "max_frames_per_event")
    MAX_DELTA_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_BUFFERED_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_SESSION_S_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MARKS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTROL_PER_S_FIELD_NUMBER: _ClassVar[int]
    MAX_LEAD_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_LOOKAHEAD_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_SYNTHESIZE_CHARS_FIELD_NUMBER: _ClassVar[int]
    TEXT_IDLE_FLUSH_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_FRAMES_PER_EVENT_FIELD_NUMBER: _ClassVar[int]
    max_delta_chars: int
    max_buffered_chars: int
    max_session_s: int
    idle_timeout_ms: int
    max_marks: int
    max_control_per_s: float
    max_lead_ms: int
    max_lookahead_ms: int
    max_synthesize_chars: int
    text_idle_flush_ms: int
    max_frames_per_event: int
    def __init__(self, max_delta_chars: _Optional[int] = ..., max_buffered_chars: _Optional[int] = ..., max_session_s: _Optional[int] = ..., idle_timeout_ms: _Optional[int] = ..., max_marks: _Optional[int] = ..., max_control_per_s: _Optional[float] = ..., max_lead_ms: _Optional[int] = ..., max_lookahead_ms: _Optional[int] = ..., max_synthesize_chars: _Optional[int] = ..., text_idle_flush_ms: _Optional[int] = ..., max_frames_per_event: _Optional[int] = ...) -> None: ...

class Voice(_message.Message):
    __slots__ = ("name", "language", "sample_rate_hz", "license", "description", "is_default")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    LICENSE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    name: str
    language: str
    sample_rate_hz: int
    license: str
    description: str
    is_default: bool
    def __init__(self, name: _Optional[str] = ..., language: _Optional[str] = ..., sample_rate_hz: _Optional[int] = ..., license: _Optional[str] = ..., description: _Optional[str] = ..., is_default: _Optional[bool] = ...) -> None: ...

class SessionStarted(_message.Message):
    __slots__ = ("session_id", "effective_config", "limits", "frame_bytes", "server_version", "voice")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    FRAME_BYTES_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    effective_config: SessionConfig
    limits: Limits
    frame_bytes: int
    server_version: str
    voice: Voice
    def __init__(self, session_id: _Optional[str] = ..., effective_config: _Optional[_Union[SessionConfig, _Mapping]] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., frame_bytes: _Optional[int] = ..., server_version: _Optional[str] = ..., voice: _Optional[_Union[Voice, _Mapping]] = ...) -> None: ...

class AudioFrame(_message.Message):
    __slots__ = ("payload", "seq", "pts_ms", "duration_ms", "turn_id", "silence")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    PTS_MS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    SILENCE_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    seq: int
    pts_ms: int
    duration_ms: int
    turn_id: str
    silence: bool
    def __init__(self, payload: _Optional[bytes] = ..., seq: _Optional[int] = ..., pts_ms: _Optional[int] = ..., duration_ms: _Optional[int] = ..., turn_id: _Optional[str] = ..., silence: _Optional[bool] = ...) -> None: ...

class AudioBatch(_message.Message):
    __slots__ = ("frames",)
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    frames: _containers.RepeatedCompositeFieldContainer[AudioFrame]
    def __init__(self, frames: _Optional[_Iterable[_Union[AudioFrame, _Mapping]]] = ...) -> None: ...

class TurnDone(_message.Message):
    __slots__ = ("turn_id", "ttfa_ms", "audio_ms", "underruns", "late_chunks", "chunks", "ttfs_ms")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TTFA_MS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    UNDERRUNS_FIELD_NUMBER: _ClassVar[int]
    LATE_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    TTFS_MS_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    ttfa_ms: int
    audio_ms: int
    underruns: int
    late_chunks: int
    chunks: int
    ttfs_ms: int
    def __init__(self, turn_id: _Optional[str] = ..., ttfa_ms: _Optional[int] = ..., audio_ms: _Optional[int] = ..., underruns: _Optional[int] = ..., late_chunks: _Optional[int] = ..., chunks: _Optional[int] = ..., ttfs_ms: _Optional[int] = ...) -> None: ...

class MarkReached(_message.Message):
    __slots__ = ("name", "turn_id", "pts_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    PTS_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    turn_id: str
    pts_ms: int
    def __init__(self, name: _Optional[str] = ..., turn_id: _Optional[str] = ..., pts_ms: _Optional[int] = ...) -> None: ...

class Cleared(_message.Message):
    __slots__ = ("turn_id", "last_pts_ms", "text_spoken", "text_remaining", "dropped_audio_ms")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_PTS_MS_FIELD_NUMBER: _ClassVar[int]
    TEXT_SPOKEN_FIELD_NUMBER: _ClassVar[int]
    TEXT_REMAINING_FIELD_NUMBER: _ClassVar[int]
    DROPPED_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    last_pts_ms: int
    text_spoken: str
    text_remaining: str
    dropped_audio_ms: int
    def __init__(self, turn_id: _Optional[str] = ..., last_pts_ms: _Optional[int] = ..., text_spoken: _Optional[str] = ..., text_remaining: _Optional[str] = ..., dropped_audio_ms: _Optional[int] = ...) -> None: ...

class WordTimestamps(_message.Message):
    __slots__ = ("turn_id", "words")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    words: _containers.RepeatedCompositeFieldContainer[WordTiming]
    def __init__(self, turn_id: _Optional[str] = ..., words: _Optional[_Iterable[_Union[WordTiming, _Mapping]]] = ...) -> None: ...

class WordTiming(_message.Message):
    __slots__ = ("text", "start_char", "end_char", "start_pts_ms", "end_pts_ms")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    START_CHAR_FIELD_NUMBER: _ClassVar[int]
    END_CHAR_FIELD_NUMBER: _ClassVar[int]
    START_PTS_MS_FIELD_NUMBER: _ClassVar[int]
    END_PTS_MS_FIELD_NUMBER: _ClassVar[int]
    text: str
    start_char: int
    end_char: int
    start_pts_ms: int
    end_pts_ms: int
    def __init__(self, text: _Optional[str] = ..., start_char: _Optional[int] = ..., end_char: _Optional[int] = ..., start_pts_ms: _Optional[int] = ..., end_pts_ms: _Optional[int] = ...) -> None: ...

class Warning(_message.Message):
    __slots__ = ("code", "message", "turn_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    turn_id: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., turn_id: _Optional[str] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "turn_id", "retryable")
    class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        CODE_UNSPECIFIED: _ClassVar[Error.Code]
        TEXT_TOO_LONG: _ClassVar[Error.Code]
        INVALID_SPAN: _ClassVar[Error.Code]
        INVALID_LEXICON: _ClassVar[Error.Code]
        NORMALIZATION_FAILED: _ClassVar[Error.Code]
        SYNTHESIS_FAILED: _ClassVar[Error.Code]
        TOO_MANY_MARKS: _ClassVar[Error.Code]
        RATE_LIMITED: _ClassVar[Error.Code]
        UNKNOWN_TURN: _ClassVar[Error.Code]
        INVALID_SSML: _ClassVar[Error.Code]
        INVALID_OPTIONS: _ClassVar[Error.Code]
    CODE_UNSPECIFIED: Error.Code
    TEXT_TOO_LONG: Error.Code
    INVALID_SPAN: Error.Code
    INVALID_LEXICON: Error.Code
    NORMALIZATION_FAILED: Error.Code
    SYNTHESIS_FAILED: Error.Code
    TOO_MANY_MARKS: Error.Code
    RATE_LIMITED: Error.Code
    UNKNOWN_TURN: Error.Code
    INVALID_SSML: Error.Code
    INVALID_OPTIONS: Error.Code
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    code: Error.Code
    message: str
    turn_id: str
    retryable: bool
    def __init__(self, code: _Optional[_Union[Error.Code, str]] = ..., message: _Optional[str] = ..., turn_id: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class SynthesizeRequest(_message.Message):
    __slots__ = ("text", "voice", "audio", "spans", "lexicon", "seed", "language", "normalization", "pacing", "preroll_ms", "options", "word_timestamps", "frames_per_event")
    class LexiconEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SPANS_FIELD_NUMBER: _ClassVar[int]
    LEXICON_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    NORMALIZATION_FIELD_NUMBER: _ClassVar[int]
    PACING_FIELD_NUMBER: _ClassVar[int]
    PREROLL_MS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    WORD_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    FRAMES_PER_EVENT_FIELD_NUMBER: _ClassVar[int]
    text: str
    voice: str
    audio: AudioFormat
    spans: _containers.RepeatedCompositeFieldContainer[TextSpan]
    lexicon: _containers.ScalarMap[str, str]
    seed: int
    language: str
    normalization: NormalizationOptions
    pacing: Pacing
    preroll_ms: int
    options: TurnOptions
    word_timestamps: bool
    frames_per_event: int
    def __init__(self, text: _Optional[str] = ..., voice: _Optional[str] = ..., audio: _Optional[_Union[AudioFormat, _Mapping]] = ..., spans: _Optional[_Iterable[_Union[TextSpan, _Mapping]]] = ..., lexicon: _Optional[_Mapping[str, str]] = ..., seed: _Optional[int] = ..., language: _Optional[str] = ..., normalization: _Optional[_Union[NormalizationOptions, _Mapping]] = ..., pacing: _Optional[_Union[Pacing, _Mapping]] = ..., preroll_ms: _Optional[int] = ..., options: _Optional[_Union[TurnOptions, _Mapping]] = ..., word_timestamps: _Optional[bool] = ..., frames_per_event: _Optional[int] = ...) -> None: ...

class ListVoicesRequest(_message.Message):
    __slots__ = ("language",)
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    language: str
    def __init__(self, language: _Optional[str] = ...) -> None: ...

class ListVoicesResponse(_message.Message):
    __slots__ = ("voices",)
    VOICES_FIELD_NUMBER: _ClassVar[int]
    voices: _containers.RepeatedCompositeFieldContainer[Voice]
    def __init__(self, voices: _Optional[_Iterable[_Union[Voice, _Mapping]]] = ...) -> None: ...

class NormalizeRequest(_message.Message):
    __slots__ = ("text", "voice", "language", "spans", "lexicon", "normalization")
    class LexiconEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    SPANS_FIELD_NUMBER: _ClassVar[int]
    LEXICON_FIELD_NUMBER: _ClassVar[int]
    NORMALIZATION_FIELD_NUMBER: _ClassVar[int]
    text: str
    voice: str
    language: str
    spans: _containers.RepeatedCompositeFieldContainer[TextSpan]
    lexicon: _containers.ScalarMap[str, str]
    normalization: NormalizationOptions
    def __init__(self, text: _Optional[str] = ..., voice: _Optional[str] = ..., language: _Optional[str] = ..., spans: _Optional[_Iterable[_Union[TextSpan, _Mapping]]] = ..., lexicon: _Optional[_Mapping[str, str]] = ..., normalization: _Optional[_Union[NormalizationOptions, _Mapping]] = ...) -> None: ...

class NormalizeResponse(_message.Message):
    __slots__ = ("normalized_text", "pinyin", "ids", "voice")
    NORMALIZED_TEXT_FIELD_NUMBER: _ClassVar[int]
    PINYIN_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    normalized_text: str
    pinyin: _containers.RepeatedScalarFieldContainer[str]
    ids: _containers.RepeatedScalarFieldContainer[int]
    voice: str
    def __init__(self, normalized_text: _Optional[str] = ..., pinyin: _Optional[_Iterable[str]] = ..., ids: _Optional[_Iterable[int]] = ..., voice: _Optional[str] = ...) -> None: ...

class WarmCacheLine(_message.Message):
    __slots__ = ("line_number", "line")
    LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    line_number: int
    line: str
    def __init__(self, line_number: _Optional[int] = ..., line: _Optional[str] = ...) -> None: ...

class WarmLineResult(_message.Message):
    __slots__ = ("line_number", "outcome", "message", "audio_ms")
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OUTCOME_UNSPECIFIED: _ClassVar[WarmLineResult.Outcome]
        WARMED: _ClassVar[WarmLineResult.Outcome]
        FAILED: _ClassVar[WarmLineResult.Outcome]
        TIMED_OUT: _ClassVar[WarmLineResult.Outcome]
    OUTCOME_UNSPECIFIED: WarmLineResult.Outcome
    WARMED: WarmLineResult.Outcome
    FAILED: WarmLineResult.Outcome
    TIMED_OUT: WarmLineResult.Outcome
    LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    line_number: int
    outcome: WarmLineResult.Outcome
    message: str
    audio_ms: int
    def __init__(self, line_number: _Optional[int] = ..., outcome: _Optional[_Union[WarmLineResult.Outcome, str]] = ..., message: _Optional[str] = ..., audio_ms: _Optional[int] = ...) -> None: ...

class WarmCacheReport(_message.Message):
    __slots__ = ("warmed", "failed", "timed_out", "lines", "elapsed_ms", "stats")
    WARMED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    warmed: int
    failed: int
    timed_out: int
    lines: _containers.RepeatedCompositeFieldContainer[WarmLineResult]
    elapsed_ms: int
    stats: CacheStats
    def __init__(self, warmed: _Optional[int] = ..., failed: _Optional[int] = ..., timed_out: _Optional[int] = ..., lines: _Optional[_Iterable[_Union[WarmLineResult, _Mapping]]] = ..., elapsed_ms: _Optional[int] = ..., stats: _Optional[_Union[CacheStats, _Mapping]] = ...) -> None: ...

class CacheStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CacheStats(_message.Message):
    __slots__ = ("enabled", "max_bytes", "bytes", "entries", "hits", "misses", "coalesced", "admitted", "rejected_first_sighting", "rejected_too_large", "evictions", "evicted_bytes", "hit_ratio")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    COALESCED_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIRST_SIGHTING_FIELD_NUMBER: _ClassVar[int]
    REJECTED_TOO_LARGE_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    EVICTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    HIT_RATIO_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    max_bytes: int
    bytes: int
    entries: int
    hits: int
    misses: int
    coalesced: int
    admitted: int
    rejected_first_sighting: int
    rejected_too_large: int
    evictions: int
    evicted_bytes: int
    hit_ratio: float
    def __init__(self, enabled: _Optional[bool] = ..., max_bytes: _Optional[int] = ..., bytes: _Optional[int] = ..., entries: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., coalesced: _Optional[int] = ..., admitted: _Optional[int] = ..., rejected_first_sighting: _Optional[int] = ..., rejected_too_large: _Optional[int] = ..., evictions: _Optional[int] = ..., evicted_bytes: _Optional[int] = ..., hit_ratio: _Optional[float] = ...) -> None: ...
