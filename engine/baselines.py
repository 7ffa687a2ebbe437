"""Benchmark baselines with the engine's API and models: `naive` (a thread per request) and `non_incremental`.

* ``naive``: every request gets its own worker thread running the streaming pipeline alone (batch 1): the same
  chunking, look-ahead and cross-fade as the engine, but no batching across requests; each worker runs torch
  with one intra-op thread and the OS spreads the workers over the cores.
* ``non_incremental``: the incremental-TTS paper's twin. One thread works in rounds: the requests that arrived
  during the previous round are batched (up to max_slots), their whole utterances are decoded, post-netted and
  vocoded together, and each request's audio is returned as one chunk at the end of the round.

Both are for benchmarks only (bench/engine_load.py); the service uses EngineCore.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from typing import Iterable, Mapping

import numpy as np
import torch

from engine.config import EngineConfig
from engine.core import EngineCore, Health, StreamSink, runner_for, validate_request
from engine.errors import EngineDead, EngineStopped, InvalidRequest, RequestFailed
from engine.pool import AdmissionGate
from engine.request import AudioChunk, FinishReason, RequestTimings, SynthesisRequest, now_s
from engine.runner import TorchRunner
from engine.telemetry import EngineCounters, EngineObserver, ObserverFanout

logger = logging.getLogger(__name__)

NON_INCREMENTAL_STEPS_PER_CALL = 8  # decoder steps per batched call inside a round (cancel is checked between)


class _Baseline:
    """Shared plumbing: voice lookup, validation, admission, health, counters."""

    def __init__(self, config: EngineConfig, runners: Mapping[str, TorchRunner], observers: Iterable[EngineObserver]):
        if not runners:
            raise ValueError("a baseline needs at least one voice runner")
        self.config = config
        self.runners = dict(runners)
        self.default_voice = next(iter(self.runners))
        self.gate = AdmissionGate(config.max_slots + config.max_waiting)
        self.observer = ObserverFanout(list(observers))
        self._counters = EngineCounters()
        self._lock = threading.Condition()
        self._state = "new"

    def runner(self, voice: str) -> TorchRunner:
        return runner_for(self.runners, self.default_voice, voice)

    def sample_rate_hz(self, voice: str) -> int:
        """Output sample rate of a voice ('' = default)."""
        return self.runner(voice).timing.sample_rate_hz

    def health(self) -> Health:
        """SERVING while running."""
        return Health.SERVING if self._state == "running" else Health.NOT_SERVING

    def counters(self) -> EngineCounters:
        """Totals since start."""
        return self._counters.snapshot()

    def _admit(self, spec: SynthesisRequest) -> TorchRunner:
        runner = self.runner(spec.voice)
        validate_request(spec, runner)
        if self._state == "dead":
            raise EngineDead("baseline is dead", request_id=spec.request_id)
        if self._state != "running":
            raise EngineStopped(f"baseline is {self._state}", request_id=spec.request_id)
        self.gate.acquire(spec.request_id)
        self._counters.requests_submitted += 1
        return runner

    def _done(self, request_id: str, reason: FinishReason, timings: RequestTimings) -> None:
        self.gate.release()
        c = self._counters
        with self._lock:  # naive workers finish on their own threads
            if reason is FinishReason.COMPLETED:
                c.requests_completed += 1
            elif reason is FinishReason.CANCELLED:
                c.requests_cancelled += 1
            else:
                c.requests_failed += 1
            c.audio_samples += timings.audio_samples
        self.observer.on_request_done(request_id, reason, timings)


class _StopWhenDone:
    """Observer of a naive worker's private EngineCore: report the request's end, then stop that core."""

    def __init__(self, owner: "NaiveBackend", request_id: str) -> None:
        self.owner = owner
        self.request_id = request_id
        self.core: EngineCore | None = None

    def on_iteration(self, stats) -> None:  # noqa: ANN001 - EngineObserver
        return None

    def on_request_done(self, request_id: str, reason: FinishReason, timings: RequestTimings) -> None:
        self.owner._worker_done(request_id, reason, timings)
        if self.core is not None:
            self.core.stop()  # from its own thread: returns at once, the loop exits after this iteration


class NaiveBackend(_Baseline):
    """A thread per request: each request runs the streaming pipeline alone (no cross-request batching)."""

    def __init__(self, config: EngineConfig, runners: Mapping[str, TorchRunner], observers: Iterable[EngineObserver] = ()):
        super().__init__(config, runners, observers)
        # one intra-op thread per worker: concurrent workers spread over the cores instead of running competing
        # OpenMP teams (docs/benchmarks-history.md, "Engine, in process")
        self._solo_config = dataclasses.replace(
            config, max_slots=1, max_waiting=0, max_vocode_wait_ms=0.0, min_vocode_batch=1, cuda_graphs=False,
            num_threads=1,
        )
        self._workers: dict[str, EngineCore] = {}

    def start(self, warmup: bool = True, timeout_s: float | None = None) -> None:
        """Warm each voice up once; workers start per request."""
        if warmup:
            for runner in self.runners.values():
                runner.warmup()
        self._state = "running"

    def submit(self, spec: SynthesisRequest, sink: StreamSink, timings: RequestTimings | None = None) -> EngineCore:
        """Start a worker thread for this request."""
        runner = self._admit(spec)
        try:
            solo = TorchRunner(runner.voice, runner.bundle, self._solo_config)
            watcher = _StopWhenDone(self, spec.request_id)
            core = EngineCore(self._solo_config, {runner.voice: solo}, [watcher], name=f"naive-{spec.request_id}")
            watcher.core = core
            with self._lock:
                self._workers[spec.request_id] = core
            core.start(warmup=False)
            core.submit(spec, sink, timings)
        except BaseException:
            with self._lock:
                self._workers.pop(spec.request_id, None)
            self.gate.release()
            raise
        return core

    def _worker_done(self, request_id: str, reason: FinishReason, timings: RequestTimings) -> None:
        with self._lock:
            self._workers.pop(request_id, None)
            self._lock.notify_all()
        self._done(request_id, reason, timings)

    def cancel(self, request_id: str) -> bool:
        """Cancel a request's worker."""
        with self._lock:
            core = self._workers.get(request_id)
        return core.cancel(request_id) if core is not None else False

    def drain(self, timeout_s: float | None = None) -> bool:
        """Refuse new requests and wait for the workers."""
        self._state = "draining"
        with self._lock:
            ok = self._lock.wait_for(lambda: not self._workers, timeout_s)
        self.stop()
        return ok

    def stop(self, timeout_s: float | None = 10.0) -> None:
        """Stop every worker (their requests end with EngineStopped)."""
        self._state = "stopped"
        with self._lock:
            workers = list(self._workers.values())
        for core in workers:
            core.stop(timeout_s)


