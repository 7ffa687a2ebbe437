"""Typed engine errors; the service maps each class to one gRPC status (one table, in service/)."""

from __future__ import annotations

import errno

# What allocation failures look like when they are not a MemoryError: CPython's thread start, torch's CPU
# allocator, oneDNN creating a primitive under an address-space limit (docs/reliability.md, chaos table).
_ALLOCATION_WORDS = ("can't start new thread", "can't allocate memory", "could not create a primitive",
                     "out of memory", "cannot allocate memory")


def is_allocation_failure(exc: BaseException | None) -> bool:
    """True when `exc`, or an exception it was raised from, says the process could not get memory or a thread."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, MemoryError):
            return True
        if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:  # (EAGAIN is BlockingIOError: not this)
            return True
        if isinstance(exc, RuntimeError) and any(w in str(exc).lower() for w in _ALLOCATION_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


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


