"""The in-process benchmark read at playback speed: closed-loop calls whose turns are released as the gRPC edge would.

`python -m bench.engine_load --pacing realtime --concurrency 16 --duration-s 30` runs N calls for duration_s, each
speaking turns of the benchmark's text set back to back, like `python -m bench.grpc_load --pacing REALTIME --concurrency N
--text-class mixed`: the same texts in the same order per call (bench.workload, same seed and keys), cut
into segments as a call's turn is (models.frontend.segmenter, the service's defaults), one engine request per
segment, each submitted while the one before it plays and following it on the call's playback clock
(SynthesisOptions.follows), one segment ahead, as the call's producer does (service/call/ahead.py).

What a gateway would have heard is computed from the chunk arrivals by `paced_frames`, the REALTIME release rule
of the call's pacer (service/pacing.py, checked equal to it in tests/bench/test_paced.py): frame k of a turn
plays at t0 + k·frame, is released no earlier than its play time minus the lead, never before its audio arrived;
while audio is expected and none is there, a silence frame takes the slot once its deadline passes. The pacer's
turn start buffer (`audio.start_buffer_ms`) is not modelled: in process a turn starts playing on its first chunk
(200 ms, its leading silence not cut), where the gRPC path waits for a second chunk. The next turn
starts when the turn's last frame was released (the gRPC client gets turn_done then). The per-turn and summary
figures are bench.metrics' (`turn_metrics`, `summarize`): one formula for on-time chunks, underrun fill and
TTFA, over the wire and in process. TTFA here runs from the submit of the turn's first segment (the gRPC one also
holds the frontend, the network and the first frame's encoding).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from bench.metrics import TurnTimeline, summarize, turn_metrics
from bench.workload import TextItem, pick_texts
from engine.request import AudioChunk, SynthesisOptions, SynthesisRequest

_EPS_S = 1e-6  # as the pacer: clock readings compare with this tolerance


@dataclass(frozen=True)
class PacedPlayout:
    """The call's audio settings that shape the release: frame length, lead, silence grace."""

    frame_ms: int = 20
    lead_ms: int = 60

    @property
    def frame_s(self) -> float:
        return self.frame_ms / 1000.0

    @property
    def lead_s(self) -> float:
        return self.lead_ms / 1000.0

    @property
    def grace_s(self) -> float:
        """The pacer's default grace: min(lead, frame / 2)."""
        return min(self.lead_ms, self.frame_ms / 2.0) / 1000.0

    @property
    def deadline_margin_ms(self) -> float:
        """What the edge tells the engine (service.pacing.engine_deadline_margin_ms, REALTIME): lead − grace + one
        frame; tests/bench/test_paced.py holds the two equal."""
        return self.lead_ms - self.grace_s * 1000.0 + self.frame_ms

    @property
    def burst_gap_s(self) -> float:
        """The gRPC bench's default chunk grouping under REALTIME: frame / 4."""
        return self.frame_ms / 4000.0


def paced_frames(chunks: Sequence[tuple[float, float]], playout: PacedPlayout) -> list[tuple[float, float, bool]]:
    """Chunk arrivals [(arrival_s, duration_s), ...] of one turn → frames [(release_s, duration_s, silence), ...].

    The audio is cut into frames of frame_ms (the last one padded); a frame is available when the chunk holding its
    end arrived. The play clock starts at the first frame's availability; each slot goes to the next available
    frame at max(availability, play − lead), or to a silence frame at the slot's deadline (play − lead + grace once
    the lead was full, play − grace before) if no frame is available by then; a slot is never decided before the
    previous one went out.
    """
    frame_s, lead_s, grace_s = playout.frame_s, playout.lead_s, playout.grace_s
    available: list[float] = []
    total_s = 0.0
    for arrival_s, duration_s in chunks:
        total_s += duration_s
        while (len(available) + 1) * frame_s <= total_s + _EPS_S:
            available.append(arrival_s)
    if total_s > len(available) * frame_s + _EPS_S:
        available.append(chunks[-1][0])  # the padded last frame
    frames: list[tuple[float, float, bool]] = []
    if not available:
        return frames
    t0 = available[0]
    slot = 0
    lead_full = False
    last_s = t0  # when the previous slot went out: the pacer decides the next slot from then on
    for avail_s in available:
        while True:
            play_s = t0 + slot * frame_s
            release_s = play_s - lead_s
            if slot and last_s + _EPS_S < release_s:
                lead_full = True  # asked before the slot's release time: the gateway holds a full lead
            deadline_s = release_s + grace_s if lead_full else play_s - grace_s
            if avail_s < max(deadline_s, last_s) + _EPS_S:  # queued before the slot's silence would go
                last_s = max(avail_s, release_s, last_s)
                frames.append((last_s, frame_s, False))
                slot += 1
                break
            last_s = max(deadline_s, last_s)
            frames.append((last_s, frame_s, True))  # underrun fill
            slot += 1
    return frames