@dataclasses.dataclass(eq=False)
class _Job:
    spec: SynthesisRequest
    sink: StreamSink
    timings: RequestTimings
    runner: TorchRunner
    cancelled: bool = False


class NonIncrementalBackend(_Baseline):
    """Rounds of whole-utterance batch synthesis; each request's audio arrives in one piece at the round's end."""

    def __init__(self, config: EngineConfig, runners: Mapping[str, TorchRunner], observers: Iterable[EngineObserver] = ()):
        super().__init__(config, runners, observers)
        self._inbox: collections.deque[_Job] = collections.deque()
        self._live: dict[str, _Job] = {}
        self._thread: threading.Thread | None = None

    def start(self, warmup: bool = True, timeout_s: float | None = None) -> None:
        """Warm up and start the round thread."""
        if warmup:
            for runner in self.runners.values():
                runner.warmup()
        self._state = "running"
        self._thread = threading.Thread(target=self._main, name="non-incremental", daemon=True)
        self._thread.start()

    def submit(self, spec: SynthesisRequest, sink: StreamSink, timings: RequestTimings | None = None) -> _Job:
        """Queue for the next round (rate 1 only: this benchmark baseline has no tempo change)."""
        if spec.speaking_rate != 1.0:
            raise InvalidRequest(f"speaking_rate {spec.speaking_rate:g}: the non-incremental baseline speaks at rate 1.0 "
                                 "only; use the engine or the naive baseline", request_id=spec.request_id)
        runner = self._admit(spec)
        job = _Job(spec, sink, timings or RequestTimings(submitted_s=now_s()), runner)
        with self._lock:
            if spec.request_id in self._live:
                self.gate.release()
                raise InvalidRequest(f"duplicate request_id {spec.request_id!r}", request_id=spec.request_id)
            self._live[spec.request_id] = job
            self._inbox.append(job)
            self._lock.notify()
        return job

    def cancel(self, request_id: str) -> bool:
        """Drop a request (checked between decoder calls)."""
        with self._lock:
            job = self._live.get(request_id)
            if job is None:
                return False
            job.cancelled = True
        return True

    def drain(self, timeout_s: float | None = None) -> bool:
        """Refuse new requests, finish queued rounds, stop."""
        with self._lock:
            self._state = "draining"
            ok = self._lock.wait_for(lambda: not self._live, timeout_s)
        self.stop()
        return ok

    def stop(self, timeout_s: float | None = 10.0) -> None:
        """Stop after the current round; queued requests end with EngineStopped."""
        with self._lock:
            if self._state != "dead":
                self._state = "stopped"
            self._lock.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _finish(self, job: _Job, reason: FinishReason, error: BaseException | None) -> None:
        job.timings.finished_s = now_s()
        with self._lock:
            self._live.pop(job.spec.request_id, None)
            self._lock.notify_all()
        self._done(job.spec.request_id, reason, job.timings)  # counters before the reader sees the end
        job.sink.finish(reason, error, job.timings)

    def _main(self) -> None:
        try:
            for runner in self.runners.values():
                runner.enter_thread()  # the round thread is this backend's engine thread
            while True:
                with self._lock:
                    self._lock.wait_for(lambda: self._inbox or self._state in ("stopped", "dead"))
                    if self._state in ("stopped", "dead"):
                        break
                    round_jobs = [self._inbox.popleft() for _ in range(min(len(self._inbox), self.config.max_slots))]
                by_voice: dict[str, list[_Job]] = {}
                for job in round_jobs:
                    by_voice.setdefault(job.runner.voice, []).append(job)
                for jobs in by_voice.values():
                    self._round(jobs)
        except BaseException as exc:  # noqa: BLE001
            logger.critical("non-incremental baseline died: %r", exc, exc_info=exc)
            self._state = "dead"
        with self._lock:
            leftover = list(self._live.values())
        for job in leftover:
            err = EngineDead("baseline died") if self._state == "dead" else EngineStopped("baseline stopped")
            self._finish(job, FinishReason.ERROR, err)

    def _round(self, jobs: list[_Job]) -> None:
        live = [j for j in jobs if not j.cancelled]
        for job in jobs:
            if job.cancelled:
                self._finish(job, FinishReason.CANCELLED, None)
        if not live:
            return
        runner = live[0].runner
        slots = list(range(len(live)))
        t = now_s()
        for job in live:
            job.timings.admitted_s = t
        try:
            audio, peaks = self._synthesize(runner, live, slots)
        except Exception as exc:  # noqa: BLE001 - the round's requests fail, the baseline goes on
            logger.exception("non-incremental round of %d failed", len(live))
            for job in live:
                if not job.cancelled:
                    self._finish(job, FinishReason.ERROR, RequestFailed(f"round failed: {exc!r}", module="round", cause=exc))
            return
        finally:
            for slot in slots:
                runner.release(slot)
        t = now_s()
        for job, samples, positions in zip(live, audio, peaks):
            if job.cancelled:
                self._finish(job, FinishReason.CANCELLED, None)
                continue
            if samples.size:
                job.sink.publish_chunk(
                    AudioChunk(samples, 0, positions.astype(np.int32), True, runner.timing.sample_rate_hz)
                )
                job.timings.first_audio_s = t
                job.timings.audio_samples = int(samples.size)
                job.timings.chunks = 1
            self._finish(job, FinishReason.COMPLETED, None)

    def _synthesize(self, runner: TorchRunner, jobs: list[_Job], slots: list[int]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Whole utterances for a batch: encode, decode to the end, postnet, vocoder (batched, reflect-padded)."""
        runner.encode(slots, [j.spec.ids for j in jobs], [j.spec.seed for j in jobs])
        t = now_s()
        for job in jobs:
            job.timings.encoded_s = t
        n = len(jobs)
        active = list(range(n))
        peaks: list[list[int]] = [[] for _ in range(n)]
        keep = [0] * n
        decoded = [0] * n
        while active:
            rows = runner.decode([slots[i] for i in active], NON_INCREMENTAL_STEPS_PER_CALL, self.config.prenet_dropout)
            still = []
            for k, i in enumerate(active):
                valid = int(rows.valid_steps[k])
                peaks[i].extend(int(p) for p in rows.peaks[k, :valid])
                loud = np.flatnonzero(rows.loud[k, : valid * runner.r])
                if loud.size:
                    keep[i] = decoded[i] + int(loud[-1]) + 1
                decoded[i] += valid * runner.r
                jobs[i].timings.decoder_steps += valid
                if not bool(rows.finished[k]) and not jobs[i].cancelled:
                    still.append(i)
            active = still
        hop = runner.timing.hop_samples
        audio = [np.zeros(0, np.float32) for _ in range(n)]
        rows_with_audio = [i for i in range(n) if keep[i] > 0 and not jobs[i].cancelled]
        if rows_with_audio:
            with torch.inference_mode():
                idx = torch.tensor([slots[i] for i in rows_with_audio], device=runner.device)
                max_decoded = max(decoded[i] for i in rows_with_audio)
                mel_after = runner.acoustic.postnet(runner.mel[idx, :max_decoded])  # zeros past each end, as alone
                width = max(keep[i] for i in rows_with_audio)
                gathered = []
                for k, i in enumerate(rows_with_audio):
                    pos = torch.arange(width, device=runner.device)
                    if keep[i] > 1:  # reflect past the end, as the vocoder pads its own edges
                        period = 2 * (keep[i] - 1)
                        pos = pos % period
                        pos = torch.where(pos >= keep[i], period - pos, pos)
                    else:
                        pos = torch.zeros_like(pos)
                    gathered.append(mel_after[k].index_select(0, pos))
                wave = runner.vocoder(torch.stack(gathered).to(runner.vocoder_dtype)).float().cpu().numpy()
            for k, i in enumerate(rows_with_audio):
                audio[i] = np.ascontiguousarray(wave[k, : keep[i] * hop])
        return audio, [np.asarray(p, np.int64) for p in peaks]


def make_baseline(
    kind: str, config: EngineConfig, runners: Mapping[str, TorchRunner], observers: Iterable[EngineObserver] = ()
) -> NaiveBackend | NonIncrementalBackend:
    """'naive' or 'non_incremental'."""
    if kind == "naive":
        return NaiveBackend(config, runners, observers)
    if kind == "non_incremental":
        return NonIncrementalBackend(config, runners, observers)
    raise ValueError(f"unknown backend {kind!r}: use engine, naive or non_incremental")
