"""Where speech starts and ends in a segment's audio, by level: the onset a turn's audio starts from, and the gate
that quiets what the vocoder makes after the last speech (MB-MelGAN answers the mel's abrupt end with a short
burst of noise, tens of ms after the speech has died away).

Levels are RMS over windows of WINDOW_MS at the voice's rate, in dB relative to full scale (1.0). Only numpy: the
service (onset) and the engine (gate) both call it.
"""

from __future__ import annotations

import numpy as np

WINDOW_MS = 5
# Speech: a window at or above SPEECH_DBFS. The model's silence lies at -65 to -85 dBFS (its loudest windows near
# -60), speech syllables at -15 to -40 and their quiet consonant starts rise through -50 within a few windows.
SPEECH_DBFS = -50.0
# Silence: below GATE_DBFS. A speech tail counts as speech until its level falls below this.
GATE_DBFS = -60.0
# A run of speech windows lying wholly within the last EDGE_MS of an utterance's audio is the vocoder's edge burst,
# not speech: the engine trims the decoder's quiet frames at the end, so real speech ends at least the vocoder's
# look-ahead (well over EDGE_MS) before the audio does.
EDGE_MS = 60
GATE_FADE_MS = 5  # the linear fade into the gated part (the signal is already below GATE_DBFS there)
# The gated part is attenuated, not zeroed: by at least GATE_DEPTH_DB, and so that its loudest window ends at or
# below GATE_CEILING_DBFS. Digital zeros after the speech cost 0.06 mean DNSMOS OVRL over the ten quality sentences
# (the model's quiet floor, 40 dB down, costs nothing measurable), measured on one streamed rendering of them.
GATE_DEPTH_DB = 40.0
GATE_CEILING_DBFS = -66.0
_FLOOR_POWER = 1e-12  # keeps log10 finite on digital silence (-120 dBFS)


def window_samples(sample_rate_hz: int) -> int:
    """Samples of one level window at `sample_rate_hz`."""
    return max(1, round(sample_rate_hz * WINDOW_MS / 1000))


def levels_dbfs(samples: np.ndarray, sample_rate_hz: int, band_hz: float | None = None) -> np.ndarray:
    """RMS level of each WINDOW_MS window of float samples [N] (a last partial window included), in dBFS.
    `band_hz`: only what lies at or below this frequency counts (what a call at a lower rate carries: an
    affricate's hiss above 4 kHz is not heard at 8 kHz); None: the whole band."""
    x = np.asarray(samples, np.float32).reshape(-1)
    w = window_samples(sample_rate_hz)
    n = -(-len(x) // w)
    if n == 0:
        return np.zeros(0, np.float32)
    padded = np.zeros(n * w, np.float32)
    padded[: len(x)] = x
    frames = padded.reshape(n, w).astype(np.float64)
    top_bin = w // 2 if band_hz is None else min(w // 2, int(band_hz * w // sample_rate_hz))
    if top_bin >= w // 2:
        power = np.square(frames).sum(axis=1)
    else:  # Parseval over the window's bins up to band_hz (DC once, the others for both signs), Hann-tapered so
        # that a loud band above does not leak into the bins below; divided by the taper's own power
        taper = np.hanning(w + 2)[1:-1]
        spectrum = np.square(np.abs(np.fft.rfft(frames * taper, axis=1)[:, : top_bin + 1]))
        power = (spectrum[:, 0] + 2.0 * spectrum[:, 1:].sum(axis=1)) / w / float(np.mean(np.square(taper)))
    counts = np.full(n, w, np.float64)
    counts[-1] = len(x) - (n - 1) * w
    return (10.0 * np.log10(power / counts + _FLOOR_POWER)).astype(np.float32)


def speech_onset(samples: np.ndarray, sample_rate_hz: int, band_hz: float | None = None) -> int | None:
    """First sample of the first window at or above SPEECH_DBFS, in the band up to `band_hz` (None: no speech in
    `samples`)."""
    hits = np.flatnonzero(levels_dbfs(samples, sample_rate_hz, band_hz) >= SPEECH_DBFS)
    return int(hits[0]) * window_samples(sample_rate_hz) if hits.size else None


def speech_end(samples: np.ndarray, sample_rate_hz: int) -> int:
    """Where the speech of an utterance's last chunk has died away: the end of its last speech run (a run wholly in
    the last EDGE_MS is the edge burst, not speech), followed while the level stays at or above GATE_DBFS. From the
    chunk's start when it holds no speech run (the speech ended in an earlier chunk: only its tail is followed)."""
    levels = levels_dbfs(samples, sample_rate_hz)
    w = window_samples(sample_rate_hz)
    n = len(levels)
    edge_start = n - -(-EDGE_MS // WINDOW_MS)
    end = 0
    i = 0
    while i < n:
        if levels[i] < SPEECH_DBFS:
            i += 1
            continue
        j = i
        while j < n and levels[j] >= SPEECH_DBFS:
            j += 1
        if i < edge_start:  # a run that starts before the edge zone is speech
            end = j
        i = j
    while end < n and levels[end] >= GATE_DBFS:
        end += 1
    return min(len(samples), end * w)


def gate_tail(samples: np.ndarray, sample_rate_hz: int) -> np.ndarray:
    """An utterance's last chunk with everything after `speech_end` attenuated (GATE_DEPTH_DB or more, the loudest
    window to GATE_CEILING_DBFS), through a GATE_FADE_MS fade. Returns a new array (float32); the speech before that
    point is untouched."""
    out = np.array(samples, np.float32).reshape(-1)
    start = speech_end(out, sample_rate_hz)
    if start >= len(out):
        return out
    loudest_dbfs = float(levels_dbfs(out[start:], sample_rate_hz).max())
    gain = np.float32(10.0 ** (min(-GATE_DEPTH_DB, GATE_CEILING_DBFS - loudest_dbfs) / 20.0))
    fade = min(len(out) - start, max(1, round(sample_rate_hz * GATE_FADE_MS / 1000)))
    out[start: start + fade] *= np.linspace(1.0, gain, fade + 1, dtype=np.float32)[1:]
    out[start + fade:] *= gain
    return out
