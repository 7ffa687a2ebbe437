"""Host work made visible on a CPU: how many tensor operations the engine thread dispatches.

An autoregressive engine on a GPU is bound by what the host does per step (Python, one kernel launch per operation),
not by the device's arithmetic; on a CPU the same cost hides inside the arithmetic. Counting the ATen operations the
engine thread dispatches per second of audio shows it anywhere: fewer operations per audio second is less host work
per call on any device. `CountingRunner` wraps a voice runner so the counter sits on the engine thread's dispatch
stack (dispatch modes are per thread) from the thread's first step to its end.
"""

from __future__ import annotations

import collections
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """Counts every ATen operation dispatched on the thread that entered it (it changes nothing it sees)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_op: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.by_op[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.by_op.values())

    def top(self, n: int = 8) -> list[tuple[str, int]]:
        return self.by_op.most_common(n)


class CountingRunner:
    """A voice runner whose engine thread counts its dispatched operations in `counter` (warm-up excluded: the
    counter is reset when the engine's first iteration starts, see `reset_after_warmup`)."""

    def __init__(self, runner: Any, counter: OpCounter):
        self._runner = runner
        self.counter = counter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def enter_thread(self) -> None:
        self._runner.enter_thread()
        self.counter.__enter__()  # stays on this thread's dispatch stack until the thread ends

    def warmup(self) -> None:
        self._runner.warmup()
        self.counter.by_op.clear()  # count what serving dispatches, not the warm-up
