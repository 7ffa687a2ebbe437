"""Barge-in timing on the client clock: `cleared` within 100 ms of Clear, at most 2 frames after, queued audio dropped."""

from tests.service.test_converse_paths import clear_mid_turn


async def test_clear_is_answered_within_a_few_frame_periods(tiny_server):
    received, t_clear = await clear_mid_turn(tiny_server)
    t_cleared = next(t for t, e in received if e.HasField("cleared"))
    assert t_cleared - t_clear < 0.1  # answered within a few frame periods
    late_audio = [e.audio for t, e in received if t > t_clear and e.HasField("audio")]
    # only the fade-out frame (and at most one frame already being written) after the clear
    assert 1 <= len(late_audio) <= 2, [a.seq for a in late_audio]
    cleared = next(e.cleared for _, e in received if e.HasField("cleared"))
    assert cleared.dropped_audio_ms > 0  # synthesis ran ahead of playback: queued audio was dropped, not played
