"""TTFA overhead of each framework adapter over direct gRPC, and barge-in to silence, against a running server."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from clients.client import Audio, Cleared, VoxpoolClient
from clients.integrations import session as session_mod

log = logging.getLogger(__name__)

# In-path probes: when each turn's flush went to gRPC, and when its first speech frame came off gRPC. An adapter's
# own latency is (its consumer's flush → flush on the wire) + (first frame off the wire → first audio at its
# consumer), free of the server's TTFA, which swings by seconds on a shared machine.
FLUSH_WIRE_S: dict[str, float] = {}
FIRST_RX_S: dict[str, float] = {}


def install_probes() -> None:
    cls = session_mod.VoxpoolSession
    route, flush = cls._route, cls.flush

    async def probed_route(self, ev):
        if isinstance(ev, Audio) and not ev.silence:
            FIRST_RX_S.setdefault(ev.turn_id, ev.received_s)
        await route(self, ev)

    async def probed_flush(self, turn_id):
        FLUSH_WIRE_S.setdefault(turn_id, time.perf_counter())
        await flush(self, turn_id)

    cls._route, cls.flush = probed_route, probed_flush


def in_path_s(turn_id: str, t_flush: float, t_first_audio: float) -> float:
    return (FLUSH_WIRE_S[turn_id] - t_flush) + (t_first_audio - FIRST_RX_S[turn_id])

TEXT = "您好，这里是客服中心。您的订单已经发货，预计明天送达，请保持电话畅通。"
RATE_HZ = 16000
BARGE_AFTER_FRAMES = 5   # interrupt once this many frames of the turn reached the consumer
WAIT_S = 60.0


# ---------------------------------------------------------------------------------------------- direct gRPC


async def direct_ttfa_s(target: str) -> float:
    async with VoxpoolClient(target, service_config="", failover=False) as client:
        conv = await client.converse(encoding="L16", sample_rate_hz=RATE_HZ, pacing="ASAP")
        await conv.send_text(TEXT, "t1")
        t0 = await conv.flush("t1")
        async for ev in conv:
            if isinstance(ev, Audio) and not ev.silence:
                conv.cancel()
                return ev.received_s - t0, 0.0
    raise RuntimeError("no audio")


async def direct_barge_s(target: str) -> float:
    """Clear sent → last audio frame of the turn received (REALTIME pacing, as a gateway plays it)."""
    async with VoxpoolClient(target, service_config="", failover=False) as client:
        conv = await client.converse(encoding="L16", sample_rate_hz=RATE_HZ, pacing="REALTIME")
        await conv.send_text(TEXT, "t1")
        await conv.flush("t1")
        n, t_clear, last = 0, None, None
        async for ev in conv:
            if isinstance(ev, Audio) and not ev.silence:
                n += 1
                if t_clear is not None:
                    last = ev.received_s
                elif n == BARGE_AFTER_FRAMES:
                    t_clear = await conv.clear("t1")
            elif isinstance(ev, Cleared):
                conv.cancel()
                return max(last or t_clear, t_clear) - t_clear
    raise RuntimeError("no Cleared")


# ---------------------------------------------------------------------------------------------- pipecat


async def pipecat_round(target: str, barge: bool) -> float:
    from pipecat.frames.frames import (EndFrame, Frame, InterruptionFrame, LLMFullResponseEndFrame,
                                       LLMFullResponseStartFrame, LLMTextFrame, TTSAudioRawFrame)
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.workers.runner import WorkerRunner

    from clients.integrations.pipecat_tts import VoxpoolTTSService

    audio_s: list[float] = []
    contexts: list[str] = []
    got = asyncio.Event()

    class Sink(FrameProcessor):
        async def process_frame(self, frame: Frame, direction: FrameDirection):
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                audio_s.append(time.perf_counter())
                contexts.append(frame.context_id)
                got.set()
            await self.push_frame(frame, direction)

    tts = VoxpoolTTSService(target=target, pacing="REALTIME" if barge else "ASAP")
    worker = PipelineWorker(Pipeline([tts, Sink()]), cancel_on_idle_timeout=False,
                            params=PipelineParams(audio_out_sample_rate=RATE_HZ))
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(w, frame):
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    task = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(started.wait(), WAIT_S)
        await tts.session.open()  # connected, as in a running conversation
        await worker.queue_frames([LLMFullResponseStartFrame(), LLMTextFrame(TEXT)])
        t0 = time.perf_counter()
        await worker.queue_frame(LLMFullResponseEndFrame())
        await asyncio.wait_for(got.wait(), WAIT_S)
        if not barge:
            return audio_s[0] - t0, in_path_s(contexts[0], t0, audio_s[0])
        while len(audio_s) < BARGE_AFTER_FRAMES:
            await asyncio.sleep(0.005)
        t_int = time.perf_counter()
        await worker.queue_frame(InterruptionFrame())
        await asyncio.sleep(0.5)
        return max([t for t in audio_s if t > t_int], default=t_int) - t_int
    finally:
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(task, WAIT_S)


# ---------------------------------------------------------------------------------------------- livekit


async def livekit_round(target: str, barge: bool) -> float:
    from clients.integrations.livekit_tts import VoxpoolTTS

    engine = VoxpoolTTS(target=target, sample_rate=RATE_HZ)
    try:
        await engine.shared_session().open()
        stream = engine.stream()
        stream.push_text(TEXT)
        t0 = time.perf_counter()
        stream.flush()
        n = 0
        async for _ev in stream:
            n += 1
            if not barge:
                t1 = time.perf_counter()
                await stream.aclose()
                return t1 - t0, in_path_s(stream.turn_id, t0, t1)
            if n == BARGE_AFTER_FRAMES:
                break
        t_int = time.perf_counter()
        turn_id = stream.turn_id
        await stream.aclose()  # the agent interrupts: no frame is delivered after aclose returns
        t_silent = time.perf_counter()
        while turn_id not in engine.heard:
            await asyncio.sleep(0.002)
        return t_silent - t_int
    finally:
        await engine.aclose()


# ---------------------------------------------------------------------------------------------- jambonz


async def jambonz_round(target: str, barge: bool) -> float:
    from websockets.asyncio.client import connect

    from clients.integrations.jambonz import GatewayConfig, start

    _gw, runner, port = await start(GatewayConfig(voxpool_target=target, host="127.0.0.1", port=0,
                                                  pacing="REALTIME" if barge else "ASAP"))
    try:
        async with connect(f"ws://127.0.0.1:{port}/synthesize?sampleRate={RATE_HZ}") as ws:
            await ws.recv()  # connect
            await ws.send(json.dumps({"type": "stream", "text": TEXT}))
            t0 = time.perf_counter()
            await ws.send(json.dumps({"type": "flush"}))
            await ws.recv()
            if not barge:
                t1 = time.perf_counter()
                return t1 - t0, in_path_s("j1", t0, t1)
            for _ in range(BARGE_AFTER_FRAMES - 1):
                await ws.recv()
            t_int = time.perf_counter()
            await ws.send(json.dumps({"type": "stop"}))
            last = t_int
            while True:
                try:
                    await asyncio.wait_for(ws.recv(), 1.0)
                    last = time.perf_counter()
                except asyncio.TimeoutError:
                    return last - t_int
    finally:
        await runner.cleanup()


ADAPTERS = {
    "direct": (lambda t: direct_ttfa_s(t), lambda t: direct_barge_s(t)),
    "pipecat": (lambda t: pipecat_round(t, False), lambda t: pipecat_round(t, True)),
    "livekit": (lambda t: livekit_round(t, False), lambda t: livekit_round(t, True)),
    "jambonz": (lambda t: jambonz_round(t, False), lambda t: jambonz_round(t, True)),
}


async def run(target: str, rounds: int, adapters: Sequence[str], warmup: int = 1) -> dict:
    install_probes()
    ttfa: dict[str, list[float]] = {a: [] for a in adapters}
    path: dict[str, list[float]] = {a: [] for a in adapters}
    barge: dict[str, list[float]] = {a: [] for a in adapters}
    for i in range(warmup + rounds):  # interleaved, so drift in machine load hits every adapter alike
        for a in adapters:
            FLUSH_WIRE_S.clear()
            FIRST_RX_S.clear()
            x, own = await ADAPTERS[a][0](target)
            if i >= warmup:
                ttfa[a].append(x)
                path[a].append(own)
        for a in adapters:
            x = await ADAPTERS[a][1](target)
            if i >= warmup:
                barge[a].append(x)
    out = {}
    base = statistics.median(ttfa["direct"]) if "direct" in ttfa else None
    for a in adapters:
        med = statistics.median(ttfa[a])
        out[a] = {"ttfa_ms_median": med * 1000, "ttfa_ms_all": [x * 1000 for x in ttfa[a]],
                  "ttfa_overhead_ms": None if base is None else (med - base) * 1000,
                  "in_path_ms_median": statistics.median(path[a]) * 1000,
                  "in_path_ms_max": max(path[a]) * 1000,
                  "in_path_ms_all": [x * 1000 for x in path[a]],
                  "barge_to_silence_ms_median": statistics.median(barge[a]) * 1000,
                  "barge_to_silence_ms_all": [x * 1000 for x in barge[a]]}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.adapter_overhead", description=__doc__)
    p.add_argument("--server", default="127.0.0.1:50051", help="a running voxpool server")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted (imports, caches)")
    p.add_argument("--adapters", default="direct,pipecat,livekit,jambonz")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result = asyncio.run(run(args.server, args.rounds, args.adapters.split(","), args.warmup))
    print(f"{'adapter':<9} {'TTFA p50 ms':>12} {'vs direct ms':>13} {'in-path p50 / max ms':>21} "
          f"{'barge→silence p50 ms':>21}")
    for a, r in result.items():
        over = "" if r["ttfa_overhead_ms"] is None else f"{r['ttfa_overhead_ms']:+.1f}"
        inpath = f"{r['in_path_ms_median']:.2f} / {r['in_path_ms_max']:.2f}"
        print(f"{a:<9} {r['ttfa_ms_median']:>12.1f} {over:>13} {inpath:>21} {r['barge_to_silence_ms_median']:>21.1f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
