"""Text streamed as an LLM streams it: seeded deltas, and which delta first makes the text synthesizable.

`voxpool say --stream` sends its text this way, and the load generator (bench/) draws its turns with the same
functions, so both exercise the server's incremental segmentation alike.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

# Marks after which the server's segmenter may cut a segment (models/frontend/segmenter.py: sentence marks
# always, clause marks for a turn's first segment): the delta that carries the first one makes text synthesizable.
SEGMENT_MARKS = frozenset("。！？；!?;\n，、：,:")


class DeltaError(ValueError):
    """Bad delta sizes or seed: the message says which bound to change."""


def seeded_rng(seed: int, *keys: float) -> np.random.Generator:
    """A generator seeded by (seed, keys); keys are rates, indices, ... (non-negative, ms precision)."""
    if seed < 0 or any(k < 0 for k in keys):
        raise DeltaError(f"seeds and seed keys must be ≥ 0 (got {seed}, {keys})")
    return np.random.default_rng([int(seed)] + [int(round(k * 1000)) for k in keys])


def split_deltas(text: str, min_chars: int, max_chars: int, seed: int, *keys: float) -> list[str]:
    """Cut text into consecutive deltas of min_chars..max_chars code points (seeded), as an LLM streams tokens."""
    if not 1 <= min_chars <= max_chars:
        raise DeltaError(f"delta sizes need 1 ≤ min ≤ max (got {min_chars}:{max_chars})")
    rng = seeded_rng(seed, 11, *keys)
    out, i = [], 0
    while i < len(text):
        k = int(rng.integers(min_chars, max_chars + 1))
        out.append(text[i:i + k])
        i += k
    return out


def synthesizable_index(deltas: Sequence[str]) -> int | None:
    """Index of the first delta holding a sentence or clause mark (None: only the flush makes text synthesizable)."""
    for i, d in enumerate(deltas):
        if any(ch in SEGMENT_MARKS for ch in d):
            return i
    return None
