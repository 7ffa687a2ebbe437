"""Overload at 2x capacity, timed on the client clock: refusals decided within 50 ms (p99), accepted calls keep
>= 99 % of chunks on time (DESIGN §6), health answers within 250 ms (p99)."""

from tests.reliability.conftest import SERVING, call_lateness, percentile
from tests.reliability.test_overload import CAPACITY, LANES, run_overload

DURATION_S = 8.0


async def test_twice_capacity_sheds_fast_and_keeps_accepted_calls_on_time():
    run = await run_overload(DURATION_S)
    assert not run.other, [(r.code, r.details) for r in run.other[:3]]
    assert len(run.accepted) >= CAPACITY and len(run.rejected) >= 4 * LANES
    assert run.peak_slots <= CAPACITY

    # (client clock, same process: on a box oversubscribed several times over, scheduling stalls can push
    # the tail past 50 ms; see docs/reliability.md). No refusal ever waits for capacity.
    reject_ms = [1000.0 * (r.ended_s - r.started_s) for r in run.rejected]
    assert percentile(reject_ms, 99) <= 50.0, f"p99 refusal {percentile(reject_ms, 99):.1f} ms"
    assert max(reject_ms) <= 250.0, f"slowest refusal {max(reject_ms):.1f} ms"

    counted = late = 0
    for r in run.accepted:
        assert len(r.of("turn_done")) == 1 and r.of("turn_done")[0].audio_ms >= 1900
        c, n = call_lateness(r)
        counted, late = counted + c, late + n
    on_time = 1.0 - late / counted
    assert on_time >= 0.99, f"{late} of {counted} chunks late"

    assert not run.health_errors, run.health_errors[:3]
    assert len(run.health) >= DURATION_S / 0.2
    assert all(status == SERVING for _, _, status in run.health)
    health_p99_s = percentile([lat for _, lat, _ in run.health], 99)
    assert health_p99_s < 0.25
    assert run.after == run.baseline
    print(f"\naccepted {len(run.accepted)}, refused {len(run.rejected)}, refusal p50/p95/p99/max "
          f"{percentile(reject_ms, 50):.1f}/{percentile(reject_ms, 95):.1f}/{percentile(reject_ms, 99):.1f}/"
          f"{max(reject_ms):.1f} ms, chunks on time {on_time:.4f}, health p99 {1000 * health_p99_s:.1f} ms")
