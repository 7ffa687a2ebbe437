"""Fades: linear ramps of the right length, identical whether applied at once or chunk by chunk."""

from __future__ import annotations

import numpy as np
import pytest

from service.audio import AudioFormatError
from service.audio.fade import FadeIn, FadeOut, fade_out_payload, fade_samples
from service.audio.g711 import decode, encode


def _chunks(fade, x: np.ndarray, sizes: list[int]) -> np.ndarray:
    out, i, k = [], 0, 0
    while i < len(x):
        n = sizes[k % len(sizes)]
        out.append(fade.apply(x[i : i + n]))
        i += n
        k += 1
    return np.concatenate(out)


def test_fade_in_is_a_linear_ramp_then_unity() -> None:
    fade = FadeIn(8000, 5)  # 40 samples
    assert fade.length_samples == 40
    y = fade.apply(np.ones(100, dtype=np.float32))
    assert y[0] == 0.0
    assert np.allclose(y[:40], np.arange(40) / 40.0)
    assert np.all(y[40:] == 1.0)
    assert fade.done
    assert np.all(np.diff(y) <= 1.0 / 40 + 1e-7)  # no step larger than one ramp increment


def test_fade_out_reaches_zero_and_stays_silent() -> None:
    fade = FadeOut(16000, 5)  # 80 samples
    y = fade.apply(np.full(200, 0.5, dtype=np.float32))
    assert y[0] == pytest.approx(0.5 * (1 - 1 / 80))
    assert y[79] == 0.0 and np.all(y[80:] == 0.0)
    assert np.all(np.diff(y[:80]) < 0)


@pytest.mark.parametrize("cls", [FadeIn, FadeOut])
def test_chunked_equals_one_shot(cls) -> None:
    x = np.random.default_rng(0).uniform(-1, 1, 600).astype(np.float32)
    one = cls(24000, 10).apply(x)  # 240-sample ramp
    chunked = _chunks(cls(24000, 10), x, [1, 17, 0, 100, 3, 250])
    assert np.array_equal(one, chunked)


def test_reset_restarts_the_ramp_and_input_is_untouched() -> None:
    fade = FadeIn(8000, 5)
    x = np.ones(50, dtype=np.float32)
    fade.apply(x)
    assert np.all(x == 1.0)
    fade.reset()
    assert fade.apply(x)[0] == 0.0


def test_zero_length_fades() -> None:
    x = np.full(10, 0.3, dtype=np.float32)
    assert np.array_equal(FadeIn(8000, 0).apply(x), x)
    assert np.all(FadeOut(8000, 0).apply(x) == 0.0)


def test_fade_out_payload_fades_an_encoded_frame() -> None:
    t = np.arange(160) / 8000
    frame = encode((0.5 * np.sin(2 * np.pi * 300 * t + 1.0)).astype(np.float32), "PCMU")
    faded = fade_out_payload(frame, "PCMU", 8000, 5)
    assert len(faded) == 160
    assert faded[40:] == b"\xff" * 120  # silent after 5 ms
    y, x = decode(faded, "PCMU"), decode(frame, "PCMU")
    gain = 1 - (np.arange(40) + 1) / 40
    assert np.all(np.abs(y[:40] - x[:40] * gain) <= np.abs(x[:40] * gain) / 16 + 1e-3)
    l16 = encode(np.full(320, 0.25, dtype=np.float32), "L16")
    assert fade_out_payload(l16, "L16", 16000, 10)[320:] == b"\x00" * 320


@pytest.mark.parametrize("fade_ms", [-1, 51, "5", True])
def test_rejects_bad_lengths(fade_ms) -> None:
    with pytest.raises(AudioFormatError):
        fade_samples(8000, fade_ms)
