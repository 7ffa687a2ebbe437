"""Request types: the immutable input, the per-request engine state, and the events a stream delivers."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.errors import InvalidRequest
from models.time_scale_frames import RATE_RANGE


def now_s() -> float:
    """The engine's clock (monotonic seconds, `time.perf_counter`): every timestamp below uses it."""
    return time.perf_counter()


MAX_DEADLINE_MARGIN_MS = 1000.0  # SynthesisOptions.deadline_margin_ms above this is refused (the edge's lead is <= 500)


@dataclass(frozen=True)
class SynthesisOptions:
    """Per-request knobs; None means the engine's configured value."""

    first_chunk_frames: int | None = None  # mel frames in the first audio chunk
    chunk_frames: int | None = None  # mel frames in later chunks
    streaming: bool = True  # False: never urgent (batch/prompt synthesis may wait for bigger batches)
    # The consumer needs each sample this long before its play time (the edge's pacer keeps a gateway-side lead
    # and sends silence when a frame is not queued by then): the scheduler counts the buffered audio this much lower.
    deadline_margin_ms: float = 0.0
    # The request whose audio this one's consumer plays right before it (the previous segment of the same call),
    # and the silence played between them (SSML breaks): the scheduler then counts this request's deadlines on
    # that call's playback clock instead of restarting it at this request's first chunk. "" = none (a fresh start).
    follows: str = ""
    gap_ms: float = 0.0


@dataclass(frozen=True)
class SynthesisRequest:
    """One segment of one call: symbol ids for one voice. `voice=""` means the engine's first voice.

    `speaking_rate` (0.5–2.0, 1.0 = the voice's natural pace, 2.0 = twice as fast) time-scales the mel before the
    vocoder (models/mel_time_scale.py): pitch stays, the audio is about 1/rate as long; InvalidRequest outside.
    """

    request_id: str
    ids: tuple[int, ...]
    voice: str = ""
    seed: int = 0
    options: SynthesisOptions = field(default_factory=SynthesisOptions)
    speaking_rate: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(int(i) for i in self.ids))
        lo, hi = RATE_RANGE
        speaking_rate = self.speaking_rate
        if not isinstance(speaking_rate, (int, float)) or not lo <= speaking_rate <= hi:  # NaN fails too
            raise InvalidRequest(f"speaking_rate {speaking_rate!r} is out of range; use {lo:g} to {hi:g} (1.0 = natural rate)",
                                 request_id=self.request_id)
        object.__setattr__(self, "speaking_rate", float(speaking_rate))


class FinishReason(str, enum.Enum):
    """Why a stream ended."""

    COMPLETED = "completed"  # all audio delivered
    CANCELLED = "cancelled"  # cancel(request_id) or the stream was closed
    ERROR = "error"  # see Finished.error


@dataclass
class RequestTimings:
    """Timestamps on the engine clock (`now_s`, seconds) plus counts; None until the event happens."""

    submitted_s: float
    admitted_s: float | None = None  # got a slot
    encoded_s: float | None = None  # encoder done, decoding starts
    first_audio_s: float | None = None  # first chunk published
    finished_s: float | None = None
    audio_samples: int = 0
    chunks: int = 0
    decoder_steps: int = 0

    @property
    def ttfa_ms(self) -> float | None:
        """Submit → first audio published, in ms."""
        if self.first_audio_s is None:
            return None
        return (self.first_audio_s - self.submitted_s) * 1000.0

    @property
    def queue_ms(self) -> float | None:
        """Submit → slot, in ms."""
        if self.admitted_s is None:
            return None
        return (self.admitted_s - self.submitted_s) * 1000.0

    @property
    def total_ms(self) -> float | None:
        """Submit → finished, in ms."""
        if self.finished_s is None:
            return None
        return (self.finished_s - self.submitted_s) * 1000.0

    def copy(self) -> "RequestTimings":
        """A snapshot (the engine keeps writing its own copy)."""
        return RequestTimings(**self.__dict__)


