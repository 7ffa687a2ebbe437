"""Wire encodings of int16 PCM: G.711 μ-law (PCMU) and A-law (PCMA), and little-endian L16."""

from __future__ import annotations

import enum
import logging
import warnings

import numpy as np

from service.audio import AudioFormatError

log = logging.getLogger(__name__)

try:  # stdlib on 3.11/3.12 (deprecated there), the `audioop-lts` package on >= 3.13
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop as _audioop
except ImportError:  # pragma: no cover - depends on the interpreter
    _audioop = None

BACKEND = "audioop" if _audioop is not None else "numpy"

INT16_SCALE = 32768.0  # float 1.0 ↔ int16 32768 (clipped to 32767); decode divides by the same scale


class Encoding(str, enum.Enum):
    """Payload encodings of audio frames (the proto's AudioFormat.Encoding names)."""

    PCMU = "PCMU"  # G.711 μ-law, 1 byte/sample
    PCMA = "PCMA"  # G.711 A-law, 1 byte/sample
    L16 = "L16"  # signed 16-bit little-endian, 2 bytes/sample (RTP L16 would be big-endian)

    @classmethod
    def parse(cls, value: "str | Encoding") -> "Encoding":
        """'pcmu' / 'PCMU' / Encoding.PCMU → Encoding.PCMU; anything else raises AudioFormatError."""
        if isinstance(value, Encoding):
            return value
        try:
            return cls(str(value).upper())
        except ValueError:
            raise AudioFormatError(f"unsupported encoding {value!r}; use one of PCMU, PCMA, L16") from None

    @property
    def bytes_per_sample(self) -> int:
        """1 for G.711, 2 for L16."""
        return 2 if self is Encoding.L16 else 1

    @property
    def silence_sample(self) -> bytes:
        """The encoding of one zero sample: μ-law 0xFF, A-law 0xD5, L16 two zero bytes."""
        return {Encoding.PCMU: b"\xff", Encoding.PCMA: b"\xd5", Encoding.L16: b"\x00\x00"}[self]


# ---------------------------------------------------------------------------------------------------
# float ↔ int16
# ---------------------------------------------------------------------------------------------------


