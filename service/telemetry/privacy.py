"""Caller text stays out of telemetry: what logs may say about an error, and the opt-in that lets them say more.

Messages written for the client may quote the caller's text (a segment that could not be read, a lexicon entry, an
SSML fragment); the client gets them in-band. Spans and metrics never carry them. Logs carry an error's class only,
unless `telemetry.log_caller_text` is on (a debugging setting, off by default), when they carry the message too.
"""

from __future__ import annotations

_log_caller_text = False


def set_log_caller_text(enabled: bool) -> None:
    """Follow `telemetry.log_caller_text` (the server's Telemetry sets it at start)."""
    global _log_caller_text
    _log_caller_text = bool(enabled)


def log_caller_text() -> bool:
    """Whether logs may carry messages that quote caller text."""
    return _log_caller_text


def error_detail(exc: BaseException) -> str:
    """An error as a log line may show it: its class, and its message only when caller text may be logged."""
    name = type(exc).__name__
    return f"{name}: {exc}" if _log_caller_text else name


def message_detail(message: str, withheld: str = "details withheld: telemetry.log_caller_text is off") -> str:
    """A client-facing message as a log line may show it: the message only when caller text may be logged."""
    return message if _log_caller_text else withheld
