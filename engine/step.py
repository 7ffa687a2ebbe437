"""One engine iteration in three verbs: the scheduler plans, `execute` runs a module call, `update` applies it.

`Scheduler.plan` / `Scheduler.pick_chunks` (engine/scheduler.py) return what to run — newcomers' first decoder
step included — and change nothing; `execute` runs one batched module call on a voice's runner and returns its
output or its exception; `StepUpdate.update(call, result)` writes the result into the requests (status, decoded
and decided frames, emitted samples, counters) and returns the events the core must deliver, delivering none
itself. `EngineCore` (engine/core.py) keeps the thread, the inbox, the endings and the failure policy.

An iteration is two rounds of the three verbs, encode + decode, then vocode: the chunks a vocoder call takes are
picked on the mel decoded in the same iteration (picking them beforehand would hold every chunk, first ones
included, one iteration longer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence, Union

import numpy as np

from engine.errors import InvalidRequest, RequestFailed
from engine.modules import ModuleRunner, VocodeJob
from engine.request import AudioChunk, FinishReason, Request, Status, now_s
from engine.scheduler import ChunkJob
from engine.telemetry import EngineCounters
from models.time_scale_frames import step_start_sample, steps_started_before

#: At most this many decided steps go with a chunk as `ahead_positions` (64 steps: 1.6 s of Baker audio, r = 2 and
#: 12.5 ms frames, longer than a word): the decoder may run seconds ahead of the vocoder, and every chunk would
#: otherwise repeat all of it (Python per step on the engine thread, and again in every cached chunk).
MAX_AHEAD_STEPS = 64


@dataclass(frozen=True)
class ModuleCall:
    """One batched module call of an iteration: encode or decode `requests`, or vocode `jobs` (their requests)."""

    module: str  # "encode" | "decode" | "vocode"
    voice: str
    requests: list[Request]
    steps: int = 0  # decode: decoder steps of this call
    jobs: list[ChunkJob] = field(default_factory=list)  # vocode: the chunks, in the order of `requests`


@dataclass(frozen=True)
class ModuleResult:
    """What a module call returned (`output`) or raised (`error`), and when it finished (engine clock)."""

    call: ModuleCall
    output: Any
    error: BaseException | None
    at_s: float


@dataclass(frozen=True)
class Publish:
    """Deliver `chunk` to the request's sink."""

    request: Request
    chunk: AudioChunk


@dataclass(frozen=True)
class End:
    """The request is over: take it out of the engine and deliver its final event."""

    request: Request
    reason: FinishReason
    error: BaseException | None


@dataclass(frozen=True)
class BatchFailed:
    """A module call raised: the core's failure policy counts it (its requests' `End`s follow)."""

    module: str
    requests: list[Request]
    error: BaseException


@dataclass(frozen=True)
class BatchOk:
    """A module call succeeded: the core's count of consecutive failed batches starts over."""

    module: str


Event = Union[Publish, End, BatchFailed, BatchOk]


def execute(runner: ModuleRunner, call: ModuleCall, prenet_dropout: float) -> ModuleResult:
    """Run one batched module call; an exception is the result's error (applied like any result)."""
    try:
        if call.module == "encode":
            rs = call.requests
            output: Any = runner.encode([r.slot for r in rs], [r.spec.ids for r in rs], [r.spec.seed for r in rs])
        elif call.module == "decode":
            output = runner.decode([r.slot for r in call.requests], call.steps, prenet_dropout)
        else:
            output = runner.vocode([
                VocodeJob(slot=j.request.slot, start_frame=j.start_frame, end_frame=j.end_frame,
                          utterance_frames=j.request.end_frame, first=j.start_frame == 0, last=j.last,
                          speaking_rate=j.request.spec.speaking_rate)
                for j in call.jobs
            ])
            if len(output) != len(call.jobs):
                raise RuntimeError(f"vocoder returned {len(output)} results for {len(call.jobs)} chunks")
    except Exception as exc:  # noqa: BLE001 - a failed batch fails its requests only (in update)
        return ModuleResult(call, None, exc, now_s())
    return ModuleResult(call, output, None, now_s())


