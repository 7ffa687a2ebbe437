"""Random stream schedules for the streaming tests: streams take free slots at random, calls pick a random width."""

from __future__ import annotations

import random
from typing import Iterator, Sequence


def random_calls(n_streams: int, slots: int, widths: Sequence[int], rng: random.Random,
                 live: dict[int, int]) -> Iterator[int]:
    """Yield one call width after another while streams are waiting or live; before each, waiting streams (in
    order) take free slots at random. `live` (slot → stream) is the caller's: it removes a stream when it ends."""
    todo = list(range(n_streams))
    while todo or live:
        for slot in range(slots):
            if slot not in live and todo and rng.random() < 0.7:
                live[slot] = todo.pop(0)
        if live:
            yield rng.choice(widths)
