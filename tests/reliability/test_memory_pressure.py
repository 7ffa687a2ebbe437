"""Memory pressure: a call that cannot start a thread ends with a retryable UNAVAILABLE (not INTERNAL), and readiness
turns NOT_SERVING while allocations fail (in a call or in an engine batch) and SERVING again once they work."""

import asyncio
import errno

import grpc

from engine.errors import RequestFailed, is_allocation_failure
from service.errors import status_for
from service.health import SERVING
from service.pressure import AllocationWatch
from tests.reliability.conftest import (NOT_SERVING, channel_to, end_event, gateway_call, health_status,
                                        realtime_config, serving, stub, text_event)

READINESS = "voxpool.readiness"


async def readiness_becomes(port: int, status: int, guard_s: float = 10.0) -> None:
    """Poll readiness until it reports `status` (the guard only catches a hang)."""
    async with asyncio.timeout(guard_s):
        while await health_status(port, READINESS) != status:
            await asyncio.sleep(0.05)


def test_allocation_failures_are_recognised_through_the_cause_chain():
    assert is_allocation_failure(RuntimeError("can't start new thread"))
    assert is_allocation_failure(MemoryError())
    assert is_allocation_failure(OSError(errno.ENOMEM, "Cannot allocate memory"))
    assert is_allocation_failure(RequestFailed("vocode failed", cause=RuntimeError(
        "could not create a primitive")))  # oneDNN under an address-space limit
    assert not is_allocation_failure(RuntimeError("shape mismatch"))
    assert not is_allocation_failure(RequestFailed("encode failed", cause=ValueError("bad ids")))
    code, message = status_for(RuntimeError("can't start new thread"))
    assert code == grpc.StatusCode.UNAVAILABLE and "out of memory" in message and "another server" in message
    assert status_for(RuntimeError("shape mismatch")) == (grpc.StatusCode.INTERNAL, "internal error")


async def test_watch_turns_readiness_off_on_failure_and_on_after_a_working_probe():
    now = [0.0]
    probe_ok = [False]
    published = []

    async def set_failing(failing: bool) -> None:
        published.append(failing)

    watch = AllocationWatch(set_failing, recover_after_s=1.0, probe=lambda: probe_ok[0], clock=lambda: now[0])
    await watch.check(0)
    assert published == []
    await watch.check(1)  # the engine counted a failed allocation
    assert published == [True]
    now[0] = 0.5
    probe_ok[0] = True
    await watch.check(1)  # too soon after the failure
    now[0] = 2.0
    probe_ok[0] = False
    await watch.check(1)  # the probe still fails
    assert published == [True]
    probe_ok[0] = True
    await watch.check(1)
    assert published == [True, False]
    watch.observe(RuntimeError("can't start new thread"))  # a call's failure counts as well
    await watch.check(1)
    assert published == [True, False, True]


async def test_call_that_cannot_start_a_thread_is_retryable_and_readiness_follows():
    async with serving() as server, channel_to(server.port) as ch:
        ts = stub(ch)
        real_submit = server.executor.submit

        def no_thread(*args, **kwargs):
            raise RuntimeError("can't start new thread")

        server.executor.submit = no_thread
        try:
            rec = await gateway_call(ts, realtime_config(), text_event("您好。"), end_event(), timeout_s=30)
            assert rec.code == grpc.StatusCode.UNAVAILABLE, (rec.code, rec.details)
            assert "out of memory" in rec.details
            await readiness_becomes(server.port, NOT_SERVING)
            assert await health_status(server.port, "voxpool.liveness") == SERVING  # no restart needed
        finally:
            server.executor.submit = real_submit
        await readiness_becomes(server.port, SERVING)
        rec = await gateway_call(ts, realtime_config(), text_event("您好。"), end_event(), timeout_s=30)
        assert rec.code == grpc.StatusCode.OK and rec.of("turn_done")


async def test_engine_batch_that_cannot_allocate_takes_readiness_off_until_it_works():
    async with serving(faulty=True) as server, channel_to(server.port) as ch:
        ts = stub(ch)
        runner = server.engine.backend.runners["tiny"]
        runner.arm("vocode", MemoryError("injected: cannot allocate"))
        rec = await gateway_call(ts, realtime_config(), text_event("您好。"), end_event(), timeout_s=30)
        assert rec.code == grpc.StatusCode.OK and rec.of("error")  # the turn failed in-band, the call went on
        assert server.engine.counters().allocation_failures == 1
        await readiness_becomes(server.port, NOT_SERVING)
        await readiness_becomes(server.port, SERVING)  # the fault fired once: the probe works, nothing fails
        rec = await gateway_call(ts, realtime_config(), text_event("您好。"), end_event(), timeout_s=30)
        assert rec.code == grpc.StatusCode.OK and rec.of("turn_done")


def test_a_would_block_error_is_not_an_allocation_failure():
    assert not is_allocation_failure(BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable"))