class StepUpdate:
    """The one place a module's result changes requests: status, decoded and decided frames, samples emitted."""

    def __init__(self, runners: dict[str, ModuleRunner], counters: EngineCounters) -> None:
        self.runners = runners
        self.counters = counters

    def update(self, result: ModuleResult) -> list[Event]:
        """Apply `result` to its call's requests; returns the events to deliver, in order."""
        call = result.call
        if result.error is not None:
            if call.module == "encode" and isinstance(result.error, InvalidRequest):
                return [End(r, FinishReason.ERROR, InvalidRequest(str(result.error), request_id=r.request_id))
                        for r in call.requests]
            events: list[Event] = [BatchFailed(call.module, call.requests, result.error)]
            events += [End(r, FinishReason.ERROR, RequestFailed(f"{call.module} failed: {result.error!r}",
                                                                request_id=r.request_id, module=call.module,
                                                                cause=result.error))
                       for r in call.requests if r.status is not Status.DONE]
            return events
        c = self.counters
        events = [BatchOk(call.module)]
        if call.module == "encode":
            c.encode_calls += 1
            c.encoded_items += len(call.requests)
            for request in call.requests:
                request.status = Status.DECODING
                request.timings.encoded_s = result.at_s
        elif call.module == "decode":
            c.decode_calls += 1
            c.decoded_rows += len(call.requests)
            self._decoded(self.runners[call.voice], call.requests, result.output)
        else:
            c.vocode_calls += 1
            c.vocoded_chunks += len(call.jobs)
            runner = self.runners[call.voice]
            for job, samples in zip(call.jobs, result.output):
                events += self._vocoded(runner, job, samples, result.at_s)
        return events

    def _decoded(self, runner: ModuleRunner, requests: Sequence[Request], rows: Any) -> None:
        r_frames = runner.timing.reduction_factor
        for i, request in enumerate(requests):
            valid = int(rows.valid_steps[i])
            request.peaks.extend(int(p) for p in rows.peaks[i, :valid])
            loud = np.flatnonzero(rows.loud[i, : valid * r_frames])
            if loud.size:
                request.frames_decided = request.frames_decoded + int(loud[-1]) + 1
            request.frames_decoded += valid * r_frames
            request.timings.decoder_steps += valid
            if bool(rows.finished[i]):
                request.end_frame = request.frames_decided  # the trailing trim: quiet frames at the end go
                request.status = Status.DRAINING

    def _vocoded(self, runner: ModuleRunner, job: ChunkJob, samples: Any, at_s: float) -> list[Event]:
        request = job.request
        r_frames, hop = runner.timing.reduction_factor, runner.timing.hop_samples
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        events: list[Event] = []
        if samples.size:
            first = request.timings.first_audio_s is None
            # the decoder steps whose audio starts in this chunk (the vocoder returns audio later than the
            # frames fed, and chunk edges need not fall on frame edges; the speaking rate scales step lengths)
            speaking_rate = request.spec.speaking_rate
            lo, hi = (min(len(request.peaks), steps_started_before(n, hop, r_frames, speaking_rate))
                      for n in (request.samples_emitted, request.samples_emitted + samples.size))
            # the steps decided past this chunk (whole steps of decided frames: a trailing trim cannot remove them)
            ahead = max(hi, min(len(request.peaks), request.frames_decided // r_frames, hi + MAX_AHEAD_STEPS))
            events.append(Publish(request, AudioChunk(
                samples=samples,
                start_sample=request.samples_emitted,
                input_positions=np.asarray(request.peaks[lo:hi], dtype=np.int32),
                first=first,
                sample_rate_hz=runner.timing.sample_rate_hz,
                step_start_samples=np.array([step_start_sample(k, hop, r_frames, speaking_rate) for k in range(lo, hi)],
                                            dtype=np.int64),
                ahead_positions=np.asarray(request.peaks[hi:ahead], dtype=np.int32),
                ahead_step_start_samples=np.array(
                    [step_start_sample(k, hop, r_frames, speaking_rate) for k in range(hi, ahead)], dtype=np.int64),
            )))
            if first:
                request.timings.first_audio_s = at_s
            request.samples_emitted += int(samples.size)
            request.timings.audio_samples = request.samples_emitted
            request.timings.chunks += 1
            self.counters.audio_samples += int(samples.size)
        request.frames_emitted = job.end_frame
        request.ready_since_s = None
        if job.last:
            events.append(End(request, FinishReason.COMPLETED, None))
        return events


__all__ = ["MAX_AHEAD_STEPS", "ModuleCall", "ModuleResult", "Publish", "End", "BatchFailed", "BatchOk", "Event",
           "execute", "StepUpdate"]
