"""AudioCache: an exact, byte-bounded store of synthesized segment audio with a second-sighting admission filter."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import threading
from dataclasses import dataclass
from typing import Hashable

import numpy as np

from engine.request import AudioChunk, SynthesisRequest

# SynthesisOptions fields that change scheduling only, never the audio: left out of the key.
SCHEDULING_ONLY_OPTIONS = frozenset({"streaming", "deadline_margin_ms", "follows", "gap_ms"})
# Accounting overhead per chunk and per entry (Python objects around the arrays), in bytes.
CHUNK_OVERHEAD_BYTES = 256
ENTRY_OVERHEAD_BYTES = 512


@dataclass(frozen=True)
class CacheKey:
    """What a segment's audio is a pure function of.

    `voice` is the resolved voice name (never ""), `model_version` a fingerprint of that voice's weights and
    the engine settings that change audio; `request` holds every other SynthesisRequest field except the
    request id, and every SynthesisOptions field except the scheduling-only ones, as (name, value) pairs,
    so a field added later (a speaking rate) is part of the key without a change here.
    """

    voice: str
    model_version: str
    ids: tuple[int, ...]
    request: tuple[tuple[str, Hashable], ...]

    @classmethod
    def of(cls, request: SynthesisRequest, voice: str, model_version: str) -> "CacheKey":
        """The key of a request for the resolved `voice` (the engine's default when request.voice is "")."""
        fields: list[tuple[str, Hashable]] = []
        for f in dataclasses.fields(request):
            if f.name in ("request_id", "ids", "voice"):
                continue
            value = getattr(request, f.name)
            if dataclasses.is_dataclass(value):
                value = tuple(
                    (g.name, getattr(value, g.name)) for g in dataclasses.fields(value)
                    if g.name not in SCHEDULING_ONLY_OPTIONS
                )
            fields.append((f.name, value))
        return cls(voice, model_version, tuple(request.ids), tuple(fields))

    @property
    def digest(self) -> bytes:
        """128-bit digest (the admission filter remembers digests, not keys)."""
        return hashlib.blake2b(repr(self).encode("utf-8"), digest_size=16).digest()

    @property
    def nbytes(self) -> int:
        """Accounted size of the key (ids dominate)."""
        return 8 * len(self.ids) + len(repr(self.request)) + len(self.voice) + len(self.model_version)


#: The array fields of an AudioChunk a cache entry holds (read-only copies; None stays None).
_CHUNK_ARRAYS = ("samples", "input_positions", "step_start_samples", "ahead_positions", "ahead_step_start_samples")


def _frozen(array: np.ndarray | None) -> np.ndarray | None:
    if array is None:
        return None
    out = np.array(array, copy=True)
    out.setflags(write=False)
    return out


@dataclass(frozen=True)
class CachedSegment:
    """Everything a segment's output stream carried: the chunks (audio, boundaries, alignment) and finish info.

    Each chunk's `samples` is float32 [N] at the voice's rate and `input_positions` int [steps], both
    read-only copies; `decoder_steps` is what the synthesis took (a replay takes none).
    """

    chunks: tuple[AudioChunk, ...]
    sample_rate_hz: int
    decoder_steps: int

    @classmethod
    def record(cls, chunks: list[AudioChunk], sample_rate_hz: int, decoder_steps: int) -> "CachedSegment":
        """Freeze chunks into read-only copies (the producer may reuse its buffers)."""
        frozen = []
        for c in chunks:
            arrays = {name: _frozen(getattr(c, name)) for name in _CHUNK_ARRAYS}
            arrays["samples"] = _frozen(np.asarray(c.samples, dtype=np.float32))
            frozen.append(dataclasses.replace(c, **arrays))
        return cls(tuple(frozen), sample_rate_hz, decoder_steps)

    @property
    def audio_samples(self) -> int:
        """Samples over all chunks."""
        return sum(len(c.samples) for c in self.chunks)

    @property
    def nbytes(self) -> int:
        """Accounted size: the arrays plus a fixed overhead per chunk and per entry."""
        arrays = sum(CHUNK_OVERHEAD_BYTES + sum(getattr(c, name).nbytes for name in _CHUNK_ARRAYS
                                                if getattr(c, name) is not None) for c in self.chunks)
        return arrays + ENTRY_OVERHEAD_BYTES


@dataclass(frozen=True)
class CacheStats:
    """A snapshot of the counters (cumulative since start) and the current size."""

    max_bytes: int
    bytes: int
    entries: int
    hits: int
    misses: int
    coalesced: int  # misses that joined a synthesis already in flight (single-flight)
    admitted: int
    rejected_first_sighting: int  # completed syntheses not stored: seen once so far
    rejected_too_large: int  # completed syntheses larger than the whole cache
    evictions: int
    evicted_bytes: int

    @property
    def hit_ratio(self) -> float:
        """hits / (hits + misses); 0 before the first lookup."""
        looked = self.hits + self.misses
        return self.hits / looked if looked else 0.0


class AudioCache:
    """LRU by bytes behind a doorkeeper: a segment is stored only from its `admit_after_sightings`-th sighting.

    A sighting is a lookup that missed (a miss that joins one in flight counts too). The doorkeeper remembers
    the digests of the last `doorkeeper_entries` keys seen, so a stream of one-off sentences (account
    numbers, amounts) passes through without evicting the prompts that repeat. `force=True` on `put` (warm-up)
    skips the doorkeeper. The total accounted size (`CachedSegment.nbytes` + `CacheKey.nbytes`) never exceeds
    `max_bytes`: an entry larger than that is not stored, and admission evicts least-recently-used entries
    first. Thread-safe (the event loop writes, the metrics thread reads `stats()`).
    """

    def __init__(self, max_bytes: int, admit_after_sightings: int = 2, doorkeeper_entries: int = 16384) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes={max_bytes}: must be >= 0")
        if admit_after_sightings < 1:
            raise ValueError(f"admit_after_sightings={admit_after_sightings}: must be >= 1 (1 = store every segment)")
        if doorkeeper_entries < 0:
            raise ValueError(f"doorkeeper_entries={doorkeeper_entries}: must be >= 0")
        self.max_bytes = max_bytes
        self.admit_after_sightings = admit_after_sightings
        self.doorkeeper_entries = doorkeeper_entries
        self._entries: collections.OrderedDict[CacheKey, tuple[CachedSegment, int]] = collections.OrderedDict()
        self._sightings: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._hits = self._misses = self._coalesced = self._admitted = 0
        self._rejected_first = self._rejected_large = self._evictions = self._evicted_bytes = 0

    def get(self, key: CacheKey) -> CachedSegment | None:
        """The entry (marked most recently used) or None; counts a hit or a miss and, on a miss, a sighting."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self._hits += 1
                return found[0]
            self._misses += 1
            self._sight(key.digest)
            return None

    def note_coalesced(self) -> None:
        """A miss was served by a synthesis already in flight."""
        with self._lock:
            self._coalesced += 1

    def _sight(self, digest: bytes) -> None:
        if self.doorkeeper_entries == 0:
            return
        count = self._sightings.pop(digest, 0) + 1
        self._sightings[digest] = count
        while len(self._sightings) > self.doorkeeper_entries:
            self._sightings.popitem(last=False)

    def put(self, key: CacheKey, segment: CachedSegment, force: bool = False) -> bool:
        """Store a completed synthesis if admitted (see the class docstring); True when stored."""
        size = segment.nbytes + key.nbytes
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return True
            seen = self._sightings.get(key.digest, 0)
            if not force and self.admit_after_sightings > 1 and seen < self.admit_after_sightings:
                self._rejected_first += 1
                return False
            if size > self.max_bytes:
                self._rejected_large += 1
                return False
            while self._bytes + size > self.max_bytes:
                _, (_, old_size) = self._entries.popitem(last=False)
                self._bytes -= old_size
                self._evictions += 1
                self._evicted_bytes += old_size
            self._entries[key] = (segment, size)
            self._bytes += size
            self._sightings.pop(key.digest, None)  # stored now: the doorkeeper slot goes to another key
            self._admitted += 1
            return True

    def clear(self) -> int:
        """Drop every entry and sighting; returns the entries dropped."""
        with self._lock:
            n = len(self._entries)
            self._entries.clear()
            self._sightings.clear()
            self._bytes = 0
            return n

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    @property
    def bytes(self) -> int:
        """Accounted bytes of the stored entries (≤ max_bytes)."""
        return self._bytes

    def stats(self) -> CacheStats:
        """A consistent snapshot of the counters."""
        with self._lock:
            return CacheStats(
                max_bytes=self.max_bytes, bytes=self._bytes, entries=len(self._entries),
                hits=self._hits, misses=self._misses, coalesced=self._coalesced, admitted=self._admitted,
                rejected_first_sighting=self._rejected_first, rejected_too_large=self._rejected_large,
                evictions=self._evictions, evicted_bytes=self._evicted_bytes,
            )
