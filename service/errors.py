"""Typed service errors and the one table that maps every error to a gRPC status code."""

from __future__ import annotations

from dataclasses import dataclass

import grpc


class ServiceError(Exception):
    """An error that ends a call (or a turn, when `turn_scoped`) with a gRPC status and a message."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, *, turn_id: str = "", retry_after_ms: int | None = None):
        super().__init__(message)
        self.message = message
        self.turn_id = turn_id
        self.retry_after_ms = retry_after_ms


class InvalidArgument(ServiceError):
    """The client sent something we cannot use; the message says what to change."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class Overloaded(ServiceError):
    """No capacity for another call; retry after the pushback delay."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class ClientStalled(ServiceError):
    """The client stopped reading audio for longer than the stall timeout."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(ServiceError):
    """The server is draining, starting, or its engine is down."""

    code = grpc.StatusCode.UNAVAILABLE


class SessionExpired(ServiceError):
    """The call exceeded its maximum duration."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Internal(ServiceError):
    """A bug or engine failure; details are in the logs, not the message."""

    code = grpc.StatusCode.INTERNAL


class TurnFailed(ServiceError):
    """A turn-scoped failure: reported in-band (an Error event with `turn_error`), the call goes on."""

    def __init__(self, message: str, *, turn_error: str, turn_id: str = "", retryable: bool = False):
        super().__init__(message, turn_id=turn_id)
        self.turn_error = turn_error  # the name of a voxpool.v1.Error.Code (SYNTHESIS_FAILED, ...)
        self.retryable = retryable


@dataclass(frozen=True)
class _Row:
    """How one error class ends a call: its status and message, and, for a turn-scoped one, its in-band code."""

    cls: type[BaseException]
    code: grpc.StatusCode
    message: str | None  # None: the exception's own text (it was written for the client)
    turn_error: str | None = None  # set: while a call runs, this error fails only the turn (Error.Code name)


def _table() -> list[_Row]:
    from google.protobuf.message import DecodeError

    from engine import errors as eng
    from models.frontend.pipeline import FrontendError

    return [
        _Row(eng.EngineOverloaded, grpc.StatusCode.RESOURCE_EXHAUSTED, "the synthesis engine is full; resend the turn shortly",
             "SYNTHESIS_FAILED"),
        _Row(eng.EngineDead, grpc.StatusCode.UNAVAILABLE, "the synthesis engine stopped; retry on another server"),
        _Row(eng.EngineStopped, grpc.StatusCode.UNAVAILABLE, "the server is shutting down; retry on another server"),
        _Row(eng.ConsumerStalled, grpc.StatusCode.RESOURCE_EXHAUSTED, "the client stopped reading audio",
             "SYNTHESIS_FAILED"),
        _Row(eng.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT, None, "NORMALIZATION_FAILED"),
        _Row(eng.RequestFailed, grpc.StatusCode.INTERNAL, "synthesis failed for this turn", "SYNTHESIS_FAILED"),
        _Row(eng.EngineError, grpc.StatusCode.INTERNAL, "synthesis failed for this turn", "SYNTHESIS_FAILED"),
        _Row(FrontendError, grpc.StatusCode.INVALID_ARGUMENT, None),
        # a client message that does not parse (corrupt wire bytes, invalid UTF-8 in a string field)
        _Row(DecodeError, grpc.StatusCode.INVALID_ARGUMENT, "a message could not be parsed: send valid protobuf with UTF-8 text"),
    ]


def _row(exc: BaseException) -> _Row | None:
    return next((row for row in _table() if isinstance(exc, row.cls)), None)


# A call that could not get memory or a thread (an address-space limit, a cgroup near its limit): retryable on
# another server, and this one's readiness turns NOT_SERVING meanwhile (service/pressure.py).
OUT_OF_MEMORY = (grpc.StatusCode.UNAVAILABLE,
                 "the server is out of memory (it could not allocate or start a thread); retry on another server")


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status and client-facing message for any exception raised while serving a call (the one table)."""
    from engine.errors import is_allocation_failure

    if isinstance(exc, ServiceError):
        return exc.code, exc.message
    row = _row(exc)
    if row is None:
        return OUT_OF_MEMORY if is_allocation_failure(exc) else (grpc.StatusCode.INTERNAL, "internal error")
    return row.code, row.message if row.message is not None else str(exc)


def in_call(exc: BaseException, what: str = "") -> ServiceError:
    """An engine error met while a call runs, as the ServiceError that the table says: TurnFailed (in-band) for
    turn-scoped rows, else the call-ending status. `what` names the text concerned, for the client's message."""
    row = _row(exc)
    if row is None:
        code, message = status_for(exc)
        return Unavailable(message) if code == grpc.StatusCode.UNAVAILABLE else Internal(message)
    code, message = status_for(exc)
    if row.turn_error is not None:
        if row.message is None and what:
            message = f"cannot synthesize {what}: {message}"
        return TurnFailed(message, turn_error=row.turn_error)
    by_code = {c.code: c for c in (InvalidArgument, Overloaded, Unavailable, SessionExpired, Internal)}
    return by_code.get(code, Internal)(message)
