"""What a call's turn machinery tells telemetry: the hooks that input, production and release call.

`service.telemetry.calls.CallTelemetry` satisfies it; tests may pass any object with these methods.
"""

from __future__ import annotations

from typing import Any, Protocol


class TurnTelemetry(Protocol):
    def text_received(self, chars: int) -> None:
        """The caller sent `chars` characters of text."""

    def turn_done(self, turn: Any) -> None:
        """The turn's last frame was released."""

    def turn_cleared(self, turn: Any) -> None:
        """The turn was cleared before its end (barge-in)."""

    def turn_failed(self, turn: Any, message: str) -> None:
        """The turn failed with `message` (an error code, never the caller's text)."""
