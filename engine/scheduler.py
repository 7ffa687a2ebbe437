"""Streaming-aware scheduler: each iteration picks the encode, decode and vocode batches from the pool.

Policy (also in docs/engine.md):

* **The call's playback clock.** A request that follows another (SynthesisOptions.follows: the previous segment
  of its call) starts playing where that one's audio ends, plus the SSML gap between them (`play_start_s`); a
  chain head starts its clock with its first chunk. Every rule below reads this clock.
* **Urgency.** A fresh request (a chain head with no audio yet) is urgent; any other streaming request is urgent
  when its queued audio, `play start + audio delivered − audio the consumer still holds before its playback queue
  (a resampler's delay, a partial frame) − now − deadline margin`, is below its next chunk plus
  `urgency_margin_ms` (the consumer needs each sample `deadline_margin_ms` before its play time: the edge's
  pacer). Non-streaming requests are never urgent.
* **Lead window.** A streaming row whose decided mel is `max_lead_ms` ahead of playback skips the decoder.
* **Encode.** Admitted requests are encoded oldest first, at most `max_encode_per_iteration` per iteration,
  so a burst of newcomers cannot stall the decoder step of running streams for long; chain heads before
  followers (a segment submitted ahead has its call's audio queued before it), never both in one batch.
* **Decode.** Every decoding request takes one batched decoder call per iteration. Its number of steps keeps
  the mel ahead of playback: ceil(`decode_pace` · time since the previous call / audio per step), twice
  that while a chain head is young (fewer than RAMP_CHUNKS chunks sent) or new, at least
  `decode_steps_per_iteration`, at most `max_decode_steps_per_iteration` (an iteration that vocoded takes
  tens of ms; one step after it would let every stream fall behind). While a fresh request (its caller waits
  for the first audio) still needs decoder steps before its first chunk, the call takes as many of them as that
  cap allows: a lone call's first chunk comes in a few calls, not one or two steps per iteration. If there are
  more than `max_decode_batch`, urgent ones go first, then the ones with the least buffered audio; the rest wait
  one iteration.
* **Decoder rhythm.** With `decode_interval_ms` > 0 a voice's decoder call waits until that long after its
  previous one, unless a row is fresh, a newcomer is encoded, or a row's decided mel is less than three intervals
  ahead of its playback; every row below its lead bound then decodes in that call (more rows share each step).
* **Chunks.** A request has a *ready chunk* when enough mel is decided (and the postnet has its context past
  it): the streaming vocoder takes each frame once and returns its audio `vocoder_lookahead_frames` later, so
  the first call takes `first_chunk_frames` plus that delay, later ones the largest of `chunk_frames`·2^k (up
  to `max_chunk_frames`: 24, 48, 96 by default) that is covered, the last one the rest of the utterance and
  the flush. A *starving* stream (buffer below `starving_buffer_ms`) does not wait for a full chunk: it takes
  the largest short size (multiples of `window_bucket_frames` from `min_chunk_frames`: 8, 16) that is covered,
  since the streaming vocoder recomputes nothing and a short chunk costs only its call (a full-size second
  chunk behind a short first one can arrive after the pacer has filled silence).
  Few sizes mean few vocoder shapes (engine/threads.py).
* **Vocode.** Urgent ready chunks are vocoded at once (no audio yet first, then least buffered). A chunk
  that is not urgent goes early only if it is *efficient* (full size or the utterance's last: the
  vocoder's context frames cost least per frame of audio); such chunks ride along with urgent ones, or
  go when `min_vocode_batch` are ready, when one waited `max_vocode_wait_ms`, or when the decoder is idle.
  A smaller non-urgent chunk waits until it is urgent (by then more mel is decided and it is bigger) or
  the decoder is idle. One iteration vocodes at most `max_vocode_frames_per_iteration` frames (the most
  urgent chunk always goes), so the decoder of every stream waits for at most one bounded vocoder call.
* **Staggered starts.** While `max_ramping_streams` chain heads have sent fewer than RAMP_CHUNKS chunks, further
  fresh first chunks wait: a burst of new calls starts a few at a time, each with enough lead to stay on time,
  instead of all at once and all late (young streams' buffers are thin, so they make each other late even when
  no older call is at risk); followers are never held. A held
  first chunk grows with the mel decoded meanwhile; no start is held past MAX_START_HOLD_S after its submission.
* **Back-pressure.** A request whose stream holds more than `max_unread_audio_ms` of unread audio is not
  scheduled (it keeps its slot); after `stalled_consumer_timeout_ms` paused it fails with ConsumerStalled.
* **Sleep.** When nothing is runnable the scheduler returns the earliest time something can change
  (a wait bound expiring, a paused stream to re-check); the loop sleeps until then or the next submission.

Counts of urgent requests, deferred chunks and skipped decode rows go to telemetry every iteration.

Planning (`plan`, `pick_chunks`) reads the pool and changes nothing: a plan carries what it wants remembered (when
a stream was paused, when a non-urgent chunk became ready, when each voice's decoder call was planned) and
`commit` writes it when the engine core carries the plan out; planning twice on the same state gives the same plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from engine.config import EngineConfig
from engine.pool import RequestPool
from engine.request import Request, Status
from models.time_scale_frames import output_frames, ready_output_frames

PAUSED_RECHECK_S = 0.02  # how often a paused (unread-audio) or held stream is re-checked while nothing else runs
MAX_START_HOLD_S = 2.0  # a staggered start waits at most this long after submission, whatever else ramps
RAMP_CHUNKS = 3  # a stream that sent fewer chunks is young: thin buffer, decoder at twice decode_pace, starts staggered


@dataclass(frozen=True)
class VoiceTiming:
    """What the scheduler needs to know about a voice: frame geometry and the look-ahead for exact chunks."""

    sample_rate_hz: int
    hop_samples: int
    reduction_factor: int
    vocoder_lookahead_frames: int  # the streaming vocoder's delay: audio of the frames fed comes out this much later
    postnet_lookahead_frames: int  # the postnet's context: mel_before frames needed past the frames vocoded
    vocoder_first_frames: int = 1  # fewest frames a stream's first vocoder call takes (its start padding needs them)

    @property
    def frame_s(self) -> float:
        """Seconds of audio per mel frame."""
        return self.hop_samples / float(self.sample_rate_hz)


@dataclass(frozen=True)
class ChunkJob:
    """Vocode frames [start_frame, end_frame) of one request; `last` when it ends the utterance.

    Vocoder frames: the time-scaled mel (decoder frames / speaking rate, the same frames at rate 1), so chunk sizes,
    the vocoder's delay and its first / last call rules all count frames of audio at any rate."""

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
    """The encode/decode part of one iteration, grouped by voice (module-wise batches are per voice).

    Planning changes nothing: what the plan wants remembered (when a stream was paused, when each voice's
    decoder call was planned) is in `paused_since` and `planned_at_s`, written by `Scheduler.commit` when the core
    carries the plan out.
    """

    encode: dict[str, list[Request]] = field(default_factory=dict)
    decode: dict[str, list[Request]] = field(default_factory=dict)
    decode_steps: dict[str, int] = field(default_factory=dict)  # steps of this iteration's decoder call, per voice
    # requests encoded this iteration that take their first decoder step in it too (room left under the batch cap)
    newcomers: dict[str, list[Request]] = field(default_factory=dict)
    stalled: list[Request] = field(default_factory=list)
    urgent: int = 0
    skipped_decode: int = 0
    lead_full: int = 0  # decoding rows that waited: their mel is max_lead_ms ahead of playback
    paused: int = 0
    wake_at_s: float | None = None
    paused_since: list[tuple[Request, float | None]] = field(default_factory=list)  # new Request.paused_since_s
    planned_at_s: float | None = None

    @property
    def empty(self) -> bool:
        """Neither encoder nor decoder has work, and nobody is to be dropped."""
        return not (self.encode or self.decode or self.stalled)

    def decode_rows(self, voice: str) -> list[Request]:
        """The rows of the voice's decoder call, by slot: the planned ones and the newcomers whose encode succeeded
        (call after the encode results were applied: a failed one has ended)."""
        fresh = [r for r in self.newcomers.get(voice, ()) if r.status is Status.DECODING]
        return sorted([*self.decode.get(voice, ()), *fresh], key=lambda r: r.slot)


