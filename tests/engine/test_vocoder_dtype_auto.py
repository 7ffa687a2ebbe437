"""engine.vocoder_dtype=auto: the bf16 vocoder where the CPU has native bf16, fp32 elsewhere and on CUDA."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from models.cpu_features import cpu_flags


def test_auto_follows_the_cpus_native_bf16() -> None:
    auto = EngineConfig(voices=("v",), vocoder_dtype="auto")
    assert auto.resolved_vocoder_dtype(native_bf16=True) == "bfloat16"
    assert auto.resolved_vocoder_dtype(native_bf16=False) == "float32"
    cuda = EngineConfig(voices=("v",), device="cuda", weights="fp32", vocoder_dtype="auto")
    assert cuda.resolved_vocoder_dtype(native_bf16=True) == "float32"  # CUDA: engine.dtype sets every model's
    for fixed in ("float32", "bfloat16"):
        assert EngineConfig(voices=("v",), vocoder_dtype=fixed).resolved_vocoder_dtype(native_bf16=not fixed) == fixed
    assert EngineConfig(voices=("v",)).vocoder_dtype == "float32"  # the library's default stays exact fp32
    with pytest.raises(ValueError, match="float32, bfloat16 or auto"):
        EngineConfig(voices=("v",), vocoder_dtype="fp16")


def test_cpu_flags_read_the_first_cpu() -> None:
    info = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n"
    assert cpu_flags(info) == {"fpu", "avx2", "avx512f", "avx512_bf16"}
    assert cpu_flags("no flags here") == frozenset()


def test_the_audio_cache_keys_on_the_resolved_vocoder_dtype() -> None:
    """Audio from a bf16 vocoder is not fp32's: the cache's fingerprint carries the dtype `auto` resolved to."""
    from engine.cached_engine import AUDIO_ENGINE_SETTINGS, CachingEngine

    assert "vocoder_dtype" in AUDIO_ENGINE_SETTINGS

    class Backend:
        config = EngineConfig(voices=("v",), vocoder_dtype="auto")

    class Engine:
        backend = Backend()

    settings = CachingEngine._engine_settings.__get__(type("C", (), {"backend": Backend()})())()
    assert settings["vocoder_dtype"] == Backend.config.resolved_vocoder_dtype() != "auto"
