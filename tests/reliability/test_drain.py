"""Drain in process (the SIGTERM path with a real `voxpool serve` process is tests/service/test_drain.py): health
watchers see NOT_SERVING at once, new calls get UNAVAILABLE, calls that fit the grace finish, a call that does not
is cut with UNAVAILABLE when the grace runs out instead of holding the process."""

import asyncio
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.reliability.conftest import (
    NOT_SERVING, SERVING, channel_to, config_event, end_event, gateway_call, realtime_config, serving, stub,
    text_event,
)

GRACE_S = 2.0


async def test_drain_finishes_short_calls_and_cuts_long_ones_at_the_grace():
    # 40 steps = 1 s per segment: the short call has 1 s of audio, the long one 6 s (> the grace)
    async with serving() as server, channel_to(server.port) as ch:
        ts = stub(ch)
        health = health_pb2_grpc.HealthStub(ch)
        watch = health.Watch(health_pb2.HealthCheckRequest(service="voxpool.readiness"))
        assert (await watch.read()).status == SERVING

        short = asyncio.create_task(gateway_call(ts, realtime_config(), text_event("您好。"), end_event()))
        long = asyncio.create_task(gateway_call(ts, realtime_config(), text_event("这句话很长。" * 6), end_event()))
        while server.engine.counters().audio_samples == 0 or server.admission.active < 2:
            await asyncio.sleep(0.01)

        t0 = time.monotonic()
        drained = asyncio.create_task(server.drain(grace_s=GRACE_S))
        assert (await asyncio.wait_for(watch.read(), 1.0)).status == NOT_SERVING  # pushed to watchers at once
        assert time.monotonic() - t0 < 0.5
        refused = await gateway_call(ts, config_event(), end_event())
        assert refused.code == grpc.StatusCode.UNAVAILABLE and "draining" in refused.details

        short_rec = await short
        assert short_rec.code == grpc.StatusCode.OK and short_rec.of("turn_done")[0].audio_ms >= 950
        clean = await asyncio.wait_for(drained, GRACE_S + 3)
        took_s = time.monotonic() - t0
        long_rec = await asyncio.wait_for(long, 3)
        assert clean is False  # the long call did not fit
        assert GRACE_S <= took_s < GRACE_S + 1.5  # the process does not wait past the grace
        assert long_rec.code == grpc.StatusCode.UNAVAILABLE  # cut, and safe to retry elsewhere
        assert long_rec.audio()  # it was cut mid-audio, not refused
        assert server.admission.active == 0
