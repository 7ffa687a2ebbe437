"""A REALTIME canary call stays on time (>= 99 % of its chunks) while fuzzed hostile calls run beside it."""

from __future__ import annotations

import os
import time

from hypothesis import HealthCheck, given, settings

from tests.reliability.test_hostile_input import SEQUENCES, converse, hostile  # noqa: F401 (fixture)

EXAMPLES = int(os.environ.get("VOXPOOL_FUZZ_EXAMPLES", "200"))
MAX_LATE_FRACTION = 0.01


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(events=SEQUENCES)
def _fuzz_beside_the_canary(stub, events) -> None:
    converse(stub, events)  # the statuses are checked by tests/reliability/test_hostile_input.py


def test_canary_on_time_beside_fuzzed_calls(hostile):
    _, canary, stub, _ = hostile
    t0 = time.monotonic()
    _fuzz_beside_the_canary(stub)
    window = canary.completed_since(t0)
    counted = sum(c for _, c, _, _ in window)
    late = sum(n for _, _, n, _ in window)
    assert counted and late / counted <= MAX_LATE_FRACTION, f"canary: {late} of {counted} chunks late"