def segment_texts(text: str, max_chars: int = 80, first_clause_cut: bool = True) -> list[str]:
    """A whole turn's text cut into the segments a call submits (the service's default segmenter settings)."""
    from models.frontend.segmenter import Segmenter

    seg = Segmenter(max_chars=max_chars, first_clause_cut=first_clause_cut)
    parts = seg.push(text) + seg.flush()
    return [p.text for p in parts if p.text.strip()]


async def paced_turn(engine: Any, segments: Sequence[Sequence[int]], rid: str, voice: str, seed: int,
                      playout: PacedPlayout) -> dict[str, Any]:
    """One turn: its segments one after another; returns the turn record (bench.metrics keys)."""
    submit_s = time.perf_counter()
    arrivals: list[tuple[float, float]] = []
    rec: dict[str, Any] = {"status": "OK", "segments": len(segments)}
    options = SynthesisOptions(deadline_margin_ms=playout.deadline_margin_ms)
    streams: list[Any] = []

    def submit(j: int) -> Any:  # segment j follows segment j-1 on the call's playback clock, as the producer does
        opts = dataclasses.replace(options, follows=f"{rid}/{j - 1}") if j else options
        stream = engine.submit(SynthesisRequest(f"{rid}/{j}", tuple(segments[j]), voice=voice, seed=seed, options=opts))
        streams.append(stream)
        return stream

    try:
        nxt = submit(0) if segments else None
        for j in range(len(segments)):
            stream, nxt = nxt, (submit(j + 1) if j + 1 < len(segments) else None)  # one segment ahead
            async for event in stream:
                if isinstance(event, AudioChunk):
                    arrivals.append((time.perf_counter(), event.duration_s))
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
        rec["status"] = type(exc).__name__
        rec["error"] = str(exc)
    finally:
        for stream in streams:  # a segment submitted ahead of a failed one is cancelled
            stream.close()
    frames = paced_frames(arrivals, playout)
    if frames:  # the turn ends (turn_done) when its last frame is released
        wait_s = frames[-1][0] - time.perf_counter()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
    rec.update(turn_metrics(TurnTimeline(submit_s, submit_s, frames), burst_gap_s=playout.burst_gap_s))
    return rec


async def run_paced_closed_loop(
    engine: Any, items: Sequence[TextItem], ids_of: Callable[[str], list[Sequence[int]]], concurrency: int,
    duration_s: float, seed: int = 42, voice: str = "", playout: PacedPlayout = PacedPlayout(), run_tag: str = "paced",
) -> tuple[list[dict[str, Any]], float]:
    """`concurrency` calls, each starting its next turn when the previous one was released, until duration_s."""
    t0 = time.perf_counter()

    async def call(w: int) -> list[dict[str, Any]]:
        out = []
        k = 0
        while time.perf_counter() - t0 < duration_s:
            item = pick_texts(items, 1, seed, concurrency, w, k)[0]  # the gRPC bench's closed-loop draw
            rec = await paced_turn(engine, ids_of(item.text), f"{run_tag}-c{w}-t{k}", voice, seed, playout)
            rec.update(i=k, worker=w, text_id=item.id, **{"class": item.cls})
            out.append(rec)
            k += 1
        return out

    per_call = await asyncio.gather(*(call(w) for w in range(concurrency)))
    return [r for recs in per_call for r in recs], time.perf_counter() - t0


def paced_row(records: Sequence[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """bench.metrics.summarize of the turns, plus the flat figures the bench.engine_load table prints."""
    s = summarize(records, wall_s=wall_s)
    flat = {
        "turns": s["turns"],
        "errors": sum(s["errors"].values()),
        "ttfa_ms_p50": s["ttfa_ms"]["p50"],
        "ttfa_ms_p90": s["ttfa_ms"]["p90"],
        "chunks_on_time": s["chunk_on_time_fraction"],
        "turns_all_on_time": s["all_on_time_fraction"],
        "turns_with_fill": s["turns_with_fill_fraction"],
        "x_realtime": s["rtfx"],
        "audio_s": s["audio_s"],
        "wall_s": wall_s,
    }
    return {**{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in flat.items()}, "summary": s}