def float_to_int16(samples: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] → int16 [N], rounded, clipped at full scale; NaN → 0, ±inf → ±full scale."""
    x = np.asarray(samples, dtype=np.float64)
    if x.ndim != 1:
        raise AudioFormatError(f"expected mono samples [N], got shape {x.shape}")
    x = np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0)
    return np.clip(np.rint(x * INT16_SCALE), -32768, 32767).astype(np.int16)


def int16_to_float(pcm: np.ndarray) -> np.ndarray:
    """int16 [N] → float32 [N] in [-1, 1)."""
    return (np.asarray(pcm, dtype=np.int16).astype(np.float32) / np.float32(INT16_SCALE)).astype(np.float32)


# ---------------------------------------------------------------------------------------------------
# G.711 tables (ITU-T G.711 / the Sun reference code that audioop also follows), built once with numpy
# ---------------------------------------------------------------------------------------------------

_ALL_INT16 = np.arange(-32768, 32768, dtype=np.int32)  # index = int16 value + 32768
_ULAW_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32)
_ALAW_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32)


def _ulaw_encode_table() -> np.ndarray:
    v = _ALL_INT16 >> 2  # 14-bit magnitude range
    mask = np.where(v < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(v), 8159) + 33  # clip, then add the bias (0x84 >> 2)
    seg = np.searchsorted(_ULAW_SEG_END, mag, side="left")
    segc = np.minimum(seg, 7)
    uval = (segc << 4) | ((mag >> (segc + 1)) & 0xF)
    uval = np.where(seg >= 8, 0x7F, uval)
    return (uval ^ mask).astype(np.uint8)


def _ulaw_decode_table() -> np.ndarray:
    u = (~np.arange(256, dtype=np.int32)) & 0xFF
    t = (((u & 0x0F) << 3) + 0x84) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, 0x84 - t, t - 0x84).astype(np.int16)


def _alaw_encode_table() -> np.ndarray:
    v = _ALL_INT16 >> 3  # 13-bit range
    neg = v < 0
    mask = np.where(neg, 0x55, 0xD5)
    mag = np.where(neg, -v - 1, v)
    seg = np.searchsorted(_ALAW_SEG_END, mag, side="left")
    segc = np.minimum(seg, 7)
    quant = np.where(segc < 2, mag >> 1, mag >> np.maximum(segc, 1)) & 0xF
    aval = np.where(seg >= 8, 0x7F, (segc << 4) | quant)
    return (aval ^ mask).astype(np.uint8)


def _alaw_decode_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    seg = (a & 0x70) >> 4
    t = (a & 0x0F) << 4
    t = np.where(seg == 0, t + 8, (t + 0x108) << np.maximum(seg - 1, 0))
    return np.where(a & 0x80, t, -t).astype(np.int16)


_ULAW_ENC = _ulaw_encode_table()
_ULAW_DEC = _ulaw_decode_table()
_ALAW_ENC = _alaw_encode_table()
_ALAW_DEC = _alaw_decode_table()


def _as_int16(pcm: np.ndarray) -> np.ndarray:
    arr = np.asarray(pcm)
    if arr.dtype != np.int16 or arr.ndim != 1:
        raise AudioFormatError(f"expected int16 samples [N], got {arr.dtype} with shape {arr.shape}")
    return arr


def ulaw_encode_numpy(pcm: np.ndarray) -> bytes:
    """int16 [N] → N μ-law bytes, table lookup (no audioop)."""
    return _ULAW_ENC[_as_int16(pcm).astype(np.int32) + 32768].tobytes()


def ulaw_decode_numpy(payload: bytes) -> np.ndarray:
    """μ-law bytes → int16 [N], table lookup (no audioop)."""
    return _ULAW_DEC[np.frombuffer(payload, dtype=np.uint8)]


def alaw_encode_numpy(pcm: np.ndarray) -> bytes:
    """int16 [N] → N A-law bytes, table lookup (no audioop)."""
    return _ALAW_ENC[_as_int16(pcm).astype(np.int32) + 32768].tobytes()


def alaw_decode_numpy(payload: bytes) -> np.ndarray:
    """A-law bytes → int16 [N], table lookup (no audioop)."""
    return _ALAW_DEC[np.frombuffer(payload, dtype=np.uint8)]


def ulaw_encode(pcm: np.ndarray) -> bytes:
    """int16 [N] → N μ-law bytes (audioop when available; identical tables otherwise)."""
    pcm = _as_int16(pcm)
    if _audioop is not None:
        return _audioop.lin2ulaw(pcm.astype(np.int16, copy=False).tobytes(), 2)
    return ulaw_encode_numpy(pcm)


def ulaw_decode(payload: bytes) -> np.ndarray:
    """μ-law bytes → int16 [N]."""
    if _audioop is not None:
        return np.frombuffer(_audioop.ulaw2lin(bytes(payload), 2), dtype=np.int16).copy()
    return ulaw_decode_numpy(payload)


def alaw_encode(pcm: np.ndarray) -> bytes:
    """int16 [N] → N A-law bytes (audioop when available; identical tables otherwise)."""
    pcm = _as_int16(pcm)
    if _audioop is not None:
        return _audioop.lin2alaw(pcm.tobytes(), 2)
    return alaw_encode_numpy(pcm)


def alaw_decode(payload: bytes) -> np.ndarray:
    """A-law bytes → int16 [N]."""
    if _audioop is not None:
        return np.frombuffer(_audioop.alaw2lin(bytes(payload), 2), dtype=np.int16).copy()
    return alaw_decode_numpy(payload)


def l16_encode(pcm: np.ndarray) -> bytes:
    """int16 [N] → 2N bytes, little-endian."""
    return _as_int16(pcm).astype("<i2", copy=False).tobytes()


def l16_decode(payload: bytes) -> np.ndarray:
    """Little-endian 16-bit bytes → int16 [N] (native order)."""
    if len(payload) % 2:
        raise AudioFormatError(f"L16 payload of {len(payload)} bytes is not a whole number of samples")
    return np.frombuffer(payload, dtype="<i2").astype(np.int16)


# ---------------------------------------------------------------------------------------------------
# float samples ↔ payload
# ---------------------------------------------------------------------------------------------------


def encode(samples: np.ndarray, encoding: "Encoding | str") -> bytes:
    """Float samples [N] in [-1, 1] → payload bytes (N or 2N) in `encoding`."""
    enc = Encoding.parse(encoding)
    pcm = float_to_int16(samples)
    if enc is Encoding.PCMU:
        return ulaw_encode(pcm)
    if enc is Encoding.PCMA:
        return alaw_encode(pcm)
    return l16_encode(pcm)


def decode(payload: bytes, encoding: "Encoding | str") -> np.ndarray:
    """Payload bytes in `encoding` → float32 samples [N]."""
    enc = Encoding.parse(encoding)
    if enc is Encoding.PCMU:
        pcm = ulaw_decode(payload)
    elif enc is Encoding.PCMA:
        pcm = alaw_decode(payload)
    else:
        pcm = l16_decode(payload)
    return int16_to_float(pcm)
