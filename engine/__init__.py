"""voxpool engine: one thread per device runs an instant request pool with module-wise batching (torch-free import)."""

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
