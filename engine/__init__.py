"""voxpool engine: one thread per device runs an instant request pool with module-wise batching (torch-free import)."""

# The OpenMP wait policy is left at the library's default (workers spin a while between parallel regions): it is the
# faster one on a host the engine has to itself; PASSIVE saves CPU only on a host oversubscribed by other jobs
# (docs/engine.md, "The edge-engine gap"). Operators of such nodes can set OMP_WAIT_POLICY=PASSIVE in the environment.

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
