"""AudioCache: keys cover every audio input, admission needs a second sighting, the byte bound holds under churn."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.audio_cache import AudioCache, CachedSegment, CacheKey
from engine.request import AudioChunk, SynthesisOptions, SynthesisRequest


def segment(n_samples: int, value: float = 0.5, chunk: int = 100) -> CachedSegment:
    chunks = []
    for start in range(0, n_samples, chunk):
        n = min(chunk, n_samples - start)
        chunks.append(AudioChunk(np.full(n, value, np.float32), start, np.array([start // chunk], np.int64),
                                 start == 0, 8000))
    return CachedSegment.record(chunks, 8000, decoder_steps=len(chunks))


def key(ids=(1, 2, 3), voice="v", version="m1", **kw) -> CacheKey:
    return CacheKey.of(SynthesisRequest("r", ids, voice=voice, **kw), voice, version)


def test_key_covers_voice_version_ids_seed_and_audio_options() -> None:
    base = key()
    assert key() == base and hash(key()) == hash(base)
    assert CacheKey.of(SynthesisRequest("other-id", (1, 2, 3), voice="v"), "v", "m1") == base  # the id is not audio
    assert key(voice="w") != base
    assert key(version="m2") != base
    assert key(ids=(1, 2, 4)) != base
    assert key(seed=1) != base
    assert key(options=SynthesisOptions(first_chunk_frames=8)) != base
    assert key(options=SynthesisOptions(chunk_frames=8)) != base
    assert key(options=SynthesisOptions(streaming=False)) == base  # scheduling only
    assert key(options=SynthesisOptions(deadline_margin_ms=70.0)) == base  # scheduling only
    assert base.digest != key(seed=1).digest


def test_first_sighting_is_not_stored_second_is() -> None:
    cache = AudioCache(max_bytes=10**6, admit_after_sightings=2)
    k, seg = key(), segment(1000)
    assert cache.get(k) is None
    assert not cache.put(k, seg)
    assert cache.get(k) is None
    assert cache.put(k, seg)
    assert cache.get(k) is seg
    s = cache.stats()
    assert (s.hits, s.misses, s.admitted, s.rejected_first_sighting, s.entries) == (1, 2, 1, 1, 1)
    assert s.hit_ratio == pytest.approx(1 / 3)
    assert s.bytes == seg.nbytes + k.nbytes


def test_force_and_admit_after_one() -> None:
    cache = AudioCache(max_bytes=10**6, admit_after_sightings=2)
    assert cache.put(key(), segment(10), force=True)
    eager = AudioCache(max_bytes=10**6, admit_after_sightings=1)
    assert eager.put(key(), segment(10))


def test_stored_audio_is_a_read_only_copy() -> None:
    samples = np.ones(50, np.float32)
    seg = CachedSegment.record([AudioChunk(samples, 0, np.array([0]), True, 8000)], 8000, 1)
    samples[:] = 7.0  # the producer reuses its buffer
    assert float(seg.chunks[0].samples.max()) == 1.0
    with pytest.raises(ValueError):
        seg.chunks[0].samples[0] = 2.0


def test_every_array_of_a_chunk_is_stored_read_only_and_counted() -> None:
    arrays = {"input_positions": np.array([0, 1]), "step_start_samples": np.array([0, 20]),
              "ahead_positions": np.array([2, 3, 3]), "ahead_step_start_samples": np.array([50, 70, 90])}
    chunk = AudioChunk(np.ones(50, np.float32), 0, first=True, sample_rate_hz=8000, **arrays)
    seg = CachedSegment.record([chunk], 8000, 1)
    for name, array in arrays.items():
        kept = getattr(seg.chunks[0], name)
        array += 100  # the producer's arrays may change later
        assert kept.tolist() == (array - 100).tolist()
        with pytest.raises(ValueError):
            kept[0] = 9
    bare = CachedSegment.record([AudioChunk(np.ones(50, np.float32), 0, np.array([0, 1]), True, 8000)], 8000, 1)
    assert seg.nbytes - bare.nbytes == sum(a.nbytes for n, a in arrays.items() if n != "input_positions")


def test_lru_eviction_keeps_recently_used_and_never_exceeds_bound() -> None:
    one = segment(1000)
    size = one.nbytes + key(ids=(1,)).nbytes
    cache = AudioCache(max_bytes=3 * size, admit_after_sightings=1)
    for i in (1, 2, 3):
        assert cache.put(key(ids=(i,)), segment(1000))
    assert cache.get(key(ids=(1,))) is not None  # 1 is now most recent; 2 is the oldest
    assert cache.put(key(ids=(4,)), segment(1000))
    assert key(ids=(2,)) not in cache and key(ids=(1,)) in cache and key(ids=(4,)) in cache
    assert cache.stats().evictions == 1 and cache.bytes <= cache.max_bytes


def test_entry_larger_than_the_cache_is_refused() -> None:
    cache = AudioCache(max_bytes=1000, admit_after_sightings=1)
    assert not cache.put(key(), segment(10_000))
    assert cache.stats().rejected_too_large == 1 and len(cache) == 0


def test_doorkeeper_is_bounded_and_one_offs_do_not_evict_hot_prompts() -> None:
    hot = [key(ids=(100 + i,)) for i in range(3)]
    cache = AudioCache(max_bytes=10**6, admit_after_sightings=2, doorkeeper_entries=64)
    for k in hot:
        cache.get(k)
        cache.put(k, segment(1000))
        cache.get(k)
        assert cache.put(k, segment(1000))
    for i in range(1000):  # a stream of one-off sentences
        k = key(ids=(5000 + i,))
        assert cache.get(k) is None
        assert not cache.put(k, segment(1000))
    assert all(k in cache for k in hot) and len(cache) == 3
    assert len(cache._sightings) <= 64  # noqa: SLF001 - the doorkeeper's own bound


def test_bad_settings_raise() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        AudioCache(max_bytes=-1)
    with pytest.raises(ValueError, match="admit_after_sightings"):
        AudioCache(max_bytes=10, admit_after_sightings=0)


@settings(max_examples=60, deadline=None)
@given(
    max_kib=st.integers(min_value=1, max_value=64),
    ops=st.lists(st.tuples(st.integers(0, 30), st.integers(1, 4000), st.booleans()), min_size=1, max_size=120),
    admit_after=st.integers(1, 3),
)
def test_byte_bound_holds_under_churn(max_kib: int, ops: list[tuple[int, int, bool]], admit_after: int) -> None:
    cache = AudioCache(max_bytes=max_kib * 1024, admit_after_sightings=admit_after, doorkeeper_entries=16)
    for ident, n_samples, force in ops:
        k = key(ids=(ident,))
        found = cache.get(k)
        if found is None:
            cache.put(k, segment(n_samples, value=ident / 100.0), force=force)
        else:  # a hit returns exactly what was stored for that key
            assert float(found.chunks[0].samples[0]) == pytest.approx(ident / 100.0)
        assert cache.bytes <= cache.max_bytes
        stored = sum(seg.nbytes + kk.nbytes for kk, (seg, _) in cache._entries.items())  # noqa: SLF001
        assert stored == cache.bytes
    s = cache.stats()
    assert s.entries == len(cache) and s.bytes == cache.bytes
