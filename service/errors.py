"""Typed service errors and the one table that maps every error to a gRPC status code."""

from __future__ import annotations

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


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status and client-facing message for any exception raised while serving a call (the one table)."""
    from google.protobuf.message import DecodeError

    from engine import errors as eng
    from models.frontend.pipeline import FrontendError

    if isinstance(exc, ServiceError):
        return exc.code, exc.message
    table: list[tuple[type[BaseException], grpc.StatusCode, str | None]] = [
        (eng.EngineOverloaded, grpc.StatusCode.RESOURCE_EXHAUSTED, "the synthesis engine is full; retry shortly"),
        (eng.EngineDead, grpc.StatusCode.UNAVAILABLE, "the synthesis engine stopped; retry on another server"),
        (eng.EngineStopped, grpc.StatusCode.UNAVAILABLE, "the server is shutting down; retry on another server"),
        (eng.ConsumerStalled, grpc.StatusCode.RESOURCE_EXHAUSTED, "the client stopped reading audio"),
        (eng.InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT, None),
        (eng.RequestFailed, grpc.StatusCode.INTERNAL, "synthesis failed for this segment"),
        (FrontendError, grpc.StatusCode.INVALID_ARGUMENT, None),
        # a client message that does not parse (corrupt wire bytes, invalid UTF-8 in a string field)
        (DecodeError, grpc.StatusCode.INVALID_ARGUMENT, "a message could not be parsed: send valid protobuf with UTF-8 text"),
    ]
    for cls, code, message in table:
        if isinstance(exc, cls):
            return code, message if message is not None else str(exc)
    return grpc.StatusCode.INTERNAL, "internal error"
