"""Speech edges by level: the onset, and the gate that silences the vocoder's edge burst after the last speech."""

from __future__ import annotations

import numpy as np

from models.speech_edges import EDGE_MS, GATE_CEILING_DBFS, GATE_DBFS, gate_tail, levels_dbfs, speech_end, speech_onset

SR = 24000


def ms(n: float) -> int:
    return round(SR * n / 1000)


def tone(duration_ms: float, dbfs: float, hz: float = 220.0) -> np.ndarray:
    t = np.arange(ms(duration_ms)) / SR
    return (np.sqrt(2) * 10 ** (dbfs / 20) * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def floor(duration_ms: float, dbfs: float = -75.0, seed: int = 0) -> np.ndarray:
    return (10 ** (dbfs / 20) * np.random.default_rng(seed).standard_normal(ms(duration_ms))).astype(np.float32)


def test_levels_read_rms_in_dbfs_per_window() -> None:
    levels = levels_dbfs(np.concatenate([tone(20, -20.0, hz=1000.0), np.zeros(ms(12), np.float32)]), SR)
    assert len(levels) == 7  # 32 ms in 5 ms windows, the partial last one included
    assert np.allclose(levels[:4], -20.0, atol=0.3)
    assert np.all(levels[4:] <= -119) and np.all(np.isfinite(levels))


def test_onset_is_the_first_window_at_speech_level() -> None:
    audio = np.concatenate([floor(300), tone(200, -25.0)])
    onset = speech_onset(audio, SR)
    assert onset is not None and abs(onset - ms(300)) <= ms(5)
    assert speech_onset(floor(300), SR) is None
    assert speech_onset(np.zeros(0, np.float32), SR) is None


def test_gate_silences_the_edge_burst_and_keeps_the_speech() -> None:
    speech = tone(300, -22.0)
    burst = tone(20, -38.0, hz=3000.0)
    chunk = np.concatenate([speech, floor(150), burst])
    gated = gate_tail(chunk, SR)
    end = speech_end(chunk, SR)
    assert ms(300) <= end <= ms(305)  # the tone's end (its last window), the floor below -60 right after
    assert np.array_equal(gated[:end], chunk[:end])  # speech untouched
    assert np.all(levels_dbfs(gated[end:], SR) < GATE_DBFS)
    assert levels_dbfs(gated[end:], SR).max() <= GATE_CEILING_DBFS + 0.1  # the burst went under the ceiling
    assert np.count_nonzero(gated[end + ms(10):]) > 0.99 * len(gated[end + ms(10):])  # attenuated, not zeroed
    assert levels_dbfs(chunk[-ms(20):], SR).max() > -40  # the burst was there
    assert len(gated) == len(chunk) and gated.dtype == np.float32


def test_a_decaying_tail_counts_as_speech_until_it_falls_below_the_gate_level() -> None:
    decay = np.concatenate([tone(10, dbfs, hz=220.0) for dbfs in (-30, -40, -48, -53, -57, -59)])
    chunk = np.concatenate([tone(200, -20.0), decay, floor(200), tone(15, -40.0, hz=2500.0)])
    end = speech_end(chunk, SR)
    assert ms(260) - ms(5) <= end <= ms(260) + ms(5)
    gated = gate_tail(chunk, SR)
    assert np.array_equal(gated[:end], chunk[:end])


def test_speech_up_to_the_end_is_not_gated() -> None:
    chunk = tone(400, -20.0)
    assert np.array_equal(gate_tail(chunk, SR), chunk)
    # a syllable that starts before the edge zone and runs into it is speech, however close to the end
    late = np.concatenate([tone(200, -20.0), floor(100), tone(EDGE_MS + 15, -30.0), floor(10)])
    assert np.array_equal(gate_tail(late, SR)[: len(late) - ms(10)], late[: len(late) - ms(10)])


def test_a_last_chunk_without_speech_is_gated_after_the_tail_it_starts_in() -> None:
    # the speech ended in an earlier chunk: this one starts in its tail, then silence, then the burst
    tail = np.concatenate([tone(10, -52.0), tone(10, -56.0)])
    chunk = np.concatenate([tail, floor(120), tone(20, -36.0, hz=3000.0)])
    end = speech_end(chunk, SR)
    assert ms(15) <= end <= ms(25)
    gated = gate_tail(chunk, SR)
    assert np.array_equal(gated[:end], chunk[:end])
    assert np.all(levels_dbfs(gated[end:], SR) < GATE_DBFS)
    silent = floor(200)
    assert np.all(levels_dbfs(gate_tail(np.concatenate([silent, tone(15, -40.0)]), SR), SR) < GATE_DBFS)


def test_band_limited_levels_hear_only_what_the_call_carries() -> None:
    low, high = tone(50, -30.0, hz=1000.0), tone(50, -30.0, hz=6000.0)
    assert np.allclose(levels_dbfs(low, SR, band_hz=4000), levels_dbfs(low, SR), atol=0.1)
    assert np.all(levels_dbfs(high, SR, band_hz=4000) < -60) and np.allclose(levels_dbfs(high, SR), -30.0, atol=0.3)
    # hiss first, voice 40 ms later: at 8 kHz speech starts with the voice
    audio = np.concatenate([floor(100), high[: ms(40)], low])
    assert speech_onset(audio, SR) == ms(100)
    assert speech_onset(audio, SR, band_hz=4000) == ms(140)
