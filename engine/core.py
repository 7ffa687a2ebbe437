"""EngineCore: the one engine thread per device; each iteration admits, encodes, decodes, vocodes and publishes."""

from __future__ import annotations

import collections
import enum
import logging
import threading
from typing import Iterable, Mapping, Protocol, TypeVar

from engine.config import EngineConfig
from engine.errors import (
    ConsumerStalled,
    EngineDead,
    EngineError,
    EngineStopped,
    InvalidRequest,
    is_allocation_failure,
)
from engine.modules import ModuleRunner
from engine.pool import AdmissionGate, RequestPool
from engine.request import (
    MAX_DEADLINE_MARGIN_MS,
    AudioChunk,
    FinishReason,
    Request,
    RequestTimings,
    Status,
    SynthesisRequest,
    now_s,
)
from engine.scheduler import ChunkPlan, Plan, Scheduler
from engine.step import BatchFailed, BatchOk, End, ModuleCall, Publish, StepUpdate, execute
from engine.telemetry import EngineCounters, EngineObserver, IterationStats, ObserverFanout

logger = logging.getLogger(__name__)

#: SynthesisOptions.gap_ms above this is refused (the longest SSML break the edge sends is 10 s).
MAX_GAP_MS = 60_000.0


class StreamSink(Protocol):
    """Where the engine thread delivers a request's events (engine.output.OutputStream implements it)."""

    @property
    def unread_ms(self) -> float:
        """Audio delivered but not yet read by the consumer (ms)."""

    @property
    def skipped_samples(self) -> int:
        """Leading samples of the request the consumer dropped unplayed (they take no playback time)."""

    @property
    def held_samples(self) -> int:
        """Delivered samples the consumer holds before its playback queue (they are not playing yet)."""

    def publish_chunk(self, chunk: AudioChunk) -> None:
        """One audio chunk, in order."""

    def finish(self, reason: FinishReason, error: BaseException | None, timings: RequestTimings) -> None:
        """The last event."""


class Health(str, enum.Enum):
    """Serving state as reported to health checks."""

    SERVING = "SERVING"
    NOT_SERVING = "NOT_SERVING"


