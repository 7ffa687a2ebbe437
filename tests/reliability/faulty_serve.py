"""`python -m tests.reliability.faulty_serve serve ...`: `voxpool serve` whose engine thread, once the file named by
VOXPOOL_TEST_FAULT_FILE exists, dies (VOXPOOL_TEST_FAULT=die) or hangs for good (=hang) in its next decoder batch.
Real-process fault drills start it where they would start `python -m service.cli`."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

FAULT_ENV = "VOXPOOL_TEST_FAULT"
TRIGGER_ENV = "VOXPOOL_TEST_FAULT_FILE"


class EngineThreadKilled(BaseException):
    """Not an Exception: escapes the engine's per-batch handler and ends the engine thread."""


class TriggeredRunner:
    """A ModuleRunner whose decode dies or hangs once the trigger file exists; everything else is delegated."""

    def __init__(self, inner: Any, fault: str, trigger: str) -> None:
        self._inner, self._fault, self._trigger = inner, fault, trigger

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def decode(self, slots: Any, steps: int, dropout: bool) -> Any:
        if os.path.exists(self._trigger):
            if self._fault == "die":
                raise EngineThreadKilled("the engine thread dies (fault drill)")
            threading.Event().wait()  # hang: alive, never returns
        return self._inner.decode(slots, steps, dropout)


def install(fault: str, trigger: str) -> None:
    """Wrap every runner the server builds from now on."""
    import engine.runner

    build = engine.runner.build_runners

    def build_triggered(config: Any, voices: Any = None) -> dict[str, Any]:
        return {name: TriggeredRunner(r, fault, trigger) for name, r in build(config, voices).items()}

    engine.runner.build_runners = build_triggered


if __name__ == "__main__":
    install(os.environ[FAULT_ENV], os.environ[TRIGGER_ENV])
    from service.cli import main

    sys.exit(main())
