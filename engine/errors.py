"""Typed engine errors; the service maps each class to one gRPC status (one table, in service/)."""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error the engine raises or delivers to a stream."""

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class InvalidRequest(EngineError):
    """The request cannot be synthesized as given: unknown voice, empty/too long/out-of-range ids, bad options."""


class EngineOverloaded(EngineError):
    """Every slot is busy and the waiting queue is full; raised by `submit` at once (retry later)."""


class EngineStopped(EngineError):
    """The engine is draining or stopped: raised by `submit`, and delivered to requests cut off by `stop()`."""


class RequestFailed(EngineError):
    """A batch this request was part of raised; only that batch's requests fail, the engine keeps running."""

    def __init__(self, message: str, *, request_id: str | None = None, module: str = "", cause: BaseException | None = None) -> None:
        super().__init__(message, request_id=request_id)
        self.module = module
        self.__cause__ = cause


class ConsumerStalled(EngineError):
    """The consumer left too much audio unread for too long; the request was dropped to free its slot."""


class EngineDead(EngineError):
    """The engine loop died; every live stream gets it at once and health() turns NOT_SERVING."""


