"""One Converse call, in the order its data flows: input → turn → synthesis → audio out → release (docs/architecture.md)."""

from service.call.session import CallSession
from service.call.synthesis import CallDeps

__all__ = ["CallDeps", "CallSession"]