class _State(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPING = "stopping"
    STOPPED = "stopped"
    DEAD = "dead"


class _TooManyFailures(RuntimeError):
    """Consecutive failed batches passed max_consecutive_failures: the device or models are broken."""


R = TypeVar("R")


def runner_for(runners: Mapping[str, R], default_voice: str, voice: str) -> R:
    """The runner of a voice name ('' = `default_voice`); InvalidRequest naming the served voices when unknown."""
    runner = runners.get(voice or default_voice)
    if runner is None:
        raise InvalidRequest(f"unknown voice {voice!r}; this engine serves {sorted(runners)}")
    return runner


def validate_request(spec: SynthesisRequest, runner: ModuleRunner) -> None:
    """Check ids and options against a voice's limits (pure Python, any thread); raise InvalidRequest."""
    rid = spec.request_id
    if not spec.ids:
        raise InvalidRequest("empty ids", request_id=rid)
    if len(spec.ids) > runner.max_input_len:
        raise InvalidRequest(f"{len(spec.ids)} ids; this voice takes at most {runner.max_input_len}", request_id=rid)
    bad = [i for i in spec.ids if not 0 <= i < runner.n_symbols]
    if bad:
        raise InvalidRequest(f"ids out of range [0, {runner.n_symbols}): {bad[:5]}", request_id=rid)
    for name in ("first_chunk_frames", "chunk_frames"):
        value = getattr(spec.options, name)
        if value is not None and value < 1:
            raise InvalidRequest(f"options.{name}={value}: must be >= 1", request_id=rid)
    margin = spec.options.deadline_margin_ms
    if not 0.0 <= margin <= MAX_DEADLINE_MARGIN_MS:
        raise InvalidRequest(f"options.deadline_margin_ms={margin}: must be within 0-{MAX_DEADLINE_MARGIN_MS:.0f}",
                             request_id=rid)
    gap = spec.options.gap_ms
    if not 0.0 <= gap <= MAX_GAP_MS:
        raise InvalidRequest(f"options.gap_ms={gap}: must be within 0-{MAX_GAP_MS:.0f}", request_id=rid)
    if spec.options.follows == rid:
        raise InvalidRequest("options.follows names the request itself", request_id=rid)


class EngineCore:
    """The engine thread: owns the pool, the scheduler and one ModuleRunner per voice.

    Thread-safe entry points: `submit`, `cancel`, `start`, `drain`, `stop`, `health`, `counters`.
    Everything else runs on the engine thread. When nothing is runnable the thread blocks on a condition
    variable (woken by submit/cancel/stop, or at the scheduler's next deadline): it never spins.
    """

    def __init__(
        self,
        config: EngineConfig,
        runners: Mapping[str, ModuleRunner],
        observers: Iterable[EngineObserver] = (),
        name: str = "voxpool-engine",
    ) -> None:
        if not runners:
            raise ValueError("EngineCore needs at least one voice runner")
        self.config = config
        self.runners = dict(runners)
        self.default_voice = next(iter(self.runners))
        self.pool = RequestPool(config.max_slots)
        self.gate = AdmissionGate(config.max_slots + config.max_waiting)
        self.scheduler = Scheduler(
            config, {v: r.timing for v, r in self.runners.items()}, unread_ms=lambda r: r.sink.unread_ms,
            skipped_samples=lambda r: r.sink.skipped_samples,
            held_samples=lambda r: r.sink.held_samples,
        )
        self.observer = ObserverFanout(list(observers))
        self.death: BaseException | None = None
        self._counters = EngineCounters()
        self.updater = StepUpdate(self.runners, self._counters)
        self._name = name
        self._cond = threading.Condition()
        self._inbox: collections.deque[Request] = collections.deque()
        self._cancels: collections.deque[str] = collections.deque()
        self._live: dict[str, Request] = {}  # guarded by _cond: THE registry of live requests (submitted, not ended)
        # guarded by _cond: when the audio of recently ended requests ends playing (engine clock; None: it never
        # played), for a request submitted after the one it follows ended; oldest dropped first
        self._play_ends: collections.OrderedDict[str, float | None] = collections.OrderedDict()
        self._play_ends_cap = 4 * (config.max_slots + config.max_waiting)
        self._state = _State.NEW
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._consecutive_failures = 0
        self._iteration = 0
        self._warmup = True
        self.warmup_s: dict[str, float] = {}  # voice → seconds its runner's warm-up took (before readiness)
        # heartbeat: when the loop last finished a turn or went to wait, and whether it is waiting now
        self._progress_s = now_s()
        self._loop_turns = 0
        self._waiting = False

    # ------------------------------------------------------------------ thread-safe API

    def start(self, warmup: bool = True, timeout_s: float | None = None) -> None:
        """Start the engine thread (warming up each runner first); returns once it serves or died."""
        with self._cond:
            if self._state is not _State.NEW:
                raise RuntimeError(f"engine already started (state {self._state.value})")
            self._state = _State.STARTING
        self._warmup = warmup
        self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
        self._thread.start()
        self._ready.wait(timeout_s)
        if self.death is not None:
            raise EngineDead(f"engine failed to start: {self.death!r}") from self.death

    @property
    def thread(self) -> threading.Thread | None:
        """The engine thread (None before start)."""
        return self._thread

    def health(self) -> Health:
        """SERVING while the loop runs and accepts requests; NOT_SERVING when starting, draining, stopped or dead."""
        alive = self._thread is not None and self._thread.is_alive()
        return Health.SERVING if alive and self._state is _State.RUNNING else Health.NOT_SERVING

    @property
    def dead(self) -> bool:
        """True once the loop died."""
        return self._state is _State.DEAD

    def voice_runner(self, voice: str) -> ModuleRunner:
        """The runner for a voice name ('' = the default voice); InvalidRequest when unknown."""
        return runner_for(self.runners, self.default_voice, voice)

    def sample_rate_hz(self, voice: str) -> int:
        """Output sample rate of a voice ('' = default)."""
        return self.voice_runner(voice).timing.sample_rate_hz

    def submit(self, spec: SynthesisRequest, sink: StreamSink, timings: RequestTimings | None = None) -> Request:
        """Validate and queue a request; it is served from the next iteration on.

        Raises InvalidRequest (bad voice/ids/options, duplicate id), EngineOverloaded (slots and waiting
        queue full), EngineStopped (draining/stopped) or EngineDead, all at once, on the caller's thread.
        """
        runner = self.voice_runner(spec.voice)
        validate_request(spec, runner)
        cfg = self.config
        request = Request(
            spec=spec,
            voice=runner.voice,
            sink=sink,
            timings=timings or RequestTimings(submitted_s=now_s()),
            first_chunk_frames=spec.options.first_chunk_frames or cfg.first_chunk_frames,
            chunk_frames=spec.options.chunk_frames or cfg.chunk_frames,
        )
        with self._cond:
            if self._state is _State.DEAD:
                raise EngineDead(f"engine is dead: {self.death!r}", request_id=spec.request_id)
            if self._state not in (_State.RUNNING, _State.STARTING):
                raise EngineStopped(f"engine is {self._state.value}", request_id=spec.request_id)
            if spec.request_id in self._live:
                raise InvalidRequest(f"duplicate request_id {spec.request_id!r}", request_id=spec.request_id)
            self.gate.acquire(spec.request_id)
            self._link_locked(request)
            self._live[spec.request_id] = request
            self._inbox.append(request)
            self._counters.requests_submitted += 1
            self._cond.notify()
        return request

    def _link_locked(self, request: Request) -> None:
        """Put a request that follows another on that call's playback clock (under _cond). An unknown predecessor
        (never submitted here, e.g. served from the audio cache, or ended too long ago) leaves it a chain head."""
        follows = request.spec.options.follows
        if not follows:
            return
        before = self._live.get(follows)
        if before is not None:
            request.after = before
        elif follows in self._play_ends and self._play_ends[follows] is not None:
            request.after_end_s = self._play_ends[follows]

    def cancel(self, request_id: str) -> bool:
        """Ask the engine to drop a request; noticed at the next iteration boundary. False if unknown/ended."""
        with self._cond:
            request = self._live.get(request_id)
            if request is None:
                return False
            request.cancelled = True
            self._cancels.append(request_id)
            self._cond.notify()
        return True

    def drain(self, timeout_s: float | None = None) -> bool:
        """Refuse new requests, finish the live ones, stop. True if all finished within the timeout."""
        with self._cond:
            if self._state in (_State.RUNNING, _State.STARTING):
                self._state = _State.DRAINING
            self._cond.notify()
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                self.stop()
                return False
        return self.death is None

    def stop(self, timeout_s: float | None = 10.0) -> None:
        """Stop now: live requests end with EngineStopped."""
        with self._cond:
            if self._state not in (_State.DEAD, _State.STOPPED):
                self._state = _State.STOPPING
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def counters(self) -> EngineCounters:
        """Snapshot of the cumulative counters."""
        return self._counters.snapshot()

    @property
    def loop_turns(self) -> int:
        """Loop turns finished so far (busy or idle): the heartbeat a watchdog compares between readings."""
        return self._loop_turns

    def stalled_for_s(self, now: float | None = None) -> float:
        """How long the loop has owed progress (engine clock): 0 while it waits for work or has none, or is not
        serving; else the time since its last loop turn ended. Read-only, any thread."""
        if self._state not in (_State.RUNNING, _State.DRAINING) or self._waiting:
            return 0.0
        if not (self._live or self._inbox or self._cancels):
            return 0.0
        return max(0.0, (now_s() if now is None else now) - self._progress_s)

    @property
    def live_count(self) -> int:
        """Requests submitted and not yet ended."""
        return self.gate.count

    # ------------------------------------------------------------------ engine thread

    def _main(self) -> None:
        try:
            for runner in self.runners.values():
                runner.enter_thread()
            if self._warmup:
                for voice, runner in self.runners.items():
                    t0 = now_s()
                    runner.warmup()
                    self.warmup_s[voice] = now_s() - t0
                    logger.info("voice %s: warm-up (every decoder graph bucket, every vocoder width at batch 1) "
                                "took %.2f s", voice, self.warmup_s[voice])
            with self._cond:
                if self._state is _State.STARTING:
                    self._state = _State.RUNNING
            self._ready.set()
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - the loop must report any death to every stream
            self._die(exc)
        finally:
            self._ready.set()

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._take_inbox_locked()
                if self._state is _State.STOPPING:
                    break
                if self._state is _State.DRAINING and not self._live:
                    break
            worked, wake_at = self._iterate()
            self._beat()
            if worked:
                continue
            with self._cond:
                if self._inbox or self._cancels or self._state is _State.STOPPING:
                    continue
                if self._state is _State.DRAINING and not self._live:
                    continue
                timeout = None if wake_at is None else max(0.0, wake_at - now_s())
                self._waiting = True
                try:
                    self._cond.wait(timeout)
                finally:
                    self._waiting = False
                    self._beat()
        self._shutdown()

    def _beat(self) -> None:
        self._progress_s = now_s()
        self._loop_turns += 1

    def _take_inbox_locked(self) -> None:
        while self._inbox:
            request = self._inbox.popleft()
            if request.cancelled:
                self._end(request, FinishReason.CANCELLED, None)
            else:
                self.pool.enqueue(request)
        while self._cancels:  # cancel() marked the request already; the entry only woke the loop
            request = self._live.get(self._cancels.popleft())
            if request is not None:
                request.cancelled = True

    def _iterate(self) -> tuple[bool, float | None]:
        """One iteration; returns (did any work, when to wake if idle).

        Two rounds of the three verbs (engine/step.py): the scheduler plans encode and decode (newcomers' first
        decoder step included, without changing anything), `execute` runs each module call, `update` applies its
        result and returns the events this thread delivers; then the vocoder chunks are planned on the mel just
        decoded, run and applied the same way.
        """
        started = now_s()
        for request in self.pool.requests():
            if request.cancelled:
                self._end(request, FinishReason.CANCELLED, None)
        self.pool.admit()
        plan = self.scheduler.plan(self.pool, started)
        self._carry_out(plan)
        failed_before = self._counters.failed_batches
        encode_n = decode_n = vocode_n = vocode_frames = decode_steps = 0

        t0 = now_s()
        for voice, requests in plan.encode.items():
            self._step(ModuleCall("encode", voice, requests))
            encode_n += len(requests)
        t1 = now_s()
        for voice in dict.fromkeys([*plan.decode, *plan.newcomers]):
            requests = plan.decode_rows(voice)
            if requests:
                steps = plan.decode_steps.get(voice, self.config.decode_steps_per_iteration)
                self._step(ModuleCall("decode", voice, requests, steps=steps))
                decode_steps = max(decode_steps, steps)
                decode_n += len(requests)
        t2 = now_s()
        decoder_busy = any(r.status is Status.DECODING for r in self.pool.active())
        chunks = self.scheduler.pick_chunks(self.pool, t2, decoder_busy)
        self._carry_out(chunks)
        for voice, jobs in chunks.vocode.items():
            self._step(ModuleCall("vocode", voice, [j.request for j in jobs], jobs=jobs))
            vocode_n += len(jobs)
            vocode_frames += sum(j.num_frames for j in jobs)
        t3 = now_s()

        worked = bool(encode_n or decode_n or vocode_n or plan.stalled)
        if not worked:
            wakes = [w for w in (plan.wake_at_s, chunks.wake_at_s) if w is not None]
            return False, (min(wakes) if wakes else None)
        self._iteration += 1
        c = self._counters
        c.iterations += 1
        c.busy_s += t3 - started
        c.urgent_iterations += plan.urgent
        c.deferred_chunks += chunks.deferred_chunks
        c.max_decode_batch = max(c.max_decode_batch, decode_n)
        c.max_vocode_batch = max(c.max_vocode_batch, vocode_n)
        self.observer.on_iteration(
            IterationStats(
                index=self._iteration,
                started_s=started,
                duration_s=t3 - started,
                encode_batch=encode_n,
                decode_batch=decode_n,
                vocode_batch=vocode_n,
                decode_steps=decode_steps,
                encode_s=t1 - t0,
                decode_s=t2 - t1,
                vocode_s=t3 - t2,
                pool_active=self.pool.num_active,
                pool_waiting=self.pool.num_waiting,
                urgent=plan.urgent,
                deferred_chunks=chunks.deferred_chunks,
                skipped_decode=plan.skipped_decode,
                paused=plan.paused,
                failed_batches=c.failed_batches - failed_before,
                vocode_frames=vocode_frames,
            )
        )
        return True, None

    # ------------------------------------------------------------------ carry out, deliver, fail

    def _carry_out(self, plan: Plan | ChunkPlan) -> None:
        """Carry out a plan's own decisions: its bookkeeping (Scheduler.commit), and stalled consumers end."""
        self.scheduler.commit(plan)
        for request in getattr(plan, "stalled", ()):
            self._end(
                request,
                FinishReason.ERROR,
                ConsumerStalled(
                    f"consumer left ≥{self.config.max_unread_audio_ms:.0f} ms unread for "
                    f"{self.config.stalled_consumer_timeout_ms:.0f} ms",
                    request_id=request.request_id,
                ),
            )

    def _step(self, call: ModuleCall) -> None:
        """Execute one module call, apply its result, deliver the events; then the failure policy."""
        result = execute(self.runners[call.voice], call, self.config.prenet_dropout)
        for event in self.updater.update(result):
            if isinstance(event, Publish):
                event.request.sink.publish_chunk(event.chunk)
            elif isinstance(event, End):
                self._end(event.request, event.reason, event.error)
            elif isinstance(event, BatchOk):
                self._consecutive_failures = 0
            else:
                self._batch_failed(event)
        if self._consecutive_failures >= self.config.max_consecutive_failures:
            raise _TooManyFailures(f"{self._consecutive_failures} batches failed in a row; "
                                   f"last: {result.error!r}") from result.error

    def _batch_failed(self, event: BatchFailed) -> None:
        """The failure policy's count (its requests end by the events after this one)."""
        logger.error(
            "%s batch of %d failed (requests %s)", event.module, len(event.requests),
            [r.request_id for r in event.requests][:8], exc_info=event.error,
        )
        self._counters.failed_batches += 1
        self._counters.allocation_failures += is_allocation_failure(event.error)  # the server's readiness watches this
        self._consecutive_failures += 1

    # ------------------------------------------------------------------ endings

    def _end(self, request: Request, reason: FinishReason, error: BaseException | None) -> None:
        """Take a request out of the engine and deliver its final event (engine thread)."""
        if request.status is Status.DONE:
            return
        slot = request.slot
        self.pool.remove(request)
        if slot >= 0:
            self.runners[request.voice].release(slot)
        request.timings.finished_s = now_s()
        request.failed = error
        request.play_end_s = self.scheduler.play_end_s(request)
        with self._cond:
            self._live.pop(request.request_id, None)
            self._play_ends[request.request_id] = request.play_end_s
            while len(self._play_ends) > self._play_ends_cap:
                self._play_ends.popitem(last=False)
            for other in self._live.values():  # its followers keep the time, not the request (chains stay short)
                if other.after is request:
                    other.after, other.after_end_s = None, request.play_end_s
        request.after = None
        self.gate.release()
        c = self._counters
        if reason is FinishReason.COMPLETED:
            c.requests_completed += 1
        elif reason is FinishReason.CANCELLED:
            c.requests_cancelled += 1
        else:
            c.requests_failed += 1
        try:  # observers first: whoever reads the final event sees the counters already updated
            self.observer.on_request_done(request.request_id, reason, request.timings)
        finally:
            request.sink.finish(reason, error, request.timings)

    def _shutdown(self) -> None:
        """Loop left by stop/drain: whatever is still live ends with EngineStopped."""
        with self._cond:
            self._take_inbox_locked()
            leftover = list(self._live.values())
        for request in leftover:
            self._end(request, FinishReason.ERROR, EngineStopped("engine stopped", request_id=request.request_id))
        with self._cond:
            self._state = _State.STOPPED

    def _die(self, exc: BaseException) -> None:
        """The loop raised: mark the engine dead and fail every live stream with EngineDead at once."""
        logger.critical("engine loop died: %r", exc, exc_info=exc)
        with self._cond:
            self.death = exc
            self._state = _State.DEAD
            leftover = list(self._live.values())
            self._live.clear()
            self._inbox.clear()
            self._cancels.clear()
        for request in leftover:
            request.timings.finished_s = now_s()
            self.gate.release()
            self._counters.requests_failed += 1
            err = EngineDead(f"engine loop died: {exc!r}", request_id=request.request_id)
            err.__cause__ = exc if isinstance(exc, Exception) else None
            try:
                request.sink.finish(FinishReason.ERROR, err, request.timings)
            except Exception:  # noqa: BLE001 - keep telling the others
                logger.exception("request %s: could not deliver EngineDead", request.request_id)


__all__ = ["EngineCore", "Health", "StreamSink", "validate_request", "EngineError"]
