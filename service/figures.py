"""The derived figures of a turn (chunk lateness, TTFA, on-time): one definition that events, log line and metrics read."""

from __future__ import annotations

LATE_CHUNK_S = 1e-3  # a chunk later than this (clock-reading noise aside) is late


def chunk_lateness_s(arrival_s: float, first_arrival_s: float, received_before_s: float) -> float:
    """Chunk i is on time iff t_i <= t1 + sum(C_k); this is t_i - (t1 + sum(C_k)), in seconds."""
    return arrival_s - first_arrival_s - received_before_s


def is_late(lateness_s: float) -> bool:
    """True when a chunk arrived after the audio received before it had played out."""
    return lateness_s > LATE_CHUNK_S


def ttfa_ms(trigger_s: float | None, first_audio_s: float | None) -> float | None:
    """Time to first audio: from the moment the turn's first segment became synthesizable to the release of its
    first non-silence frame (None while either is unknown)."""
    if trigger_s is None or first_audio_s is None:
        return None
    return max(0.0, (first_audio_s - trigger_s) * 1000.0)


def ttfs_ms(ttfa_ms: float | None, first_audio_pts_ms: float | None, first_speech_pts_ms: float | None
            ) -> float | None:
    """Time to first speech: TTFA plus the media time from the first non-silence frame's start to the first sample
    of speech, i.e. when the caller starts to hear speech if playback starts at the first frame's release (None
    while unknown or when the turn released no speech)."""
    if ttfa_ms is None or first_audio_pts_ms is None or first_speech_pts_ms is None:
        return None
    return ttfa_ms + max(0.0, first_speech_pts_ms - first_audio_pts_ms)


def on_time_fraction(chunks: int, late_chunks: int, underruns: int) -> float | None:
    """Share of a turn's audio that arrived in time: each underrun (the gateway played a gap) counts as one more
    late chunk, as the client-side measure counts a silence frame between speech (None without chunks)."""
    if chunks <= 0:
        return None
    return max(0.0, 1.0 - (late_chunks + underruns) / (chunks + underruns))


def fully_on_time(chunks: int, late_chunks: int, underruns: int) -> bool:
    """A turn is fully on time when it had audio, no late chunk and no underrun fill."""
    return chunks > 0 and late_chunks == 0 and underruns == 0
