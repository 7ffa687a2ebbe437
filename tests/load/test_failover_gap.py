"""Pod-kill and frozen-pod drills, load lane: what a caller with the client library hears at the seam. For every
call, the reported gap (the caller's media time from the old server's last frame to the new server's first) and
the wall time between the last speech frame from the old server and the first from the other stay within 1.5 s,
after `kill -9` and after SIGSTOP (the drills and their order checks: tests/reliability/test_failover_drill.py)."""

import signal

import pytest

from clients.client import Audio, Failover
from tests.reliability.test_failover_drill import heard_once, run_drill, tiny_voice_dir  # noqa: F401 (fixture)

GAP_BOUND_MS = 1500


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGSTOP], ids=["kill-9", "sigstop"])
async def test_gap_within_1_5_s(tiny_voice_dir, tmp_path, stop):  # noqa: F811
    on_victim, _, _, _ = await run_drill(tiny_voice_dir, tmp_path, stop)
    rows = []
    for call in on_victim:
        assert call.error is None, repr(call.error)
        fo_at = next(i for i, e in enumerate(call.events) if isinstance(e, Failover))
        fo = call.events[fo_at]
        last_old = [e for e in call.events[:fo_at] if isinstance(e, Audio) and not e.silence][-1]
        first_new = next(e for e in call.events[fo_at:] if isinstance(e, Audio) and not e.silence)
        wall_ms = (first_new.received_s - last_old.received_s) * 1000
        _, _, _, partly = heard_once(call)
        rows.append((fo.gap_ms, wall_ms, fo.attempts, partly, len(fo.heard_text), len(fo.resent_text)))
    for gap_ms, wall_ms, attempts, partly, heard, resent in rows:
        print(f"failover ({signal.Signals(stop).name}): gap {gap_ms} ms reported, {wall_ms:.0f} ms between speech "
              f"frames, {attempts} attempt(s), {partly} word(s) repeated, {heard} chars heard + {resent} resent")
    assert max(r[0] for r in rows) <= GAP_BOUND_MS, rows
    assert max(r[1] for r in rows) <= GAP_BOUND_MS, rows
