"""EngineConfig: every engine knob in one dataclass, with `from_dict` (unknown keys rejected) and validation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from models.strict_config import known_fields

_DEVICES = ("cpu", "cuda")
_DTYPES = ("float32", "bfloat16", "float16")
_WEIGHTS = ("fp32", "int8", "bf16")


@dataclass
class EngineConfig:
    """Engine settings. Frames are mel frames (hop 300 at 24 kHz: 12.5 ms each); steps are decoder steps (r frames)."""

    # --- where and how the models run
    device: str = "cpu"  # cpu | cuda | cuda:N
    dtype: str = "float32"  # activations/state dtype: float32 | bfloat16 | float16 (CUDA)
    weights: str = "int8"  # load_voice weight path: int8 (CPU fast path; docs/benchmarks.md) | fp32 | bf16; CUDA: not int8
    num_threads: int = 0  # torch intra-op threads of the engine thread; 0 = every core of the affinity mask (engine/threads.py)
    voices: tuple[str, ...] = ("baker-zh",)  # voices loaded by AsyncEngine.from_config
    cuda_graphs: bool = True  # CUDA only: the decoder step as CUDA graphs per batch × input-length bucket (engine/cuda_graphs.py)
    cuda_graph_max_batch: int = 64  # largest captured bucket; bigger batches run eagerly
    vocoder_fast_path: bool = True  # postnet streamed (each frame once) + vocoder's 1×1 convs as matmuls, polyphase PQMF; false: reference layers
    # CPU: float32 | bfloat16 (a bf16 copy of the vocoder; postnet and mel stay fp32) | auto (bfloat16 where the CPU
    # has native bf16 arithmetic, float32 elsewhere and on CUDA: `resolved_vocoder_dtype`)
    vocoder_dtype: str = "float32"

    # --- the pool
    max_slots: int = 32  # requests decoding at once (rows of the preallocated decoder state)
    max_waiting: int = 64  # submitted requests waiting for a slot; beyond: EngineOverloaded at submit

    # --- module-wise batching
    max_encode_per_iteration: int = 4  # newcomers encoded per iteration (bounds the stall of running streams)
    max_decode_batch: int = 0  # 0 = max_slots
    max_vocode_batch: int = 16  # chunks vocoded in one batched call
    max_vocode_frames_per_iteration: int = 256  # mel frames vocoded per iteration (the most urgent chunk always goes)
    prenet_dropout: bool = True  # Tacotron2 prenet dropout at inference (as trained); masks depend on (seed, step)
    decode_steps_per_iteration: int = 1  # fewest decoder steps per batched decode call (cancel is noticed between calls)
    max_decode_steps_per_iteration: int = 8  # catch-up: after a long iteration the decoder runs up to this many steps
    decode_pace: float = 2.0  # decoder steps per call keep mel this many times faster than playback (scheduler.py)
    # > 0: the decoder runs at most this often while no row is fresh or short of mel (more rows per call, scheduler.py)
    decode_interval_ms: float = 50.0
    window_bucket_frames: int = 8  # postnet calls (and last vocoder calls past max_chunk_frames) round up to this (fewer shapes)

    # --- chunking
    first_chunk_frames: int = 16  # audio of the first chunk (200 ms at hop 300 / 24 kHz); the first call feeds + the vocoder delay
    chunk_frames: int = 24  # later chunks (300 ms)
    max_chunk_frames: int = 96  # later chunks grow (chunk_frames·2^k) up to this when the decoder is ahead
    min_chunk_frames: int = 8  # a starving stream vocodes what it has, down to this (multiples of window_bucket_frames; 0 = never)
    starving_buffer_ms: float = 150.0  # ... when its buffered audio (less the consumer's deadline margin) is below this

    # --- streaming-aware scheduling (engine/scheduler.py)
    urgency_margin_ms: float = 200.0  # urgent when buffered audio < next chunk + this margin
    max_ramping_streams: int = 4  # first chunks wait while this many streams have sent < 3 chunks (0 = no limit)
    max_lead_ms: float = 4000.0  # a streaming row whose decided mel is this far ahead of its call's playback waits
    max_vocode_wait_ms: float = 150.0  # a non-urgent ready chunk waits at most this long for a bigger batch
    min_vocode_batch: int = 4  # non-urgent chunks alone are vocoded once this many are ready (or the wait expires)

    # --- bounds and faults
    max_unread_audio_ms: float = 30_000.0  # a stream with this much unread audio pauses (its request is not scheduled)
    stalled_consumer_timeout_ms: float = 30_000.0  # ... and fails with ConsumerStalled after being paused this long
    max_consecutive_failures: int = 16  # this many failed batches in a row (no success between) kill the loop

    def __post_init__(self) -> None:
        self.voices = tuple(self.voices)
        self.validate()

    def chunk_sizes(self, chunk_frames: int | None = None) -> tuple[int, ...]:
        """Sizes a later chunk may take: chunk_frames·2^k below max_chunk_frames, then max_chunk_frames.

        `chunk_frames` defaults to this config's (a request may set its own). Few sizes mean few vocoder
        window shapes (oneDNN builds kernels per shape, engine/threads.py).
        """
        sizes, n = [], chunk_frames or self.chunk_frames
        while n < self.max_chunk_frames:
            sizes.append(n)
            n *= 2
        sizes.append(self.max_chunk_frames)
        return tuple(sizes)

    def short_chunk_sizes(self, chunk_frames: int | None = None) -> tuple[int, ...]:
        """Sizes below chunk_frames a starving stream's chunk may take: multiples of window_bucket_frames from
        min_chunk_frames (rounded up to one), none when min_chunk_frames is 0. Few, so few vocoder shapes too."""
        if not self.min_chunk_frames:
            return ()
        step = self.window_bucket_frames
        first = -(-self.min_chunk_frames // step) * step
        return tuple(range(first, chunk_frames or self.chunk_frames, step))

    def resolved_vocoder_dtype(self, native_bf16: bool | None = None) -> str:
        """The vocoder's dtype on this machine: `auto` is bfloat16 on a CPU with native bf16 (`native_bf16`, read
        from the CPU when None), float32 elsewhere and on CUDA (where `dtype` sets every model's)."""
        if self.vocoder_dtype != "auto":
            return self.vocoder_dtype
        if self.device.split(":", 1)[0] != "cpu":
            return "float32"
        if native_bf16 is None:
            from models.cpu_features import has_native_bf16

            native_bf16 = has_native_bf16()
        return "bfloat16" if native_bf16 else "float32"

    @property
    def decode_batch_cap(self) -> int:
        """Largest decode batch (max_decode_batch, or max_slots when 0)."""
        return self.max_decode_batch or self.max_slots

    def validate(self) -> None:
        """Raise ValueError naming the field and the fix when a value is out of range."""
        base = self.device.split(":", 1)[0]
        if base not in _DEVICES:
            raise ValueError(f"engine.device={self.device!r}: use cpu, cuda or cuda:N")
        if self.dtype not in _DTYPES:
            raise ValueError(f"engine.dtype={self.dtype!r}: use one of {_DTYPES}")
        if self.weights not in _WEIGHTS:
            raise ValueError(f"engine.weights={self.weights!r}: use one of {_WEIGHTS}")
        if self.vocoder_dtype not in ("float32", "bfloat16", "auto"):
            raise ValueError(f"engine.vocoder_dtype={self.vocoder_dtype!r}: use float32, bfloat16 or auto")
        if base == "cuda" and self.weights == "int8":
            raise ValueError("engine.weights=int8 is the CPU fast path; on CUDA set engine.weights to fp32 or bf16")
        positive = (
            "max_slots", "max_encode_per_iteration", "max_vocode_batch", "max_vocode_frames_per_iteration",
            "decode_steps_per_iteration",
            "max_decode_steps_per_iteration",
            "window_bucket_frames", "first_chunk_frames", "chunk_frames", "max_chunk_frames",
            "min_vocode_batch", "max_consecutive_failures", "cuda_graph_max_batch",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"engine.{name}={getattr(self, name)}: must be >= 1")
        for name in ("max_waiting", "max_decode_batch", "num_threads", "max_ramping_streams", "min_chunk_frames"):
            if getattr(self, name) < 0:
                raise ValueError(f"engine.{name}={getattr(self, name)}: must be >= 0")
        if self.decode_pace <= 0:
            raise ValueError(f"engine.decode_pace={self.decode_pace}: must be > 0 (2 = mel twice as fast as playback)")
        if self.max_lead_ms < 1000.0:
            raise ValueError(f"engine.max_lead_ms={self.max_lead_ms}: must be >= 1000 (a full chunk and its "
                             "look-ahead must fit under it)")
        for name in ("decode_interval_ms", "urgency_margin_ms", "max_vocode_wait_ms", "max_unread_audio_ms", "stalled_consumer_timeout_ms",
                     "starving_buffer_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"engine.{name}={getattr(self, name)}: must be >= 0")
        if self.max_decode_steps_per_iteration < self.decode_steps_per_iteration:
            raise ValueError("engine.max_decode_steps_per_iteration must be >= decode_steps_per_iteration")
        if self.max_chunk_frames < max(self.first_chunk_frames, self.chunk_frames):
            raise ValueError("engine.max_chunk_frames must be >= first_chunk_frames and chunk_frames")
        if not self.voices:
            raise ValueError("engine.voices: name at least one voice")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EngineConfig":
        """Build from a mapping (YAML section); unknown keys and wrongly typed values raise ValueError."""
        defaults = cls()
        kwargs = {name: _coerce(name, value, getattr(defaults, name))
                  for name, value in known_fields(cls, data, ValueError, "engine").items()}
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Plain mapping (round-trips through from_dict)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["voices"] = list(self.voices)
        return out


def _coerce(name: str, value: Any, default: Any) -> Any:
    """Coerce a YAML/env value to the type of the field's default."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        raise ValueError(f"engine.{name}: expected true/false, got {value!r}")
    if isinstance(default, (int, float)):
        if isinstance(value, bool):
            raise ValueError(f"engine.{name}: expected a number, got {value!r}")
        try:
            out = type(default)(value)
        except (TypeError, ValueError):
            raise ValueError(f"engine.{name}: expected {type(default).__name__}, got {value!r}") from None
        if isinstance(default, int) and isinstance(value, float) and value != out:
            raise ValueError(f"engine.{name}: expected an integer, got {value!r}")
        return out
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ValueError(f"engine.{name}: expected a string, got {value!r}")
        return value
    if isinstance(default, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"engine.{name}: expected a list of names, got {value!r}")
        return tuple(value)
    return value
