"""The engine's heartbeat: loop turns counted, and how long the loop has owed progress (0 while idle or waiting)."""

from __future__ import annotations

import asyncio
import threading

from engine import AsyncEngine, EngineConfig, SynthesisRequest
from engine.core import EngineCore
from engine.request import now_s
from tests.engine.fakes import FakeRunner


class StuckDecoder(FakeRunner):
    """Decoder calls block while `stuck` is set, until `go` is set (the engine thread hangs in a batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.stuck = False
        self.entered = threading.Event()
        self.go = threading.Event()

    def decode(self, slots, steps, dropout):
        if self.stuck:
            self.entered.set()
            self.go.wait()
        return super().decode(slots, steps, dropout)


async def test_idle_engine_owes_nothing_and_a_stuck_batch_owes_more_and_more() -> None:
    runner = StuckDecoder()
    core = EngineCore(EngineConfig(voices=("fake",), max_slots=4, max_waiting=4), {"fake": runner})
    engine = AsyncEngine(core)
    await engine.start()
    try:
        assert core.stalled_for_s() == 0.0 and core.stalled_for_s(now_s() + 3600) == 0.0  # idle: owes nothing
        before = core.loop_turns
        await engine.submit(SynthesisRequest("ok", [3] * 4, seed=1)).collect()
        assert core.loop_turns > before  # served work turned the loop
        assert core.stalled_for_s(now_s() + 3600) == 0.0  # and once it ended, nothing is owed again

        runner.stuck = True
        stream = engine.submit(SynthesisRequest("stuck", [3] * 4, seed=2))
        await asyncio.get_running_loop().run_in_executor(None, runner.entered.wait, 10)
        turns = core.loop_turns
        t = now_s()
        assert core.stalled_for_s(t + 10) >= 10 > core.stalled_for_s(t)
        assert core.loop_turns == turns  # no turn finished while stuck

        runner.stuck = False
        runner.go.set()
        _, _, final = await stream.collect()
        assert final.error is None and core.loop_turns > turns
        assert core.stalled_for_s(now_s() + 3600) == 0.0
    finally:
        runner.go.set()
        assert await engine.drain(5.0)