@dataclass
class ChunkPlan:
    """The vocode part of one iteration (picked after the decoder ran, so fresh chunks go out at once).

    `held`: first chunks ready but waiting (staggered starts). `ready_since`: new Request.ready_since_s values
    (when a non-urgent chunk became vocodable, for the wait bound), written by `Scheduler.commit`.
    """

    vocode: dict[str, list[ChunkJob]] = field(default_factory=dict)
    deferred_chunks: int = 0
    wake_at_s: float | None = None
    held: list[ChunkJob] = field(default_factory=list)
    ready_since: list[tuple[Request, float | None]] = field(default_factory=list)

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
        skipped_samples: Callable[[Request], int] = lambda request: 0,
        held_samples: Callable[[Request], int] = lambda request: 0,
    ) -> None:
        self.config = config
        self.timings = timings
        self._unread_ms = unread_ms
        self._skipped_samples = skipped_samples
        self._held_samples = held_samples
        self._last_decode_s: dict[str, float] = {}  # when each voice's previous decoder call was planned

    def commit(self, plan: Plan | ChunkPlan) -> None:
        """Write down what a plan being carried out wants remembered (the core calls this, once per plan)."""
        if isinstance(plan, Plan):
            for request, since in plan.paused_since:
                request.paused_since_s = since
            if plan.planned_at_s is not None:
                for voice in plan.decode_steps:
                    self._last_decode_s[voice] = plan.planned_at_s
        else:
            for request, since in plan.ready_since:
                request.ready_since_s = since

    def decode_steps(self, voice: str, now: float, ramping: bool = False, speaking_rate: float = 1.0) -> int:
        """Decoder steps for this iteration's call: enough to keep pace with playback since the previous call.

        A step yields r frames (r·frame_s of audio). After an iteration that also vocoded (tens of ms), one
        step would fall behind real time for every stream, so the decoder catches up with
        ceil(decode_pace · elapsed / step duration) steps, between decode_steps_per_iteration and
        max_decode_steps_per_iteration: at decode_pace 2 a stream's mel runs ahead of its playback, so its
        next chunks are ready before its buffer drains and later chunks grow to full size. `rate`: the fastest
        speaking rate in the call; a step of a stream at rate ρ plays r·frame_s/ρ, so faster streams need more steps.
        """
        cfg = self.config
        vt = self.timings[voice]
        last = self._last_decode_s.get(voice)  # written by commit(), not here: planning twice plans the same
        if last is None:
            return cfg.decode_steps_per_iteration
        step_s = vt.frame_s * vt.reduction_factor / speaking_rate
        pace = cfg.decode_pace * (2.0 if ramping else 1.0)
        wanted = math.ceil(pace * (now - last) / step_s - 1e-9)
        return max(cfg.decode_steps_per_iteration, min(cfg.max_decode_steps_per_iteration, wanted))

    # --- per-request predicates

    def play_start_s(self, request: Request, now: float) -> float | None:
        """When the request's first sample plays, on the engine clock, as far as known now (a lower bound).

        A chain head (it follows no other request) starts playing with its first chunk: None before that. A
        request that follows another plays after that one's last sample plus the gap between them: while the other
        still runs, its audio is counted as far as it is decided (the final length is not known before the
        decoder stops) and its own start, if unknown, as `now`.
        """
        if request.after_end_s is not None:
            return request.after_end_s + request.spec.options.gap_ms / 1000.0
        before = request.after
        if before is None:
            return request.timings.first_audio_s
        start = self.play_start_s(before, now)
        return (now if start is None else start) + self.audio_bound_s(before) + request.spec.options.gap_ms / 1000.0

    def played_s(self, request: Request) -> float:
        """Seconds of the request's delivered audio that will play: what it emitted, less the leading samples its
        consumer dropped (model silence before a turn's first speech)."""
        played = request.samples_emitted - self._skipped_samples(request)
        return max(0, played) / float(self.timings[request.voice].sample_rate_hz)

    def audio_bound_s(self, request: Request) -> float:
        """Seconds of audio the request will play in all, as far as known (exact once it ended)."""
        vt = self.timings[request.voice]
        if request.status is Status.DONE:
            return self.played_s(request)
        frames = request.end_frame if request.end_frame is not None else request.frames_decided
        skipped_s = self._skipped_samples(request) / float(vt.sample_rate_hz)
        return max(self.played_s(request),
                   output_frames(frames, request.spec.speaking_rate) * vt.frame_s - skipped_s)

    def play_end_s(self, request: Request) -> float | None:
        """When an ending request's last delivered sample plays (None when it never delivered audio)."""
        if not request.samples_emitted:
            return None
        start = self.play_start_s(request, request.timings.first_audio_s or 0.0)
        if start is None:
            return None
        return start + self.played_s(request)

    def queued_end_s(self, request: Request) -> float:
        """Seconds of the request's delivered audio in the consumer's playback queue: what will play, less what
        the consumer still holds before that queue (its resampler's delay, a partial frame)."""
        held_s = self._held_samples(request) / float(self.timings[request.voice].sample_rate_hz)
        return self.played_s(request) - held_s

    def buffer_s(self, request: Request, now: float) -> float:
        """Audio queued ahead of the consumer's playback: where the request's queued audio ends on the call's
        playback clock minus now, less the consumer's deadline margin (0 for a chain head before its first chunk)."""
        start = self.play_start_s(request, now)
        if start is None:
            return 0.0
        return start + self.queued_end_s(request) - now - request.spec.options.deadline_margin_ms / 1000.0

    def decoded_lead_s(self, request: Request, now: float) -> float | None:
        """How far the request's decided mel runs ahead of playback (None for a chain head before its first chunk)."""
        start = self.play_start_s(request, now)
        if start is None:
            return None
        vt = self.timings[request.voice]
        skipped_s = self._skipped_samples(request) / float(vt.sample_rate_hz)
        return start + output_frames(request.frames_decided, request.spec.speaking_rate) * vt.frame_s - skipped_s - now

    def is_fresh(self, request: Request) -> bool:
        """A chain head that has sent no audio yet: nothing of its call is queued, the caller waits for it."""
        return not request.follows_audio and not request.emitted_any

    def _threshold_s(self, request: Request) -> float:
        vt = self.timings[request.voice]
        frames = request.chunk_frames if request.emitted_any else request.first_chunk_frames
        return frames * vt.frame_s + self.config.urgency_margin_ms / 1000.0

    def is_urgent(self, request: Request, now: float) -> bool:
        """Urgent: a fresh start, or queued audio < next chunk + margin (streaming requests only)."""
        if not request.spec.options.streaming:
            return False
        if self.is_fresh(request):
            return True
        return self.buffer_s(request, now) < self._threshold_s(request)

    def urgent_at(self, request: Request, now: float) -> float | None:
        """The time at which a request with a playback clock becomes urgent (as far as known now)."""
        if not request.spec.options.streaming:
            return None
        start = self.play_start_s(request, now)
        if start is None:
            return None
        return (start + self.queued_end_s(request) - request.spec.options.deadline_margin_ms / 1000.0
                - self._threshold_s(request))

    def is_young(self, request: Request) -> bool:
        """A chain head that sent fewer than RAMP_CHUNKS chunks: its call's queue is thin (decoder at twice the
        pace, starts staggered). A request that follows another has that one's audio queued ahead of it."""
        return (request.spec.options.streaming and not request.follows_audio
                and request.timings.chunks < RAMP_CHUNKS)

    def chunk_sizes(self, request: Request) -> tuple[int, ...]:
        """Sizes a later chunk of this running stream may take (EngineConfig.chunk_sizes)."""
        return self.config.chunk_sizes(request.chunk_frames)

    def first_frames(self, request: Request, audio_frames: int) -> int:
        """Frames the first vocoder call must take for `audio_frames` of audio to come out of it."""
        vt = self.timings[request.voice]
        return max(audio_frames + vt.vocoder_lookahead_frames, vt.vocoder_first_frames)

    def starving(self, request: Request, now: float) -> bool:
        """A running stream whose buffer is below starving_buffer_ms: its next chunk may be short."""
        return (request.spec.options.streaming and request.emitted_any
                and self.buffer_s(request, now) < self.config.starving_buffer_ms / 1000.0)

    def ready_chunk(self, request: Request, now: float | None = None) -> ChunkJob | None:
        """The frames this request could feed the vocoder now, or None (not enough decided mel yet).

        Frames go to the streaming vocoder once decided (the trailing trim cannot remove them) and the postnet
        has its context past them; the vocoder returns their audio `vocoder_lookahead_frames` later. The first
        call takes first_chunk_frames plus that delay (more when the start was held back and the decoder ran
        ahead: a chunk_sizes() size plus the delay); later calls the largest chunk_sizes() size covered, or, while
        the stream is starving at `now`, the largest short_chunk_sizes() size covered. Once the decoder stopped:
        up to max_chunk_frames at a time, the last call taking the rest and flushing.
        """
        if request.status not in (Status.DECODING, Status.DRAINING):
            return None
        vt = self.timings[request.voice]
        start = request.frames_emitted
        firsts = tuple(self.first_frames(request, n) for n in (request.first_chunk_frames, *self.chunk_sizes(request)))
        target = firsts[0] if start == 0 else request.chunk_frames
        if request.end_frame is not None:
            end = output_frames(request.end_frame, request.spec.speaking_rate)
            remaining = end - start
            if remaining <= 0:  # all frames fed: a last, empty call flushes the vocoder's held-back audio
                return ChunkJob(request, start, start, last=True)
            half = request.chunk_frames // 2
            if start == 0 and remaining > target + half:
                n = target
            elif remaining <= self.config.max_chunk_frames:
                n = remaining  # the whole rest
            else:
                n = self.config.max_chunk_frames
            return ChunkJob(request, start, start + n, last=start + n >= end)
        limit = min(request.frames_decided, request.frames_decoded - vt.postnet_lookahead_frames)
        available = ready_output_frames(limit, request.spec.speaking_rate) - start
        if available < target:
            if not start or now is None or not self.starving(request, now):
                return None
            short = [n for n in self.config.short_chunk_sizes(request.chunk_frames) if n <= available]
            return ChunkJob(request, start, start + short[-1], last=False) if short else None
        sizes = self.chunk_sizes(request) if start else firsts
        n = max(size for size in sizes if size <= available)  # a first chunk held back (staggered start) grows too
        return ChunkJob(request, start, start + n, last=False)

    def efficient(self, job: ChunkJob) -> bool:
        """A chunk worth vocoding before it is needed: full size (max_chunk_frames) or the utterance's last."""
        return job.last or job.num_frames >= self.config.max_chunk_frames

    # --- the plan

    def _runnable(self, pool: RequestPool, now: float, plan: Plan | None) -> list[Request]:
        """Active requests that may be scheduled (not cancelled, not paused by back-pressure).

        With a plan: paused streams are counted, stalled ones listed, and changes of paused_since_s recorded.
        """
        cfg = self.config
        out: list[Request] = []
        for request in pool.active():
            if request.cancelled or request.status is Status.DONE:
                continue
            if self._unread_ms(request) >= cfg.max_unread_audio_ms:
                if plan is not None:
                    since = request.paused_since_s
                    if since is None:
                        since = now
                        plan.paused_since.append((request, now))
                    if (now - since) * 1000.0 >= cfg.stalled_consumer_timeout_ms:
                        plan.stalled.append(request)
                    else:
                        plan.paused += 1
                continue
            if plan is not None and request.paused_since_s is not None:
                plan.paused_since.append((request, None))
            out.append(request)
        return out

    def plan(self, pool: RequestPool, now: float) -> Plan:
        """Pick this iteration's encode and decode batches (policy in the module docstring)."""
        cfg = self.config
        plan = Plan(planned_at_s=now)
        runnable = self._runnable(pool, now, plan)
        if plan.paused:
            plan.wake_at_s = now + PAUSED_RECHECK_S
        urgent = {id(r) for r in runnable if self.is_urgent(r, now)}
        plan.urgent = len(urgent)

        # chain heads first (their callers wait), then followers (their audio plays after queued audio), never
        # both in one batch: a burst of new calls is not slowed by the rest of each turn, and a short first clause
        # is not padded to a long follower's length
        encodable = sorted((r for r in runnable if r.status is Status.ENCODING),
                           key=lambda r: (r.follows_audio, r.timings.submitted_s))
        if encodable and not encodable[0].follows_audio:
            encodable = [r for r in encodable if not r.follows_audio]
        for request in encodable[: cfg.max_encode_per_iteration]:
            plan.encode.setdefault(request.voice, []).append(request)

        decodable = [r for r in runnable if r.status is Status.DECODING]
        lead_cap_s = cfg.max_lead_ms / 1000.0
        leads = {id(r): self.decoded_lead_s(r, now) for r in decodable}  # once: the lead bound and the rhythm read it
        ahead = [r for r in decodable if self._lead_full(r, leads[id(r)], lead_cap_s)]
        if ahead:  # far enough ahead of playback: wait (bounds the work a barge-in throws away)
            decodable = [r for r in decodable if not self._lead_full(r, leads[id(r)], lead_cap_s)]
            plan.lead_full = len(ahead)
            recheck = now + PAUSED_RECHECK_S  # playback moves on: re-check even if nothing else wakes the loop
            plan.wake_at_s = recheck if plan.wake_at_s is None else min(plan.wake_at_s, recheck)
        if len(decodable) > cfg.decode_batch_cap:  # earliest deadline first
            decodable.sort(key=lambda r: (id(r) not in urgent, self.buffer_s(r, now)))
            plan.skipped_decode = len(decodable) - cfg.decode_batch_cap
            decodable = decodable[: cfg.decode_batch_cap]
        for request in sorted(decodable, key=lambda r: r.slot):
            plan.decode.setdefault(request.voice, []).append(request)
        if cfg.decode_interval_ms > 0:
            self._hold_decoder(plan, now, leads)
        room = cfg.decode_batch_cap - len(decodable)
        for voice, requests in plan.encode.items():  # newcomers take their first decoder step this iteration
            plan.newcomers[voice] = requests[: max(0, room)]
            room -= len(plan.newcomers[voice])
        for voice in {*plan.decode, *plan.encode}:
            ramping = any(self.is_young(r) for r in (*plan.encode.get(voice, ()), *plan.decode.get(voice, ())))
            fastest = max((r.spec.speaking_rate for r in plan.decode.get(voice, ())), default=1.0)
            steps = self.decode_steps(voice, now, ramping, fastest)
            # a caller waits for a fresh row's first chunk: its steps in as few calls as the cap allows, and not past
            # the nearest one (a row decoded past its first chunk's frames vocodes a larger, later first chunk)
            rows = (*plan.decode.get(voice, ()), *plan.newcomers.get(voice, ()))
            first = min((n for n in (self.steps_to_first_chunk(r) for r in rows if self.is_fresh(r)) if n > 0),
                        default=0)
            plan.decode_steps[voice] = max(steps, min(cfg.max_decode_steps_per_iteration, first))
        return plan

    def _hold_decoder(self, plan: Plan, now: float, leads: dict[int, float | None]) -> None:
        """The decoder rhythm (decode_interval_ms > 0): a voice's decoder call waits until the interval passed since
        its previous one, unless a row is fresh or its decided mel is less than three intervals ahead of playback;
        then every row below its lead bound decodes in that call, steps for the time since the previous one."""
        interval_s = self.config.decode_interval_ms / 1000.0
        for voice, rows in list(plan.decode.items()):
            last = self._last_decode_s.get(voice)
            if last is None or now - last >= interval_s or plan.encode.get(voice):
                continue
            if any((lead := leads[id(r)]) is None or lead < 3 * interval_s for r in rows):
                continue  # a fresh row, or one short of mel
            del plan.decode[voice]
            plan.wake_at_s = last + interval_s if plan.wake_at_s is None else min(plan.wake_at_s, last + interval_s)

    def steps_to_first_chunk(self, request: Request) -> int:
        """Decoder steps a streaming request still needs before its first chunk can be vocoded (0 once it can, or
        when it is not streaming): the first call's frames at its speaking rate, plus the postnet's context."""
        if not request.spec.options.streaming:
            return 0
        vt = self.timings[request.voice]
        out = self.first_frames(request, request.first_chunk_frames)
        need = math.ceil(out * request.spec.speaking_rate) + 1 + vt.postnet_lookahead_frames
        return max(0, -(-(need - request.frames_decoded) // vt.reduction_factor))

    @staticmethod
    def _lead_full(request: Request, lead_s: float | None, cap_s: float) -> bool:
        """A streaming request whose decided mel (`lead_s` ahead of its call's playback) is `cap_s` or more ahead."""
        return request.spec.options.streaming and lead_s is not None and lead_s >= cap_s

    def pick_chunks(self, pool: RequestPool, now: float, decoder_busy: bool) -> ChunkPlan:
        """Pick the chunks to vocode now: urgent ones always; others only when efficient, and then lazily.

        `decoder_busy`: some request is still decoding, so more chunks will become ready soon (waiting pays).
        """
        cfg = self.config
        out = ChunkPlan()
        urgent_jobs: list[ChunkJob] = []
        efficient_jobs: list[ChunkJob] = []  # not urgent, full-size or last: cheap per frame, fine to do early
        filler_jobs: list[ChunkJob] = []  # not urgent, smaller: only when the decoder is idle (nothing else to do)
        wake: list[float] = []
        ready_since: dict[int, float | None] = {}  # id(request) → when its efficient chunk became ready
        runnable = self._runnable(pool, now, None)
        for request in runnable:
            job = self.ready_chunk(request, now)
            since: float | None = None
            if job is not None and self.is_urgent(request, now):
                urgent_jobs.append(job)
                since = request.ready_since_s
            elif job is not None:
                at = self.urgent_at(request, now)
                if at is not None:
                    wake.append(at)
                if self.efficient(job) or not request.spec.options.streaming:
                    since = now if request.ready_since_s is None else request.ready_since_s
                    efficient_jobs.append(job)
                else:
                    filler_jobs.append(job)
            ready_since[id(request)] = since
            if since != request.ready_since_s:
                out.ready_since.append((request, since))
        if not (urgent_jobs or efficient_jobs or (filler_jobs and not decoder_busy)):
            out.wake_at_s = min(wake) if wake else None
            return out
        urgent_jobs.sort(key=lambda j: (not self.is_fresh(j.request), self.buffer_s(j.request, now),
                                        j.request.timings.submitted_s))
        firsts = [j for j in urgent_jobs if self.is_fresh(j.request)]
        # stagger starts past max_ramping_streams young streams: a young stream's buffer is thin, so starting more
        # at once makes the young ones late, not only the running calls
        if cfg.max_ramping_streams and firsts:
            ramping = sum(1 for r in pool.active() if r.emitted_any and self.is_young(r) and r.end_frame is None)
            room = max(0, cfg.max_ramping_streams - ramping)
            held = {id(j) for j in firsts[room:] if now - j.request.timings.submitted_s < MAX_START_HOLD_S}
            if held:
                out.held = [j for j in firsts if id(j) in held]
                out.deferred_chunks += len(held)
                urgent_jobs = [j for j in urgent_jobs if id(j) not in held]
                wake.append(now + PAUSED_RECHECK_S)  # re-check even if nothing else wakes the loop
        efficient_jobs.sort(key=lambda j: self.buffer_s(j.request, now))
        filler_jobs.sort(key=lambda j: self.buffer_s(j.request, now))
        max_wait_s = cfg.max_vocode_wait_ms / 1000.0
        oldest = min((ready_since[id(j.request)] or now) for j in efficient_jobs) if efficient_jobs else now
        take_efficient = (
            bool(urgent_jobs)  # piggyback on a batch that runs anyway
            or not decoder_busy  # nothing else will become ready: waiting gains nothing
            or len(efficient_jobs) >= cfg.min_vocode_batch
            or now - oldest >= max_wait_s
        )
        chosen = urgent_jobs + (efficient_jobs if take_efficient else [])
        if not take_efficient:
            out.deferred_chunks += len(efficient_jobs)
            if efficient_jobs:
                wake.append(oldest + max_wait_s)
        if not decoder_busy:  # idle otherwise: everything ready goes
            chosen += filler_jobs
        budget = cfg.max_vocode_frames_per_iteration  # bounds the iteration, so the decoder keeps its pace
        for job in chosen:
            jobs = out.vocode.setdefault(job.request.voice, [])
            if len(jobs) < cfg.max_vocode_batch and (budget >= job.num_frames or not any(out.vocode.values())):
                jobs.append(job)
                budget -= job.num_frames
            else:
                out.deferred_chunks += 1
        out.vocode = {voice: jobs for voice, jobs in out.vocode.items() if jobs}
        out.wake_at_s = min(wake) if wake else None
        return out
