"""Overload at 2x capacity: excess calls refused before any work with a retry delay, accepted calls complete, health
answers SERVING, state released. (Refusal latency, chunk on-time fraction and health latency: tests/load/.)"""

import asyncio
import time
from dataclasses import dataclass, field

import grpc

from tests.reliability.conftest import (
    SERVING, HealthPoller, Received, channel_to, end_event, gateway_call, realtime_config, serving, settled, stub,
    text_event, tracked_state,
)

CAPACITY = 4  # server.max_calls: the stream slots S of this test server
LANES = 2 * CAPACITY  # clients that each keep one call open (or retry): offered load 2 S
TEXT = "您好，这里是语音服务。请稍候，我们正在为您查询。"  # 2 segments x 1 s of audio (tiny voice, 40 steps)


@dataclass
class OverloadRun:
    """What LANES clients saw while keeping 2x capacity offered for `duration_s` (client clock stamps in Received)."""

    accepted: list[Received] = field(default_factory=list)
    rejected: list[Received] = field(default_factory=list)
    other: list[Received] = field(default_factory=list)
    peak_slots: int = 0
    health: list[tuple[str, float, int]] = field(default_factory=list)
    health_errors: list[str] = field(default_factory=list)
    baseline: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)


async def run_overload(duration_s: float) -> OverloadRun:
    """LANES gateway-style clients against CAPACITY call slots for `duration_s`, health polled every 100 ms."""
    out = OverloadRun()
    async with serving({"server": {"max_calls": CAPACITY, "retry_after_ms": 500}}) as server:
        out.baseline = tracked_state(server)

        async def lane(ts):
            end = time.monotonic() + duration_s
            while time.monotonic() < end:
                rec = await gateway_call(ts, realtime_config(), text_event(TEXT), end_event())
                out.peak_slots = max(out.peak_slots, server.admission.active)
                if rec.code == grpc.StatusCode.OK:
                    out.accepted.append(rec)
                elif rec.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    out.rejected.append(rec)
                    await asyncio.sleep(0.05)  # keep the pressure on (a real client would honour the pushback)
                else:
                    out.other.append(rec)

        async with channel_to(server.port) as ch:
            with HealthPoller(server.port) as health:
                ts = stub(ch)
                await asyncio.gather(*(lane(ts) for _ in range(LANES)))
        out.health, out.health_errors = health.results, health.errors
        out.after = await settled(server, out.baseline)
    return out


async def test_twice_capacity_refuses_excess_before_work_and_completes_accepted_calls():
    run = await run_overload(duration_s=3.0)
    assert not run.other, [(r.code, r.details) for r in run.other[:3]]
    assert len(run.accepted) >= CAPACITY and run.rejected  # 8 lanes on 4 slots: someone was refused
    assert run.peak_slots <= CAPACITY
    for r in run.rejected:
        assert not r.events and "call slots are busy" in r.details  # refused before any work or audio
        assert 250 <= int(r.trailers["grpc-retry-pushback-ms"]) <= 750  # 500 ms jittered +-50 %
    for r in run.accepted:  # every accepted call complete: both segments spoken
        assert len(r.of("turn_done")) == 1 and r.of("turn_done")[0].audio_ms >= 1900
    assert not run.health_errors, run.health_errors[:3]
    assert run.health and all(status == SERVING for _, _, status in run.health)
    assert run.after == run.baseline
