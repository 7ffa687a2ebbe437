"""What tts.proto's audio, pacing and speaking-rate fields accept: the one definition the server, clients and CLI read.

A frame is `frame_ms` long, a multiple of 10 ms from 10 to 60, and must hold a whole number of samples at the
call's rate (`sample_rate_hz * frame_ms / 1000` an integer), so every frame has the same byte size and the media
clock never drifts: at 11025 Hz that leaves 40 ms only, at 22050 Hz 20, 40 or 60 ms, every other rate takes all
six. G.711 (PCMU, PCMA) is an 8 kHz codec and is offered at 8000 Hz only; L16 is offered at every rate.
"""

from __future__ import annotations

import operator

SAMPLE_RATES_HZ: tuple[int, ...] = (8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000)
G711_ENCODINGS: tuple[str, ...] = ("PCMU", "PCMA")
G711_SAMPLE_RATE_HZ = 8000
MIN_FRAME_MS = 10
MAX_FRAME_MS = 60
FRAME_STEP_MS = 10
MAX_LEAD_MS = 500  # largest Pacing.lead_ms; published as Limits.max_lead_ms
SPEAKING_RATE_RANGE: tuple[float, float] = (0.5, 2.0)  # SessionConfig / TurnOptions speaking_rate; 1.0 = natural
VOLUME_DB_RANGE: tuple[float, float] = (-40.0, 12.0)  # SessionConfig / TurnOptions volume_db


class WireFormatError(ValueError):
    """An audio format the API does not offer; the message names the field and what to ask for instead."""


def _or_list(values: tuple[int, ...]) -> str:
    """(10, 20, 30) → '10, 20 or 30'."""
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def sample_rates_text() -> str:
    """The supported rates as a reader expects them in a message: '8000, 11025, ... or 48000'."""
    return _or_list(SAMPLE_RATES_HZ)


def _is_int(value: object) -> bool:
    """An integer of any kind (numpy's included), not a bool and not a float."""
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def frame_ms_choices(sample_rate_hz: int) -> tuple[int, ...]:
    """The frame lengths offered at `sample_rate_hz`: multiples of 10 ms in 10-60 holding whole samples."""
    return tuple(ms for ms in range(MIN_FRAME_MS, MAX_FRAME_MS + 1, FRAME_STEP_MS) if sample_rate_hz * ms % 1000 == 0)


def check_sample_rate(sample_rate_hz: int) -> None:
    """WireFormatError unless `sample_rate_hz` is one of SAMPLE_RATES_HZ."""
    if not _is_int(sample_rate_hz) or int(sample_rate_hz) not in SAMPLE_RATES_HZ:
        raise WireFormatError(f"audio.sample_rate_hz {sample_rate_hz!r} is not supported; use {sample_rates_text()}")


def check_encoding_rate(encoding: str, sample_rate_hz: int) -> None:
    """WireFormatError for G.711 at any rate but 8000 Hz (the codec is defined for narrow-band audio only)."""
    if str(encoding).upper() in G711_ENCODINGS and sample_rate_hz != G711_SAMPLE_RATE_HZ:
        raise WireFormatError(
            f"audio.encoding {str(encoding).upper()} is G.711, which is 8 kHz only: ask for sample_rate_hz "
            f"{G711_SAMPLE_RATE_HZ}, or for L16 at {sample_rate_hz} Hz")


def check_frame_ms(sample_rate_hz: int, frame_ms: int) -> None:
    """WireFormatError unless `frame_ms` is a multiple of 10 in 10-60 giving a whole number of samples."""
    choices = frame_ms_choices(sample_rate_hz)
    if not _is_int(frame_ms) or not MIN_FRAME_MS <= int(frame_ms) <= MAX_FRAME_MS or int(frame_ms) % FRAME_STEP_MS:
        raise WireFormatError(f"audio.frame_ms {frame_ms!r} is not supported; use {_or_list(choices)} "
                              f"at {sample_rate_hz} Hz")
    if int(frame_ms) not in choices:
        raise WireFormatError(
            f"audio.frame_ms {frame_ms} at {sample_rate_hz} Hz is {sample_rate_hz * int(frame_ms) / 1000:g} samples, "
            f"not a whole number; use {_or_list(choices)} at this rate")


def check_audio_format(encoding: str, sample_rate_hz: int, frame_ms: int) -> None:
    """Every rule above, rate first: WireFormatError naming the first field to change."""
    check_sample_rate(sample_rate_hz)
    check_encoding_rate(encoding, sample_rate_hz)
    check_frame_ms(sample_rate_hz, frame_ms)


def fitting_frame_ms(sample_rate_hz: int, preferred_ms: int = 20) -> int:
    """The frame length offered at `sample_rate_hz` nearest `preferred_ms` (the longer one on a tie)."""
    check_sample_rate(sample_rate_hz)
    return min(frame_ms_choices(sample_rate_hz), key=lambda ms: (abs(ms - preferred_ms), -ms))


def frame_samples(sample_rate_hz: int, frame_ms: int) -> int:
    """Samples in one frame (160 at 8 kHz / 20 ms); WireFormatError when the pair is not offered."""
    check_sample_rate(sample_rate_hz)
    check_frame_ms(sample_rate_hz, frame_ms)
    return int(sample_rate_hz) * int(frame_ms) // 1000
