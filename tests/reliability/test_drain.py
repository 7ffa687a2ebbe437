"""Drain in process (the SIGTERM path with a real `voxpool serve` process is tests/service/test_drain.py): health
watchers see NOT_SERVING before anything else ends, new calls get UNAVAILABLE, calls that fit the grace finish, a call
that does not is cut with UNAVAILABLE when the grace runs out instead of holding the process. (Timing: tests/load/.)"""

import asyncio
import time
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.reliability.conftest import (
    NOT_SERVING, SERVING, Received, channel_to, config_event, end_event, gateway_call, realtime_config, serving,
    stub, text_event,
)

GRACE_S = 4.0  # the 1 s call fits it even on a loaded machine; the 10 s call, paced in real time, cannot
LONG_AUDIO_MS = 10000  # 10 segments x 1 s (tiny voice, 40 steps)


@dataclass
class DrainRun:
    """One drain with a short and a long call in flight; times are seconds after drain() was called."""

    watch_not_serving_s: float
    drain_returned_s: float
    clean: bool
    short_done_before_drain_returned: bool
    refused: Received
    short: Received
    long: Received
    slots_after: int


async def run_drain() -> DrainRun:
    # 40 steps = 1 s per segment: the short call has 1 s of audio, the long one 10 s (> the grace)
    async with serving() as server, channel_to(server.port) as ch:
        ts = stub(ch)
        health = health_pb2_grpc.HealthStub(ch)
        watch = health.Watch(health_pb2.HealthCheckRequest(service="voxpool.readiness"))
        assert (await watch.read()).status == SERVING

        short = asyncio.create_task(gateway_call(ts, realtime_config(), text_event("您好。"), end_event()))
        long = asyncio.create_task(gateway_call(ts, realtime_config(), text_event("这句话很长。" * 10), end_event()))
        while server.engine.counters().audio_samples == 0 or server.admission.active < 2:
            await asyncio.sleep(0.01)

        t0 = time.monotonic()
        drained = asyncio.create_task(server.drain(grace_s=GRACE_S))
        status = (await asyncio.wait_for(watch.read(), 10)).status
        assert status == NOT_SERVING, status
        watch_s = time.monotonic() - t0
        refused = await gateway_call(ts, config_event(), end_event())
        short_rec = await asyncio.wait_for(short, 30)
        short_first = not drained.done()
        clean = await asyncio.wait_for(drained, GRACE_S + 30)
        took_s = time.monotonic() - t0
        long_rec = await asyncio.wait_for(long, 30)
        return DrainRun(watch_s, took_s, clean, short_first, refused, short_rec, long_rec, server.admission.active)


async def test_drain_finishes_short_calls_and_cuts_long_ones_at_the_grace():
    run = await run_drain()
    assert run.refused.code == grpc.StatusCode.UNAVAILABLE and "draining" in run.refused.details
    assert run.short.code == grpc.StatusCode.OK and run.short.of("turn_done")[0].audio_ms >= 950
    assert run.short_done_before_drain_returned  # the call that fits the grace finished inside it
    assert run.clean is False  # the long call did not fit
    assert run.drain_returned_s >= GRACE_S  # drain waited the grace for it before cutting
    assert run.long.code == grpc.StatusCode.UNAVAILABLE  # cut, and safe to retry elsewhere
    heard_ms = sum(f.duration_ms for _, f in run.long.audio() if not f.silence)
    assert 0 < heard_ms < LONG_AUDIO_MS  # cut mid-audio, not refused and not played out
    assert not run.long.of("turn_done")
    assert run.slots_after == 0
