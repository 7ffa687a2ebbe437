"""voxpool engine: one thread per device runs an instant request pool with module-wise batching (torch-free import)."""

# The OpenMP wait policy is the library's default (workers spin a while between parallel regions). PASSIVE was the
# default for a few hours: it cut CPU 10x on a host oversubscribed by other jobs (load 13-22), but on an idle 2-core
# host it cost 30 % of the engine's throughput in process and more over gRPC (16 streams in process: 58 % of chunks
# on time at 14.1x RT vs 91.6 % at 21.0x with the default; docs/engine.md "The edge-engine gap"). Operators of
# oversubscribed nodes can still set OMP_WAIT_POLICY=PASSIVE in the environment.

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
