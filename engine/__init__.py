"""voxpool engine: one thread per device runs an instant request pool with module-wise batching (torch-free import)."""

import os as _os

# OpenMP workers sleep instead of spinning between parallel regions (docs/engine.md "The edge-engine gap"): on the
# 2-core host the engine's two OpenMP threads share the cores with the event loop, gRPC and the frontend, and a
# spinning worker took the CPU those needed while its own barrier waited for a pre-empted partner (measured 12x
# less CPU per audio second and 12x more real time on a loaded host). GNU OpenMP reads this once, when torch
# loads, which is after this line in every entry point (`import engine` does not import torch). An explicit
# OMP_WAIT_POLICY wins; set it to an empty string for the library default.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from engine.async_engine import AsyncEngine, EngineBackend
from engine.config import EngineConfig
from engine.core import EngineCore, Health
from engine.errors import (
    ConsumerStalled,
    EngineDead,
    EngineStopped,
    EngineError,
    EngineOverloaded,
    InvalidRequest,
    RequestFailed,
)
from engine.output import OutputStream
from engine.request import (
    AudioChunk,
    Finished,
    FinishReason,
    RequestTimings,
    SynthesisOptions,
    SynthesisRequest,
)
from engine.telemetry import EngineCounters, EngineObserver, IterationStats

__all__ = [
    "AsyncEngine",
    "AudioChunk",
    "ConsumerStalled",
    "EngineBackend",
    "EngineConfig",
    "EngineCore",
    "EngineCounters",
    "EngineDead",
    "EngineStopped",
    "EngineError",
    "EngineObserver",
    "EngineOverloaded",
    "Finished",
    "FinishReason",
    "Health",
    "InvalidRequest",
    "IterationStats",
    "OutputStream",
    "RequestFailed",
    "RequestTimings",
    "SynthesisOptions",
    "SynthesisRequest",
]
