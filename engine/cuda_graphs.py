"""CUDA graphs (CUDA only, best effort): one decoder step per power-of-two batch × input-length bucket, captured
in place and replayed k times for a call of k steps. CPU runners never import or touch this module. The
streaming vocoder runs eagerly (its per-slot layer context is gathered and scattered per call; not captured yet).

Each step graph owns a static DecoderState [B_bucket, T_bucket, ...]: the live rows are copied into its prefix,
padding rows stay `finished` (they produce nothing), and the graph runs `decode(state, 1)` and writes the new
state back into those same static buffers, so replaying it k times advances k steps (the scheduler asks for 1–8
steps a call; one graph per step count would multiply the graphs by eight). After the replays the live prefix
is scattered back into the runner's slab. All graphs share one memory pool and are captured largest first, so
the smaller ones reuse its memory. A bucket that fails to capture is logged and decodes eagerly.

Capture runs with Python's garbage collector paused: a collection inside a capture can destroy another
runner's graphs, which invalidates the capture in progress (seen on an H200 with several engines built in one
process). The graphs hold their runner weakly, so a dropped runner frees its graphs without the collector. Captures
in one process run one at a time (engines on other threads may be warming up too: the collector pause is
process-wide), in CUDA's thread-local capture mode, so another thread's ordinary CUDA work cannot invalidate them.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import weakref
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import torch

from engine import slab
from engine.batching import pow2_bucket
from engine.config import EngineConfig
from models.tacotron2 import DecodeOutput, DecoderState, Tacotron2
from models.transfer import device_tensor

logger = logging.getLogger(__name__)
_CAPTURE_LOCK = threading.Lock()  # one capture at a time per process (the collector pause below is process-wide)


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


Step = Callable[[], DecodeOutput]  # one decoder step over the static inputs, written back into them


class CudaCapture:
    """Real capture: CUDA graphs on `device`, sharing one memory pool, warmed on a side stream (CUDA only)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(device=device)  # capture stream on the runner's device, not device 0

    def warm(self, fn: Callable[[], Any]) -> None:
        """Run fn twice on a side stream (cuDNN/cuBLAS autotuning and lazy init happen outside the capture)."""
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream(self.device).wait_stream(side)

    def capture(self, fn: Step) -> tuple[Any, DecodeOutput]:
        """(graph with replay(), fn's outputs as static tensors that each replay rewrites)."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream, capture_error_mode="thread_local"):
            result = fn()
        return graph, result


class _EagerReplay:
    """replay() runs the step again on the static inputs (which it advances) and writes its DecodeOutput into the
    tensors the first run returned: what a graph's replay does."""

    def __init__(self, fn: Step, result: DecodeOutput) -> None:
        self.fn, self.result = fn, result

    def replay(self) -> None:
        out = self.fn()
        for name in DecodeOutput.__dataclass_fields__:
            getattr(self.result, name).copy_(getattr(out, name))


class EagerCapture:
    """Stand-in for CudaCapture on any device (the CPU test suite): 'capturing' runs the step once and a replay
    re-runs it on the same static buffers, so the bookkeeping around the graphs (bucket choice, static buffers,
    padding rows, k replays of one step, scatter of the live prefix) runs exactly as on a GPU; only the real
    capture is GPU-only."""

    def warm(self, fn: Callable[[], Any]) -> None:
        fn()

    def capture(self, fn: Step) -> tuple[Any, DecodeOutput]:
        result = fn()
        return _EagerReplay(fn, result), result


class _DecodeGraph:
    """One captured decoder step for a fixed batch bucket B and input-length bucket T, in place."""

    def __init__(self, acoustic: Tacotron2, device: torch.device, dtype: torch.dtype, batch: int, length: int,
                 dropout: bool, capture: CudaCapture | EagerCapture) -> None:
        self.batch, self.length = batch, length
        state = DecoderState.allocate(acoustic.config, batch, length, device=device, dtype=dtype)
        state.lengths.fill_(1)
        self.inputs = {f: getattr(state, f) for f in slab.FIELDS}

        def warm_step() -> None:  # active rows: an all-finished state would stop before its first kernel
            copy = DecoderState(**{f: v.clone() for f, v in self.inputs.items()})
            copy.finished.fill_(False)
            acoustic.decode(copy, 1, dropout)

        capture.warm(warm_step)

        def step() -> DecodeOutput:
            live = DecoderState(**self.inputs)  # decode rebinds the state's fields to new tensors ...
            out = acoustic.decode(live, 1, dropout)
            for f in slab.MUTABLE:  # ... which go back into the static inputs: the next replay is the next step
                new = getattr(live, f)
                if new is not self.inputs[f]:
                    self.inputs[f].copy_(new)
            return out

        self.graph, self.out = capture.capture(step)
        # the folded location filter the graph reads is cached on the model: hold it while the graph lives
        self._location_filter = acoustic._location_filter(dtype)

    def run(self, state: DecoderState, rows: torch.Tensor, steps: int) -> DecodeOutput:
        """Copy the rows in, replay `steps` times, scatter the changed fields back; outputs for the live rows."""
        n, t = rows.numel(), self.length
        live = slab.gather(state, rows, t)
        for f in slab.FIELDS:
            self.inputs[f][:n].copy_(getattr(live, f))
        self.inputs["finished"][n:].fill_(True)  # padding rows produce nothing
        frames, stop, peak, n_steps = [], [], [], []
        truncated = None
        for _ in range(steps):
            self.graph.replay()
            o = self.out
            frames.append(o.frames[:n].clone())
            stop.append(o.stop[:n].clone())
            peak.append(o.peak[:n].clone())
            n_steps.append(o.n_steps[:n].clone())
            truncated = o.truncated[:n].clone() if truncated is None else truncated | o.truncated[:n]
        slab.scatter(state, rows, {f: self.inputs[f][:n] for f in slab.MUTABLE}, t)
        return DecodeOutput(
            frames=torch.cat(frames, 1), stop=torch.cat(stop, 1), peak=torch.cat(peak, 1),
            finished=self.out.finished[:n].clone(), n_steps=torch.stack(n_steps).sum(0), truncated=truncated,
        )


