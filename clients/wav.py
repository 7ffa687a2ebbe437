"""Playable WAV files for voxpool audio: G.711 μ-law / A-law (written chunk by chunk) and 16-bit PCM (stdlib wave)."""

from __future__ import annotations

import io
import os
import struct
import wave
from dataclasses import dataclass
from typing import BinaryIO

FORMAT_PCM = 1
FORMAT_ALAW = 6
FORMAT_MULAW = 7

# encoding name → (WAVE format tag, bytes per sample)
_ENCODINGS = {"PCMU": (FORMAT_MULAW, 1), "PCMA": (FORMAT_ALAW, 1), "L16": (FORMAT_PCM, 2)}


class WavError(ValueError):
    """Bad arguments for a WAV file (unknown encoding, odd rate, payload not whole samples) or a malformed file."""


@dataclass(frozen=True)
class WavInfo:
    """The header fields of a WAV file, as read back by `read_wav_info`."""

    format_tag: int  # 1 PCM, 6 A-law, 7 μ-law
    channels: int
    sample_rate_hz: int
    byte_rate: int  # bytes per second
    block_align: int  # bytes per sample frame
    bits_per_sample: int
    cb_size: int | None  # size of the fmt extension (None: 16-byte fmt chunk, as PCM uses)
    fact_samples: int | None  # sample count from the fact chunk (None: no fact chunk)
    data_bytes: int  # size of the data chunk
    riff_bytes: int  # the RIFF chunk size field (file size − 8)

    @property
    def samples(self) -> int:
        return self.data_bytes // self.block_align

    @property
    def duration_s(self) -> float:
        return self.samples / self.sample_rate_hz


def _check(encoding: str, sample_rate_hz: int, payload: bytes) -> tuple[int, int]:
    key = encoding.upper()
    if key not in _ENCODINGS:
        raise WavError(f"unsupported encoding {encoding!r}; use one of {', '.join(_ENCODINGS)}")
    if not isinstance(sample_rate_hz, int) or sample_rate_hz <= 0:
        raise WavError(f"sample_rate_hz must be a positive integer, got {sample_rate_hz!r}")
    tag, width = _ENCODINGS[key]
    if len(payload) % width:
        raise WavError(f"{key} payload of {len(payload)} bytes is not a whole number of {width}-byte samples")
    return tag, width


def _g711_wav(payload: bytes, format_tag: int, sample_rate_hz: int) -> bytes:
    """RIFF/WAVE with an 18-byte fmt chunk (cbSize 0), a fact chunk (sample count) and the data chunk."""
    fmt = struct.pack("<HHIIHHH", format_tag, 1, sample_rate_hz, sample_rate_hz, 1, 8, 0)
    fact = struct.pack("<I", len(payload))
    pad = b"\x00" if len(payload) % 2 else b""  # RIFF chunks start on even offsets
    body = (
        b"WAVE"
        + b"fmt " + struct.pack("<I", len(fmt)) + fmt
        + b"fact" + struct.pack("<I", len(fact)) + fact
        + b"data" + struct.pack("<I", len(payload)) + payload + pad
    )
    return b"RIFF" + struct.pack("<I", len(body)) + body


def wav_bytes(payload: bytes, encoding: str, sample_rate_hz: int) -> bytes:
    """A complete mono WAV file holding `payload` (frames as the server sent them, concatenated).

    encoding: "PCMU" (format tag 7), "PCMA" (6) or "L16" (PCM 1, signed 16-bit little-endian, as on the wire).
    """
    tag, _ = _check(encoding, sample_rate_hz, payload)
    if tag != FORMAT_PCM:
        return _g711_wav(payload, tag, sample_rate_hz)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate_hz)
        w.writeframes(payload)
    return buf.getvalue()


def write_wav(path: str | os.PathLike, payload: bytes, encoding: str, sample_rate_hz: int) -> None:
    """Write `payload` as a playable WAV file at `path` (see `wav_bytes`)."""
    data = wav_bytes(payload, encoding, sample_rate_hz)
    with open(path, "wb") as f:
        f.write(data)


def _read_chunks(f: BinaryIO) -> tuple[int, dict[bytes, bytes], int]:
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise WavError("not a RIFF/WAVE file")
    riff_bytes = struct.unpack("<I", head[4:8])[0]
    chunks: dict[bytes, bytes] = {}
    data_bytes = -1
    while True:
        hdr = f.read(8)
        if len(hdr) < 8:
            break
        cid, size = hdr[:4], struct.unpack("<I", hdr[4:])[0]
        body = f.read(size)
        if len(body) < size:
            raise WavError(f"chunk {cid!r} is truncated ({len(body)} of {size} bytes)")
        if cid == b"data":
            data_bytes = size
        else:
            chunks[cid] = body
        if size % 2:
            f.read(1)
    if b"fmt " not in chunks or data_bytes < 0:
        raise WavError("WAV file lacks a fmt or data chunk")
    return riff_bytes, chunks, data_bytes


def read_wav_info(source: str | os.PathLike | bytes) -> WavInfo:
    """Parse the header chunks of a WAV file (path or bytes) without decoding the audio."""
    if isinstance(source, (bytes, bytearray)):
        riff_bytes, chunks, data_bytes = _read_chunks(io.BytesIO(source))
    else:
        with open(source, "rb") as f:
            riff_bytes, chunks, data_bytes = _read_chunks(f)
    fmt = chunks[b"fmt "]
    if len(fmt) < 16:
        raise WavError(f"fmt chunk of {len(fmt)} bytes is too short")
    tag, channels, sample_rate_hz, bytes_per_s, align, bits = struct.unpack("<HHIIHH", fmt[:16])
    cb_size = struct.unpack("<H", fmt[16:18])[0] if len(fmt) >= 18 else None
    fact = chunks.get(b"fact")
    fact_samples = struct.unpack("<I", fact[:4])[0] if fact is not None and len(fact) >= 4 else None
    return WavInfo(tag, channels, sample_rate_hz, bytes_per_s, align, bits, cb_size, fact_samples, data_bytes, riff_bytes)
