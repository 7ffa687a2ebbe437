"""CUDA graphs (CUDA only, best effort): the decoder call per power-of-two batch × input-length bucket, replayed
from static buffers. CPU runners never import or touch this module. The streaming vocoder runs eagerly (its
per-slot layer context is gathered and scattered per call; not captured yet).

Each decode graph owns a static DecoderState [B_bucket, T_bucket, ...]: the live rows are copied into its prefix,
padding rows stay `finished` (they produce nothing), the graph replays `decode(state, steps)`, and the changed
fields of the live prefix are scattered back into the runner's slab. All graphs share one memory pool and are
captured largest first, so the smaller ones reuse its memory. A shape that fails to capture (for example a model
that syncs with the host inside `decode`) is logged once and runs eagerly from then on.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import torch

from engine import slab
from engine.batching import pow2_bucket
from engine.config import EngineConfig
from models.tacotron2 import DecodeOutput, DecoderState, Tacotron2

logger = logging.getLogger(__name__)


class GraphHost(Protocol):
    """What the graphs read from their runner (engine.runner.TorchRunner), named here so this module does not
    import the runner (which imports this one)."""

    voice: str
    acoustic: Tacotron2
    device: torch.device
    state_dtype: torch.dtype
    state: DecoderState
    lengths: np.ndarray
    max_input_len: int


class CudaCapture:
    """Real capture: CUDA graphs sharing one memory pool, warmed on a side stream (CUDA only)."""

    def __init__(self) -> None:
        self.pool = torch.cuda.graph_pool_handle()

    def warm(self, fn: Callable[[], Any]) -> None:
        """Run fn twice on a side stream (cuDNN/cuBLAS autotuning and lazy init happen outside the capture)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)

    def capture(self, fn: "Step") -> tuple[Any, tuple[DecodeOutput, DecoderState]]:
        """(graph with replay(), fn's outputs as static tensors that each replay rewrites)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            result = fn()
        return graph, result


Step = Callable[[], tuple[DecodeOutput, DecoderState]]  # decode over a state built on the static inputs


class _EagerReplay:
    """replay() runs the step again on the static inputs and writes its outputs (DecodeOutput and the state's
    changed fields) into the tensors the first run returned: what a graph's replay does to its static outputs."""

    def __init__(self, fn: Step, result: tuple[DecodeOutput, DecoderState]) -> None:
        self.fn, self.result = fn, result

    def replay(self) -> None:
        out, state = self.fn()
        for name in DecodeOutput.__dataclass_fields__:
            getattr(self.result[0], name).copy_(getattr(out, name))
        for name in slab.MUTABLE:
            getattr(self.result[1], name).copy_(getattr(state, name))


class EagerCapture:
    """Stand-in for CudaCapture on any device (the CPU test suite): 'capturing' runs the step once and a replay
    re-runs it on the same static buffers, so the bookkeeping around the graphs (bucket choice, static buffers,
    padding rows, scatter of the live prefix) runs exactly as on a GPU; only the real capture is GPU-only."""

    def warm(self, fn: Callable[[], Any]) -> None:
        fn()

    def capture(self, fn: Step) -> tuple[Any, tuple[DecodeOutput, DecoderState]]:
        result = fn()
        return _EagerReplay(fn, result), result


