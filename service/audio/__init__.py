"""The service's audio path: band-limited resampling, G.711/L16 encoding, exact framing and fades."""

from __future__ import annotations

from service.errors import InvalidArgument


class AudioFormatError(InvalidArgument, ValueError):
    """An unsupported encoding, sample rate, frame size or fade length, or malformed samples/payload."""
