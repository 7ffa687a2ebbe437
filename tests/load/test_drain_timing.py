"""Drain timing on the client clock: watchers hear NOT_SERVING within 0.5 s; drain() returns within the grace + 1.5 s."""

from tests.reliability.test_drain import GRACE_S, run_drain


async def test_drain_is_prompt_and_never_waits_past_the_grace():
    run = await run_drain()
    assert run.watch_not_serving_s < 0.5, f"NOT_SERVING pushed after {run.watch_not_serving_s:.3f} s"
    assert GRACE_S <= run.drain_returned_s < GRACE_S + 1.5, f"drain() took {run.drain_returned_s:.2f} s"
    assert run.clean is False
