"""WAV files for PCMU / PCMA (hand-written RIFF chunks) and L16 (stdlib wave): headers read back."""

import struct
import wave

import pytest

from clients.wav import FORMAT_ALAW, FORMAT_MULAW, FORMAT_PCM, WavError, read_wav_info, wav_bytes, write_wav


@pytest.mark.parametrize("encoding, tag", [("PCMU", FORMAT_MULAW), ("pcma", FORMAT_ALAW)])
def test_g711_header(tmp_path, encoding, tag):
    payload = bytes(range(256)) * 3 + b"\x01"  # 769 bytes: odd, needs a pad byte
    path = tmp_path / "a.wav"
    write_wav(path, payload, encoding, 8000)
    raw = path.read_bytes()
    info = read_wav_info(path)
    assert (info.format_tag, info.channels, info.sample_rate_hz) == (tag, 1, 8000)
    assert (info.byte_rate, info.block_align, info.bits_per_sample) == (8000, 1, 8)
    assert info.cb_size == 0 and info.fact_samples == 769 and info.data_bytes == 769
    assert info.riff_bytes == len(raw) - 8 and len(raw) % 2 == 0
    assert info.duration_s == pytest.approx(769 / 8000)
    # fmt chunk of 18 bytes, then fact, then data holding the payload unchanged
    assert raw[12:20] == b"fmt " + struct.pack("<I", 18)
    assert raw[38:50] == b"fact" + struct.pack("<I", 4) + struct.pack("<I", 769)
    assert raw[50:58] == b"data" + struct.pack("<I", 769)
    assert raw[58:58 + 769] == payload


def test_l16_readable_by_wave(tmp_path):
    samples = [0, 1000, -1000, 32767, -32768] * 320
    payload = struct.pack(f"<{len(samples)}h", *samples)
    path = tmp_path / "b.wav"
    write_wav(path, payload, "L16", 16000)
    with wave.open(str(path), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()) == (1, 2, 16000, 1600)
        assert w.readframes(1600) == payload  # little-endian on the wire and in the file
    info = read_wav_info(path)
    assert info.format_tag == FORMAT_PCM and info.bits_per_sample == 16 and info.block_align == 2
    assert info.byte_rate == 32000 and info.samples == 1600


def test_bad_arguments():
    with pytest.raises(WavError, match="unsupported encoding"):
        wav_bytes(b"\x00\x00", "OPUS", 8000)
    with pytest.raises(WavError, match="whole number"):
        wav_bytes(b"\x00\x00\x00", "L16", 8000)
    with pytest.raises(WavError):
        wav_bytes(b"\x00", "PCMU", 0)
    with pytest.raises(WavError, match="RIFF"):
        read_wav_info(b"not a wav file at all")
