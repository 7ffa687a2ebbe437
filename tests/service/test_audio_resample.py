"""StreamResampler: chunked output equals one-shot, and content above the output Nyquist is removed."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from service.audio import AudioFormatError
from service.audio.resample import StreamResampler

FS_IN = 24000


def _chunked(resampler: StreamResampler, x: np.ndarray, sizes: list[int]) -> np.ndarray:
    out, i, k = [], 0, 0
    while i < len(x):
        n = sizes[k % len(sizes)]
        out.append(resampler.push(x[i : i + n]))
        i += n
        k += 1
    out.append(resampler.flush())
    return np.concatenate(out)


def _speechlike(seconds: float = 1.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(FS_IN * seconds)) / FS_IN
    x = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 1370 * t) + 0.05 * rng.standard_normal(t.size)
    return x.astype(np.float32)


@pytest.mark.parametrize("out_rate", [8000, 16000])
def test_chunked_equals_one_shot(out_rate: int) -> None:
    x = _speechlike()
    one = StreamResampler(FS_IN, out_rate)
    ref = np.concatenate([one.push(x), one.flush()])
    rng = np.random.default_rng(1)
    sizes = [int(s) for s in rng.integers(1, 1500, size=50)] + [0, 1, 7, 300]
    chunked = _chunked(StreamResampler(FS_IN, out_rate), x, sizes)
    assert chunked.shape == ref.shape == (len(x) * out_rate // FS_IN,)
    assert chunked.dtype == np.float32
    assert np.max(np.abs(chunked - ref)) < 1e-5  # no clicks at chunk boundaries
    library = soxr.resample(x, FS_IN, out_rate, quality="HQ")
    assert np.max(np.abs(chunked - library)) < 1e-5


def test_chunked_output_has_no_boundary_discontinuity() -> None:
    t = np.arange(FS_IN) / FS_IN
    x = (0.5 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    y = _chunked(StreamResampler(FS_IN, 8000), x, [240])  # 10 ms engine chunks
    # a 300 Hz tone at 0.5 moves at most 2π·300·0.5/8000 ≈ 0.118 per output sample
    assert np.max(np.abs(np.diff(y[50:-50]))) < 0.125


def _logsweep(f0: float, f1: float, seconds: float = 2.0) -> np.ndarray:
    t = np.arange(int(FS_IN * seconds)) / FS_IN
    k = np.log(f1 / f0)
    return (0.5 * np.sin(2 * np.pi * f0 * seconds / k * (np.exp(t / seconds * k) - 1))).astype(np.float32)


def _energy_db(y: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(y.astype(np.float64) * np.hanning(len(y)))) ** 2
    return float(10 * np.log10(spectrum.sum() + 1e-30))


def _peak_db(y: np.ndarray) -> float:
    return float(20 * np.log10(np.abs(np.fft.rfft(y.astype(np.float64) * np.hanning(len(y)))).max() + 1e-30))


def _to_8k(x: np.ndarray) -> np.ndarray:
    return _chunked(StreamResampler(FS_IN, 8000), x, [480])


def test_sweep_above_output_nyquist_is_attenuated_40_db() -> None:
    in_band = _energy_db(_to_8k(_logsweep(100, 3400)))
    aliased = _energy_db(_to_8k(_logsweep(4400, 11900)))  # all above 4 kHz: nothing should fold back
    assert aliased - in_band <= -40.0


def test_tone_above_output_nyquist_is_attenuated_40_db() -> None:
    t = np.arange(FS_IN) / FS_IN
    ref = _peak_db(_to_8k((0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)))
    for f_hz in (5000, 7000, 9000):
        out = _peak_db(_to_8k((0.5 * np.sin(2 * np.pi * f_hz * t)).astype(np.float32)))
        assert out - ref <= -40.0, f"{f_hz} Hz folds back at {out - ref:.1f} dB"


def test_naive_decimation_fails_the_same_criterion() -> None:
    # the measure above discriminates: picking every third sample folds 5 kHz to 3 kHz at full level
    t = np.arange(FS_IN) / FS_IN
    ref = _peak_db((0.5 * np.sin(2 * np.pi * 1000 * t))[::3])
    out = _peak_db((0.5 * np.sin(2 * np.pi * 5000 * t))[::3])
    assert out - ref > -3.0


def test_identity_and_errors() -> None:
    r = StreamResampler(8000, 8000)
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    assert r.identity and np.array_equal(r.push(x), x) and r.flush().size == 0
    with pytest.raises(AudioFormatError):
        StreamResampler(0, 8000)
    with pytest.raises(AudioFormatError):
        StreamResampler(24000, 8000, quality="best")
    r = StreamResampler(24000, 8000)
    with pytest.raises(AudioFormatError):
        r.push(np.zeros((10, 2), dtype=np.float32))
    with pytest.raises(AudioFormatError):
        r.push(np.zeros(10, dtype=np.int16))
    r.push(np.zeros(2400, dtype=np.float32))
    r.flush()
    with pytest.raises(AudioFormatError):
        r.push(np.zeros(10, dtype=np.float32))
    r.reset()
    total = np.concatenate([r.push(np.zeros(2400, dtype=np.float32)), r.flush()])
    assert total.size == 800
