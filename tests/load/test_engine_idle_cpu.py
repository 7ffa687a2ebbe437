"""CPU and wall time of the engine thread: an idle engine uses under 5 ms of CPU in 0.5 s, and wakes at once."""

import asyncio
import time

from engine import SynthesisRequest
from tests.engine.test_core import make


async def test_idle_engine_thread_uses_no_cpu_and_wakes_at_once() -> None:
    engine, _ = make()
    await engine.start()
    await engine.submit(SynthesisRequest("warm", [1], seed=1)).collect()
    await asyncio.sleep(0.05)
    clock = time.pthread_getcpuclockid(engine.backend.thread.ident)
    before = time.clock_gettime(clock)
    await asyncio.sleep(0.5)
    used = time.clock_gettime(clock) - before
    assert used < 0.005, f"idle engine thread used {used * 1000:.2f} ms of CPU in 0.5 s"
    t0 = time.perf_counter()
    await engine.submit(SynthesisRequest("wake", [1], seed=2)).collect()
    assert time.perf_counter() - t0 < 2.0
    await engine.stop()
