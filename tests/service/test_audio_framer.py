"""Framer: exact frame sizes for every offered encoding × rate × frame length, remainder kept, padding, round trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.audio import AudioFormatError
from service.audio.framer import Framer, frame_bytes, silence_frame
from service.audio.g711 import Encoding, decode
from protos.voxpool.v1 import wire

ENCODINGS = ["PCMU", "PCMA", "L16"]
FRAMES_MS = [10, 20, 30, 40, 60]
# every (encoding, rate) the API offers: G.711 at 8 kHz only, L16 at every rate
PAIRS = [(e, r) for e in ENCODINGS for r in wire.SAMPLE_RATES_HZ if e == "L16" or r == wire.G711_SAMPLE_RATE_HZ]
FORMATS = [(e, r, ms) for e, r in PAIRS for ms in wire.frame_ms_choices(r) if ms in FRAMES_MS]


def test_telephony_byte_counts() -> None:
    assert frame_bytes(8000, 20, "PCMU") == 160
    assert frame_bytes(8000, 20, "PCMA") == 160
    assert frame_bytes(8000, 20, "L16") == 320
    assert frame_bytes(16000, 20, "L16") == 640
    assert frame_bytes(24000, 20, "L16") == 960
    assert frame_bytes(8000, 10, "PCMU") == 80 and frame_bytes(8000, 60, "PCMU") == 480


def test_wideband_byte_counts() -> None:
    assert frame_bytes(11025, 40, "L16") == 882
    assert frame_bytes(22050, 20, "L16") == 882
    assert frame_bytes(32000, 20, "L16") == 1280
    assert frame_bytes(44100, 10, "L16") == 882
    assert frame_bytes(48000, 20, "L16") == 1920


def test_frame_lengths_hold_whole_samples_at_every_rate() -> None:
    for rate in wire.SAMPLE_RATES_HZ:
        choices = wire.frame_ms_choices(rate)
        assert choices and all(rate * ms % 1000 == 0 and ms % 10 == 0 and 10 <= ms <= 60 for ms in choices)
        assert wire.fitting_frame_ms(rate) in choices
    assert wire.frame_ms_choices(11025) == (40,) and wire.frame_ms_choices(22050) == (20, 40, 60)
    assert wire.frame_ms_choices(48000) == (10, 20, 30, 40, 50, 60)


def _signal(n: int, rate: int) -> np.ndarray:
    t = np.arange(n) / rate
    return (0.4 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 1210 * t)).astype(np.float32)


@pytest.mark.parametrize("encoding, rate, frame_ms", FORMATS)
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
    for enc, rate in PAIRS:
        if enc != encoding:
            continue
        frame_ms = wire.fitting_frame_ms(rate)
        frame = silence_frame(rate, frame_ms, encoding)
        assert frame == byte * frame_bytes(rate, frame_ms, encoding)
        framer = Framer(rate, frame_ms, encoding)
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
    [(12000, 20, "L16"), (8000, 5, "PCMU"), (8000, 70, "PCMU"), (8000, 20.5, "PCMU"), (8000, 25, "L16"),
     (8000, 20, "opus"), (True, 20, "L16"), (11025, 20, "L16"), (22050, 10, "L16")],
)
def test_rejects_unsupported_formats(rate, frame_ms, encoding) -> None:
    with pytest.raises(AudioFormatError):
        Framer(rate, frame_ms, encoding)


@pytest.mark.parametrize("rate", [r for r in wire.SAMPLE_RATES_HZ if r != wire.G711_SAMPLE_RATE_HZ])
@pytest.mark.parametrize("encoding", ["PCMU", "PCMA"])
def test_g711_is_8_khz_only(rate, encoding) -> None:
    with pytest.raises(AudioFormatError, match="8 kHz only"):
        Framer(rate, wire.fitting_frame_ms(rate), encoding)


def test_whole_sample_rule_names_the_lengths_to_use() -> None:
    with pytest.raises(AudioFormatError, match=r"220\.5 samples.*use 40"):
        Framer(11025, 20, "L16")


def test_rejects_multichannel_input() -> None:
    with pytest.raises(AudioFormatError):
        Framer(8000, 20, "PCMU").push(np.zeros((160, 2), dtype=np.float32))


@settings(max_examples=60, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=0, max_value=900), min_size=1, max_size=12),
    fmt=st.sampled_from(FORMATS),
)
def test_any_chunking_gives_the_same_bytes(cuts: list[int], fmt: tuple[str, int, int]) -> None:
    encoding, rate, frame_ms = fmt
    x = _signal(sum(cuts), rate)
    one = Framer(rate, frame_ms, encoding)
    ref = one.push(x) + one.flush()
    chunked = Framer(rate, frame_ms, encoding)
    out, i = [], 0
    for n in cuts:
        out += chunked.push(x[i : i + n])
        i += n
    out += chunked.flush()
    assert out == ref
