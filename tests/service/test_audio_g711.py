"""G.711 μ-law/A-law and L16 codecs: exact agreement with audioop, quantization bounds, silence, endianness."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from service.audio import AudioFormatError, g711
from service.errors import InvalidArgument

ALL_INT16 = np.arange(-32768, 32768, dtype=np.int16)
ALL_BYTES = bytes(range(256))


def _audioop():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return pytest.importorskip("audioop")


def test_numpy_tables_equal_audioop_on_every_int16_input() -> None:
    audioop = _audioop()
    raw = ALL_INT16.tobytes()
    assert g711.ulaw_encode_numpy(ALL_INT16) == audioop.lin2ulaw(raw, 2)
    assert g711.alaw_encode_numpy(ALL_INT16) == audioop.lin2alaw(raw, 2)
    assert np.array_equal(g711.ulaw_decode_numpy(ALL_BYTES), np.frombuffer(audioop.ulaw2lin(ALL_BYTES, 2), np.int16))
    assert np.array_equal(g711.alaw_decode_numpy(ALL_BYTES), np.frombuffer(audioop.alaw2lin(ALL_BYTES, 2), np.int16))


def test_dispatching_codec_equals_tables() -> None:
    assert g711.ulaw_encode(ALL_INT16) == g711.ulaw_encode_numpy(ALL_INT16)
    assert g711.alaw_encode(ALL_INT16) == g711.alaw_encode_numpy(ALL_INT16)
    assert np.array_equal(g711.ulaw_decode(ALL_BYTES), g711.ulaw_decode_numpy(ALL_BYTES))
    assert np.array_equal(g711.alaw_decode(ALL_BYTES), g711.alaw_decode_numpy(ALL_BYTES))


def test_all_256_codes_are_reachable_and_encoding_is_monotonic() -> None:
    for enc, dec, n_codes in (
        (g711.ulaw_encode_numpy, g711.ulaw_decode_numpy, 255),  # μ-law "negative zero" 0x7F is never produced
        (g711.alaw_encode_numpy, g711.alaw_decode_numpy, 256),
    ):
        codes = enc(ALL_INT16)
        assert len(set(codes)) == n_codes
        levels = dec(codes).astype(np.int64)
        assert np.all(np.diff(levels) >= 0), "decoded level must not decrease as the input grows"


@pytest.mark.parametrize("law", ["ulaw", "alaw"])
def test_round_trip_error_within_g711_quantization(law: str) -> None:
    enc, dec = (g711.ulaw_encode, g711.ulaw_decode) if law == "ulaw" else (g711.alaw_encode, g711.alaw_decode)
    x = ALL_INT16.astype(np.int64)
    err = np.abs(dec(enc(ALL_INT16)).astype(np.int64) - x)
    # 4-bit mantissa: half a quantization step is at most 1/32 of the magnitude, plus the finest step
    assert np.all(err <= np.abs(x) / 32.0 + 8.0)
    assert err[np.abs(x) < 64].max() <= 8


@pytest.mark.parametrize("encoding", ["PCMU", "PCMA"])
def test_sine_snr_after_g711_round_trip(encoding: str) -> None:
    t = np.arange(8000) / 8000.0
    x = (10 ** (-10 / 20) * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)  # −10 dBFS
    y = g711.decode(g711.encode(x, encoding), encoding)
    snr_db = 10 * np.log10(np.sum(x.astype(np.float64) ** 2) / np.sum((y - x).astype(np.float64) ** 2))
    assert snr_db > 35.0  # G.711 gives about 38 dB over a wide range of levels


def test_silence_bytes() -> None:
    zeros = np.zeros(4, dtype=np.float32)
    assert g711.encode(zeros, "PCMU") == b"\xff" * 4
    assert g711.encode(zeros, "PCMA") == b"\xd5" * 4
    assert g711.encode(zeros, "L16") == b"\x00" * 8
    for enc in g711.Encoding:
        assert g711.encode(zeros[:1], enc) == enc.silence_sample


def test_l16_is_little_endian_and_exact() -> None:
    assert g711.l16_encode(np.array([1, -2, 256], dtype=np.int16)) == b"\x01\x00\xfe\xff\x00\x01"
    x = (np.arange(-32768, 32768, 7, dtype=np.float64) / 32768.0).astype(np.float32)
    y = g711.decode(g711.encode(x, "L16"), "L16")
    assert np.array_equal(y, x)
    with pytest.raises(AudioFormatError):
        g711.l16_decode(b"\x00\x00\x01")


def test_float_to_int16_clips_rounds_and_sanitizes() -> None:
    out = g711.float_to_int16(np.array([1.5, -1.5, 1.0, -1.0, 0.5, 1 / 65536, np.nan, np.inf, -np.inf]))
    assert out.tolist() == [32767, -32768, 32767, -32768, 16384, 0, 0, 32767, -32768]
    assert out.dtype == np.int16


def test_encoding_parse_and_errors() -> None:
    assert g711.Encoding.parse("pcmu") is g711.Encoding.PCMU
    assert g711.Encoding.L16.bytes_per_sample == 2 and g711.Encoding.PCMA.bytes_per_sample == 1
    with pytest.raises(AudioFormatError) as info:
        g711.Encoding.parse("opus")
    assert isinstance(info.value, InvalidArgument) and isinstance(info.value, ValueError)
    with pytest.raises(AudioFormatError):
        g711.ulaw_encode(np.zeros(3, dtype=np.float32))  # codec functions take int16 only
    with pytest.raises(AudioFormatError):
        g711.float_to_int16(np.zeros((2, 3)))


def test_numpy_fallback_path_gives_identical_results(monkeypatch: pytest.MonkeyPatch) -> None:
    x = (np.sin(np.linspace(0, 50, 4000)) * 0.9).astype(np.float32)
    with_audioop = {enc: g711.encode(x, enc) for enc in ("PCMU", "PCMA")}
    decoded = {enc: g711.decode(payload, enc) for enc, payload in with_audioop.items()}
    monkeypatch.setattr(g711, "_audioop", None)  # as on an interpreter without audioop
    for enc, payload in with_audioop.items():
        assert g711.encode(x, enc) == payload
        assert np.array_equal(g711.decode(payload, enc), decoded[enc])
    assert np.array_equal(g711.ulaw_decode(ALL_BYTES), g711.ulaw_decode_numpy(ALL_BYTES))