class CudaGraphs:
    """The graphs of one TorchRunner (built only when the runner's device is CUDA and config.cuda_graphs)."""

    def __init__(self, runner: GraphHost, config: EngineConfig, capture: EagerCapture | None = None) -> None:
        """`capture`: EagerCapture to run the bookkeeping without a GPU (tests); default: real CUDA graphs."""
        if capture is None and runner.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.runner = weakref.proxy(runner)  # the runner holds these graphs: no reference cycle (module docstring)
        self.dropout = config.prenet_dropout
        self.max_batch = pow2_bucket(min(config.cuda_graph_max_batch, config.max_slots))
        self.batch_buckets = [1 << i for i in range(self.max_batch.bit_length())]
        top = runner.max_input_len
        self.length_buckets = sorted({min(top, 1 << i) for i in range(4, top.bit_length() + 1)} | {top})
        self.capturer = capture if capture is not None else CudaCapture(runner.device)
        self._decode: dict[tuple[int, int], _DecodeGraph] = {}

    def capture(self) -> None:
        """Capture every decode bucket (largest first), the garbage collector paused; a bucket that fails is logged
        and decodes eagerly."""
        runner = self.runner
        failed: list[tuple[int, int]] = []
        with _CAPTURE_LOCK:
            self._capture_all(runner, failed)
        if failed:
            logger.error("voice %s: %d of %d decoder graph buckets failed to capture: %s", runner.voice, len(failed),
                         len(failed) + len(self._decode), failed)
        logger.info("voice %s: %d decoder graphs captured", runner.voice, len(self._decode))

    def _capture_all(self, runner: GraphHost, failed: list[tuple[int, int]]) -> None:
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            with torch.inference_mode(), _on_device(runner.device):
                for batch in reversed(self.batch_buckets):
                    for length in reversed(self.length_buckets):
                        try:
                            self._decode[(batch, length)] = _DecodeGraph(
                                runner.acoustic, runner.device, runner.state_dtype, batch, length, self.dropout,
                                self.capturer,
                            )
                        except Exception as exc:  # noqa: BLE001 -- that bucket decodes eagerly
                            if not failed:
                                logger.error("voice %s: decoder CUDA graph capture failed for batch %d × length %d "
                                             "(%r); such calls decode eagerly", runner.voice, batch, length, exc)
                            failed.append((batch, length))
        finally:
            if was_enabled:
                gc.enable()

    def _bucket(self, slots: Sequence[int]) -> tuple[int, int] | None:
        longest = int(self.runner.lengths[list(slots)].max())
        length = next((b for b in self.length_buckets if b >= longest), None)
        if length is None:
            return None
        return pow2_bucket(len(slots)), length

    def can_decode(self, n: int, steps: int, dropout: bool) -> bool:
        """True when captured graphs may serve this call (any step count: one step graph replayed `steps` times)."""
        return bool(self._decode) and steps >= 1 and dropout == self.dropout and n <= self.max_batch

    def decode(self, slots: Sequence[int], steps: int) -> DecodeOutput:
        """Replay the bucket's graph `steps` times for these slots (eager when the bucket is missing)."""
        key = self._bucket(slots)
        graph = self._decode.get(key) if key is not None else None
        rows = device_tensor(slots, self.runner.device)
        if graph is None:
            sub = self.runner.state.index_select(rows)
            out = self.runner.acoustic.decode(sub, steps, dropout=self.dropout)
            slab.scatter(self.runner.state, rows, sub, sub.max_len)
            return out
        return graph.run(self.runner.state, rows, steps)


def _on_device(device: torch.device) -> Any:
    """The runner's CUDA device as the current one (streams and captures land there, not on device 0)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