@dataclass(frozen=True)
class AudioChunk:
    """Audio for a run of mel frames: float32 samples [N] at the voice's rate, starting at `start_sample`.

    `input_positions` [steps] holds, for each decoder step whose audio starts in this chunk, the attention
    peak: the index into the request's ids the decoder was reading (what part of the text was spoken).
    `step_start_samples` [steps] (int64) is where each of those steps' audio starts in the request's audio: step k
    at k·r·hop at rate 1, time-scaled with the speaking rate (models/time_scale_frames.step_start_sample); None from
    producers that do not know it (a consumer then assumes rate 1).

    `ahead_positions` [m] are the attention peaks of the decoder steps that follow this chunk's and are already
    decided (their audio will come, later: the vocoder and postnet run tens of frames behind the decoder), with
    `ahead_step_start_samples` [m] (int64, the same rule as `step_start_samples`). A consumer that must time a word
    before its first audio (service/call/words.py) can then time it before the chunk holding its end arrives.
    At most engine.step.MAX_AHEAD_STEPS; empty when nothing is decided past the chunk; None from producers that do
    not know it.
    """

    samples: np.ndarray
    start_sample: int
    input_positions: np.ndarray
    first: bool
    sample_rate_hz: int
    step_start_samples: np.ndarray | None = None
    ahead_positions: np.ndarray | None = None
    ahead_step_start_samples: np.ndarray | None = None

    @property
    def duration_s(self) -> float:
        """Length of this chunk in seconds."""
        return len(self.samples) / float(self.sample_rate_hz)


@dataclass(frozen=True)
class Finished:
    """The last event of a stream."""

    reason: FinishReason
    error: BaseException | None
    timings: RequestTimings


class Status(enum.Enum):
    """Where a request is in its life inside the engine."""

    WAITING = "waiting"  # submitted, no slot yet
    ENCODING = "encoding"  # has a slot, encoder not run yet
    DECODING = "decoding"  # decoder running; chunks vocoded as they become ready
    DRAINING = "draining"  # decoder finished; remaining chunks to vocode
    DONE = "done"


@dataclass(eq=False)
class Request:
    """Mutable engine-side state of one request (owned by the engine thread; `cancelled` is set from anywhere).

    Frame cursors (mel frames, 0-based): `frames_decoded` ≥ `frames_decided` count decoder frames;
    `frames_decided` = frames certainly part of the final utterance (up to the last frame that the trailing
    trim cannot remove); `end_frame` is set when decoding finished (the trimmed length). `frames_emitted` counts
    *vocoder* frames (the time-scaled mel the streaming vocoder was fed: decoder frames / speaking rate; equal at
    rate 1); their audio comes out the vocoder's look-ahead later, `samples_emitted` counts it.
    """

    spec: SynthesisRequest
    voice: str
    sink: Any  # engine.output.StreamSink (publish target)
    timings: RequestTimings
    first_chunk_frames: int
    chunk_frames: int
    status: Status = Status.WAITING
    slot: int = -1
    frames_decoded: int = 0
    frames_decided: int = 0
    frames_emitted: int = 0
    end_frame: int | None = None
    peaks: list[int] = field(default_factory=list)  # attention peak per decoder step
    samples_emitted: int = 0
    ready_since_s: float | None = None  # when the pending chunk became vocodable (for the wait bound)
    paused_since_s: float | None = None  # when the consumer's unread audio went over the bound
    cancelled: bool = False
    failed: BaseException | None = None
    # The playback clock (engine/scheduler.py `play_start_s`): the live request this one plays after, or, once that
    # one ended, when its audio ends playing (engine clock); both None for a chain head.
    after: "Request | None" = None
    after_end_s: float | None = None
    play_end_s: float | None = None  # set when this request ends: when its last sample plays (None: never played)

    @property
    def request_id(self) -> str:
        """The caller's id."""
        return self.spec.request_id

    @property
    def follows_audio(self) -> bool:
        """True when this request's audio plays after another's (its deadlines are on that call's clock)."""
        return self.after is not None or self.after_end_s is not None

    @property
    def emitted_any(self) -> bool:
        """True once the first chunk went out."""
        return self.frames_emitted > 0
