"""Streaming-aware scheduler: each iteration picks the encode, decode and vocode batches from the pool.

Policy (also in docs/engine.md):

* **Urgency.** A streaming request that has sent no audio yet is *urgent*. After its first chunk it is urgent
  when its client-side buffer, `audio delivered − (now − time of its first chunk)`, is below the duration of
  its next chunk plus `urgency_margin_ms` (the client is assumed to start playback at the first chunk and
  never stall, as in VoxServe's online scheduler). Non-streaming requests are never urgent.
* **Encode.** Admitted requests are encoded oldest first, at most `max_encode_per_iteration` per iteration,
  so a burst of newcomers cannot stall the decoder step of running streams for long.
* **Decode.** Every decoding request takes one batched decoder call per iteration
  (`decode_steps_per_iteration` steps). If there are more than `max_decode_batch`, urgent ones go first,
  then the ones with the least buffered audio; the rest wait one iteration.
* **Vocode.** A request has a *ready chunk* when enough mel is decided: `first_chunk_frames` (then
  `chunk_frames`) frames plus the look-ahead the postnet and vocoder need for exact audio, or the rest of the
  utterance once its decoder stopped. Ready chunks of urgent requests are always vocoded this iteration
  (earliest playback deadline first), and non-urgent ready chunks ride along in the same batch up to
  `max_vocode_batch`. When no urgent chunk is ready, non-urgent chunks wait so the batch grows, but only
  while the decoder still has work, until `min_vocode_batch` are ready, and never longer than
  `max_vocode_wait_ms`.
* **Back-pressure.** A request whose stream holds more than `max_unread_audio_ms` of unread audio is not
  scheduled (it keeps its slot); after `stalled_consumer_timeout_ms` paused it fails with ConsumerStalled.
* **Sleep.** When nothing is runnable the scheduler returns the earliest time something can change
  (a wait bound expiring, a paused stream to re-check); the loop sleeps until then or the next submission.

Counts of urgent requests, deferred chunks and skipped decode rows go to telemetry every iteration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from engine.config import EngineConfig
from engine.pool import RequestPool
from engine.request import Request, Status

PAUSED_RECHECK_S = 0.02  # how often a paused (unread-audio) stream is re-checked while nothing else runs


@dataclass(frozen=True)
class VoiceTiming:
    """What the scheduler needs to know about a voice: frame geometry and the look-ahead for exact chunks."""

    sample_rate_hz: int
    hop_samples: int
    reduction_factor: int
    vocoder_lookahead_frames: int  # R: mel frames the vocoder window needs past a chunk's end
    postnet_lookahead_frames: int  # the postnet's context: mel_before frames needed past those R frames

    @property
    def frame_s(self) -> float:
        """Seconds of audio per mel frame."""
        return self.hop_samples / float(self.sample_rate_hz)


@dataclass(frozen=True)
class ChunkJob:
    """Vocode mel frames [start_frame, end_frame) of one request; `last` when it ends the utterance."""

    request: Request
    start_frame: int
    end_frame: int
    last: bool

    @property
    def num_frames(self) -> int:
        """Frames in this chunk."""
        return self.end_frame - self.start_frame


@dataclass
class Plan:
    """The encode/decode part of one iteration, grouped by voice (module-wise batches are per voice)."""

    encode: dict[str, list[Request]] = field(default_factory=dict)
    decode: dict[str, list[Request]] = field(default_factory=dict)
    stalled: list[Request] = field(default_factory=list)
    urgent: int = 0
    skipped_decode: int = 0
    paused: int = 0
    wake_at_s: float | None = None

    @property
    def empty(self) -> bool:
        """Neither encoder nor decoder has work, and nobody is to be dropped."""
        return not (self.encode or self.decode or self.stalled)


@dataclass
class ChunkPlan:
    """The vocode part of one iteration (picked after the decoder ran, so fresh chunks go out at once)."""

    vocode: dict[str, list[ChunkJob]] = field(default_factory=dict)
    deferred_chunks: int = 0
    wake_at_s: float | None = None

    @property
    def empty(self) -> bool:
        """Nothing to vocode now."""
        return not self.vocode


class Scheduler:
    """Builds a Plan from the pool each iteration (engine thread only)."""

    def __init__(
        self,
        config: EngineConfig,
        timings: dict[str, VoiceTiming],
        unread_ms: Callable[[Request], float],
    ) -> None:
        self.config = config
        self.timings = timings
        self._unread_ms = unread_ms

    # --- per-request predicates

    def buffer_s(self, request: Request, now: float) -> float:
        """Client-side audio buffer: audio sent minus time since the first chunk (0 before any audio)."""
        first = request.timings.first_audio_s
        if first is None:
            return 0.0
        sent_s = request.samples_emitted / float(self.timings[request.voice].sample_rate_hz)
        return sent_s - (now - first)

    def is_urgent(self, request: Request, now: float) -> bool:
        """Urgent: no audio yet, or buffer < next chunk + margin (streaming requests only)."""
        if not request.spec.options.streaming:
            return False
        if not request.emitted_any:
            return True
        vt = self.timings[request.voice]
        threshold = request.chunk_frames * vt.frame_s + self.config.urgency_margin_ms / 1000.0
        return self.buffer_s(request, now) < threshold

    def urgent_at(self, request: Request) -> float | None:
        """The time at which a request that already sent audio becomes urgent."""
        first = request.timings.first_audio_s
        if first is None or not request.spec.options.streaming:
            return None
        vt = self.timings[request.voice]
        sent_s = request.samples_emitted / float(vt.sample_rate_hz)
        threshold = request.chunk_frames * vt.frame_s + self.config.urgency_margin_ms / 1000.0
        return first + sent_s - threshold

    def ready_chunk(self, request: Request) -> ChunkJob | None:
        """The chunk this request could vocode now, or None (not enough decided mel yet)."""
        if request.status not in (Status.DECODING, Status.DRAINING):
            return None
        vt = self.timings[request.voice]
        start = request.frames_emitted
        target = request.first_chunk_frames if start == 0 else request.chunk_frames
        if request.end_frame is not None:
            remaining = request.end_frame - start
            if remaining <= 0:  # all frames out: a last, empty job flushes the vocoder's held-back tail
                return ChunkJob(request, start, start, last=True)
            half = request.chunk_frames // 2
            if start == 0 and remaining > target + half:
                n = target
            elif remaining <= self.config.max_chunk_frames + half:
                n = remaining  # take the whole rest rather than leave a tail shorter than half a chunk
            else:
                n = self.config.max_chunk_frames
            end = start + n
            return ChunkJob(request, start, end, last=end >= request.end_frame)
        # exact audio needs R decided frames past the chunk and the postnet's context past those
        limit = min(
            request.frames_decided - vt.vocoder_lookahead_frames,
            request.frames_decoded - vt.vocoder_lookahead_frames - vt.postnet_lookahead_frames,
        )
        available = limit - start
        if available < target:
            return None
        n = target if start == 0 else min(available, self.config.max_chunk_frames)
        return ChunkJob(request, start, start + n, last=False)

    # --- the plan

    def _runnable(self, pool: RequestPool, now: float, plan: Plan | None) -> list[Request]:
        """Active requests that may be scheduled (not cancelled, not paused by back-pressure)."""
        cfg = self.config
        out: list[Request] = []
        for request in pool.active():
            if request.cancelled or request.status is Status.DONE:
                continue
            if self._unread_ms(request) >= cfg.max_unread_audio_ms:
                if request.paused_since_s is None:
                    request.paused_since_s = now
                if plan is not None:
                    if (now - request.paused_since_s) * 1000.0 >= cfg.stalled_consumer_timeout_ms:
                        plan.stalled.append(request)
                    else:
                        plan.paused += 1
                continue
            request.paused_since_s = None
            out.append(request)
        return out

    def plan(self, pool: RequestPool, now: float) -> Plan:
        """Pick this iteration's encode and decode batches (policy in the module docstring)."""
        cfg = self.config
        plan = Plan()
        runnable = self._runnable(pool, now, plan)
        if plan.paused:
            plan.wake_at_s = now + PAUSED_RECHECK_S
        urgent = {id(r) for r in runnable if self.is_urgent(r, now)}
        plan.urgent = len(urgent)

        encodable = sorted((r for r in runnable if r.status is Status.ENCODING), key=lambda r: r.timings.submitted_s)
        for request in encodable[: cfg.max_encode_per_iteration]:
            plan.encode.setdefault(request.voice, []).append(request)

        decodable = [r for r in runnable if r.status is Status.DECODING]
        if len(decodable) > cfg.decode_batch_cap:
            decodable.sort(key=lambda r: (id(r) not in urgent, self.buffer_s(r, now)))
            plan.skipped_decode = len(decodable) - cfg.decode_batch_cap
            decodable = decodable[: cfg.decode_batch_cap]
        for request in sorted(decodable, key=lambda r: r.slot):
            plan.decode.setdefault(request.voice, []).append(request)
        return plan

    def pick_chunks(self, pool: RequestPool, now: float, decoder_busy: bool) -> ChunkPlan:
        """Pick the chunks to vocode now: urgent ones always, the rest when the batch is worth it or waited enough.

        `decoder_busy`: some request is still decoding, so more chunks will become ready soon (waiting pays).
        """
        cfg = self.config
        out = ChunkPlan()
        ready: list[ChunkJob] = []
        urgent: set[int] = set()
        wake: list[float] = []
        for request in self._runnable(pool, now, None):
            job = self.ready_chunk(request)
            if job is None:
                request.ready_since_s = None
                continue
            if request.ready_since_s is None:
                request.ready_since_s = now
            ready.append(job)
            if self.is_urgent(request, now):
                urgent.add(id(request))
            else:
                at = self.urgent_at(request)
                if at is not None:
                    wake.append(at)
        if not ready:
            return out
        urgent_jobs = [j for j in ready if id(j.request) in urgent]
        other_jobs = [j for j in ready if id(j.request) not in urgent]
        urgent_jobs.sort(key=lambda j: (j.request.emitted_any, self.buffer_s(j.request, now), j.request.timings.submitted_s))
        other_jobs.sort(key=lambda j: self.buffer_s(j.request, now))
        max_wait_s = cfg.max_vocode_wait_ms / 1000.0
        oldest = min((j.request.ready_since_s or now) for j in other_jobs) if other_jobs else now
        take_others = (
            bool(urgent_jobs)  # piggyback on a batch that runs anyway
            or not decoder_busy  # nothing else will become ready: waiting gains nothing
            or len(other_jobs) >= cfg.min_vocode_batch
            or now - oldest >= max_wait_s
        )
        chosen = urgent_jobs + (other_jobs if take_others else [])
        if not take_others:
            out.deferred_chunks = len(other_jobs)
            wake.append(oldest + max_wait_s)
        for job in chosen:
            jobs = out.vocode.setdefault(job.request.voice, [])
            if len(jobs) < cfg.max_vocode_batch:
                jobs.append(job)
            else:
                out.deferred_chunks += 1
        out.wake_at_s = min(wake) if wake else None
        return out