class _DecodeGraph:
    """One captured `decode(state, steps)` for a fixed batch bucket B and input-length bucket T."""

    def __init__(self, runner: GraphHost, batch: int, length: int, steps: int, dropout: bool,
                 capture: CudaCapture | EagerCapture) -> None:
        acoustic = runner.acoustic
        self.batch, self.length = batch, length
        state = DecoderState.allocate(acoustic.config, batch, length, device=runner.device, dtype=runner.state_dtype)
        state.lengths.fill_(1)
        self.inputs = {f: getattr(state, f) for f in slab.FIELDS}
        capture.warm(lambda: acoustic.decode(DecoderState(**{f: v.clone() for f, v in self.inputs.items()}),
                                             steps, dropout))
        def step() -> tuple[DecodeOutput, DecoderState]:
            live = DecoderState(**self.inputs)  # the static inputs (decode may rebind fields to new outputs)
            return acoustic.decode(live, steps, dropout), live

        self.graph, (self.out, after) = capture.capture(step)
        self.outputs = {f: getattr(after, f) for f in slab.MUTABLE}

    def run(self, state: DecoderState, rows: torch.Tensor) -> DecodeOutput:
        """Copy the rows in, replay, scatter the changed fields back; outputs for the live rows only."""
        n, t = rows.numel(), self.length
        live = slab.gather(state, rows, t)
        for f in slab.FIELDS:
            self.inputs[f][:n].copy_(getattr(live, f))
        self.inputs["finished"][n:].fill_(True)  # padding rows produce nothing
        self.graph.replay()
        slab.scatter(state, rows, {f: v[:n] for f, v in self.outputs.items()}, t)
        o = self.out
        return DecodeOutput(
            frames=o.frames[:n].clone(), stop=o.stop[:n].clone(), peak=o.peak[:n].clone(),
            finished=o.finished[:n].clone(), n_steps=o.n_steps[:n].clone(), truncated=o.truncated[:n].clone(),
        )


class CudaGraphs:
    """The graphs of one TorchRunner (built only when the runner's device is CUDA and config.cuda_graphs)."""

    def __init__(self, runner: GraphHost, config: EngineConfig, capture: EagerCapture | None = None) -> None:
        """`capture`: EagerCapture to run the bookkeeping without a GPU (tests); default: real CUDA graphs."""
        if capture is None and runner.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.runner = runner
        self.steps = config.decode_steps_per_iteration
        self.dropout = config.prenet_dropout
        self.max_batch = pow2_bucket(min(config.cuda_graph_max_batch, config.max_slots))
        self.batch_buckets = [1 << i for i in range(self.max_batch.bit_length())]
        top = runner.max_input_len
        self.length_buckets = sorted({min(top, 1 << i) for i in range(4, top.bit_length() + 1)} | {top})
        self.capturer = capture if capture is not None else CudaCapture()
        self._decode: dict[tuple[int, int], _DecodeGraph] = {}
        self._disabled = False

    def capture(self) -> None:
        """Capture every decode bucket (largest first)."""
        with torch.inference_mode():
            for batch in reversed(self.batch_buckets):
                for length in reversed(self.length_buckets):
                    if self._disabled:
                        return
                    try:
                        self._decode[(batch, length)] = _DecodeGraph(
                            self.runner, batch, length, self.steps, self.dropout, self.capturer
                        )
                    except Exception as exc:  # noqa: BLE001
                        self._disabled = True
                        logger.warning("decoder CUDA graph capture failed (%r); decoding eagerly", exc)
        logger.info("voice %s: %d decoder graphs captured", self.runner.voice, len(self._decode))

    def _bucket(self, slots: Sequence[int]) -> tuple[int, int] | None:
        longest = int(self.runner.lengths[list(slots)].max())
        length = next((b for b in self.length_buckets if b >= longest), None)
        if length is None:
            return None
        return pow2_bucket(len(slots)), length

    def can_decode(self, n: int, steps: int, dropout: bool) -> bool:
        """True when a captured graph fits this call."""
        return not self._disabled and bool(self._decode) and steps == self.steps and dropout == self.dropout \
            and n <= self.max_batch

    def decode(self, slots: Sequence[int], steps: int) -> DecodeOutput:
        """Replay the bucket's graph for these slots (eager fallback when the bucket is missing)."""
        key = self._bucket(slots)
        graph = self._decode.get(key) if key is not None else None
        rows = torch.tensor(list(slots), dtype=torch.long, device=self.runner.device)
        if graph is None:
            sub = self.runner.state.index_select(rows)
            out = self.runner.acoustic.decode(sub, steps, dropout=self.dropout)
            slab.scatter(self.runner.state, rows, sub, sub.max_len)
            return out
        return graph.run(self.runner.state, rows)
