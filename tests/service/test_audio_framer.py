"""Framer: exact frame sizes for every encoding × rate × frame length, remainder kept, padding, round trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.audio import AudioFormatError
from service.audio.framer import Framer, frame_bytes, silence_frame
from service.audio.g711 import Encoding, decode

ENCODINGS = ["PCMU", "PCMA", "L16"]
RATES = [8000, 16000, 24000]
FRAMES_MS = [10, 20, 30, 60]


def test_telephony_byte_counts() -> None:
    assert frame_bytes(8000, 20, "PCMU") == 160
    assert frame_bytes(8000, 20, "PCMA") == 160
    assert frame_bytes(16000, 20, "PCMU") == 320
    assert frame_bytes(8000, 20, "L16") == 320
    assert frame_bytes(16000, 20, "L16") == 640
    assert frame_bytes(24000, 20, "L16") == 960
    assert frame_bytes(8000, 10, "PCMU") == 80 and frame_bytes(8000, 60, "PCMU") == 480


def _signal(n: int, rate: int) -> np.ndarray:
    t = np.arange(n) / rate
    return (0.4 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 1210 * t)).astype(np.float32)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("frame_ms", FRAMES_MS)
def test_exact_frames_and_round_trip(encoding: str, rate: int, frame_ms: int) -> None:
    framer = Framer(rate, frame_ms, encoding)
    bps = 2 if encoding == "L16" else 1
    expected_bytes = rate * frame_ms // 1000 * bps
    assert framer.frame_bytes == expected_bytes
    n = rate * 1050 // 1000  # 1.05 s: rarely a whole number of frames
    x = _signal(n, rate)
    rng = np.random.default_rng(rate + frame_ms)
    frames: list[bytes] = []
    i = 0
    while i < n:
        step = int(rng.integers(0, 700))
        frames += framer.push(x[i : i + step])
        i += step
    n_whole, rest = divmod(n, framer.frame_samples)
    assert len(frames) == n_whole
    assert framer.pending_samples == rest
    tail = framer.flush(pad=True)
    assert len(tail) == (1 if rest else 0)
    frames += tail
    assert all(len(f) == expected_bytes for f in frames)
    assert framer.pending_samples == 0 and framer.flush() == []
    y = decode(b"".join(frames), encoding)
    assert y.size == len(frames) * framer.frame_samples
    err = np.abs(y[:n] - x)
    if encoding == "L16":
        assert err.max() <= 1.0 / 32768  # half an LSB after rounding, at most one LSB
    else:
        assert np.all(err <= np.abs(x) / 32 + 9.0 / 32768)  # within G.711 quantization
    if rest:  # the padding is digital silence of the encoding
        pad = frames[-1][rest * bps :]
        assert pad == Encoding(encoding).silence_sample * (framer.frame_samples - rest)


@pytest.mark.parametrize("encoding,byte", [("PCMU", b"\xff"), ("PCMA", b"\xd5"), ("L16", b"\x00")])
def test_silence_frame_bytes(encoding: str, byte: bytes) -> None:
    for rate in RATES:
        frame = silence_frame(rate, 20, encoding)
        assert frame == byte * frame_bytes(rate, 20, encoding)
        framer = Framer(rate, 20, encoding)
        assert framer.push(np.zeros(framer.frame_samples, dtype=np.float32)) == [frame]


def test_flush_without_padding_and_reset() -> None:
    framer = Framer(8000, 20, "PCMU")
    assert framer.push(np.zeros(100, dtype=np.float32)) == []
    assert [len(f) for f in framer.flush(pad=False)] == [100]
    framer.push(np.zeros(150, dtype=np.float32))
    assert framer.reset() == 150
    assert framer.pending_samples == 0 and framer.flush() == []
    l16 = Framer(16000, 10, "L16")
    l16.push(np.zeros(33, dtype=np.float32))
    assert [len(f) for f in l16.flush(pad=False)] == [66]


def test_frames_are_cut_at_sample_boundaries_across_pushes() -> None:
    framer = Framer(8000, 10, "L16")
    x = (np.arange(200, dtype=np.float64) / 32768.0).astype(np.float32)  # sample i encodes as int16 i
    frames = framer.push(x[:37]) + framer.push(x[37:121]) + framer.push(x[121:])
    pcm = np.frombuffer(b"".join(frames), dtype="<i2")
    assert len(frames) == 2 and pcm.tolist() == list(range(160))
    assert framer.pending_samples == 40


@pytest.mark.parametrize(
    "rate,frame_ms,encoding",
    [(44100, 20, "PCMU"), (8000, 5, "PCMU"), (8000, 70, "PCMU"), (8000, 20.5, "PCMU"), (8000, 20, "opus"), (True, 20, "L16")],
)
def test_rejects_unsupported_formats(rate, frame_ms, encoding) -> None:
    with pytest.raises(AudioFormatError):
        Framer(rate, frame_ms, encoding)


def test_rejects_multichannel_input() -> None:
    with pytest.raises(AudioFormatError):
        Framer(8000, 20, "PCMU").push(np.zeros((160, 2), dtype=np.float32))


@settings(max_examples=60, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=0, max_value=900), min_size=1, max_size=12),
    encoding=st.sampled_from(ENCODINGS),
    frame_ms=st.sampled_from(FRAMES_MS),
)
def test_any_chunking_gives_the_same_bytes(cuts: list[int], encoding: str, frame_ms: int) -> None:
    x = _signal(sum(cuts), 16000)
    one = Framer(16000, frame_ms, encoding)
    ref = one.push(x) + one.flush()
    chunked = Framer(16000, frame_ms, encoding)
    out, i = [], 0
    for n in cuts:
        out += chunked.push(x[i : i + n])
        i += n
    out += chunked.flush()
    assert out == ref
