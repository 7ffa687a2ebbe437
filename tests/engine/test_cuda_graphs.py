"""The CUDA-graph bookkeeping on the CPU: buckets, static buffers, padding rows, one step graph replayed k times and
the scatter of the live prefix, through a capture stand-in that replays the eager step; equal to eager decoding."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from engine import slab
from engine.config import EngineConfig
from engine.cuda_graphs import CudaGraphs, EagerCapture
from engine.runner import TorchRunner
from tests.engine.tiny_voice import make_tiny_voice

IDS = {1: [1, 2, 3], 3: [4, 5, 6, 7, 8], 4: [2, 2], 6: [3, 1, 4, 1, 5, 9, 2]}


@pytest.fixture(scope="module")
def voice():
    return make_tiny_voice()


def test_graph_path_decodes_like_eager(voice) -> None:
    config = EngineConfig(voices=("tiny",), max_slots=8, cuda_graph_max_batch=4, decode_steps_per_iteration=1,
                          max_decode_steps_per_iteration=8)
    graphed, eager = TorchRunner("tiny", voice, config), TorchRunner("tiny", voice, config)
    graphed.graphs = CudaGraphs(graphed, config, capture=EagerCapture())
    graphed.graphs.capture()
    assert set(graphed.graphs._decode) == {(b, t) for b in (1, 2, 4) for t in graphed.graphs.length_buckets}
    for runner in (graphed, eager):
        runner.encode(list(IDS), list(IDS.values()), [7, 8, 9, 10])
    # buckets 4 (a padding row), 4, 1, 4, 2, 4; 1–8 steps a call: one step graph replayed that many times
    calls = [([1, 3, 4], 2), ([1, 3, 4, 6], 1), ([3], 5), ([1, 3, 4, 6], 3), ([6, 4], 8), ([1, 3, 4, 6], 8)]
    for slots, steps in calls:
        assert graphed.graphs.can_decode(len(slots), steps, config.prenet_dropout)
        a, b = graphed.decode(slots, steps, True), eager.decode(slots, steps, True)
        assert (a.valid_steps == b.valid_steps).all() and (a.finished == b.finished).all()
        assert (a.peaks == b.peaks).all() and (a.loud == b.loud).all()
    assert not graphed.graphs.can_decode(5, 2, True)  # over the largest bucket: eager
    assert not graphed.graphs.can_decode(2, 2, False)  # captured with dropout: a call without runs eagerly
    for slot in IDS:
        n = int(eager.decoded[slot])
        assert int(graphed.decoded[slot]) == n > 0
        torch.testing.assert_close(graphed.mel[slot, :n], eager.mel[slot, :n], atol=1e-5, rtol=0)
    rows = torch.tensor(list(IDS))
    t = int(max(len(v) for v in IDS.values()))
    for name in slab.MUTABLE:  # the live prefix went back into the slab; other rows were not touched
        torch.testing.assert_close(getattr(slab.gather(graphed.state, rows, t), name).float(),
                                   getattr(slab.gather(eager.state, rows, t), name).float(), atol=1e-5, rtol=0)
    untouched = torch.tensor([0, 2, 5, 7])
    assert bool(graphed.state.finished.index_select(0, untouched).all())


def _graphed_runner(voice, **overrides) -> TorchRunner:
    config = EngineConfig(voices=("tiny",), max_slots=4, cuda_graph_max_batch=2, **overrides)
    runner = TorchRunner("tiny", voice, config)
    runner.graphs = CudaGraphs(runner, config, capture=EagerCapture())
    return runner


def test_capture_pauses_the_garbage_collector_and_the_runner_frees_without_it(voice, monkeypatch) -> None:
    """A collection inside a real capture can destroy other graphs and invalidate it (seen on an H200): capture
    runs with the collector paused; and the graphs hold their runner weakly, so dropping a runner frees it (and
    its graphs) by reference counting alone, never in some later collection."""
    seen: list[bool] = []
    real_capture = EagerCapture.capture

    def recording(self, fn):
        seen.append(gc.isenabled())
        return real_capture(self, fn)

    monkeypatch.setattr(EagerCapture, "capture", recording)
    runner = _graphed_runner(voice)
    assert gc.isenabled()
    runner.graphs.capture()
    assert seen and not any(seen) and gc.isenabled()  # paused for every bucket, enabled again after
    ref = weakref.ref(runner)
    gc.disable()
    try:
        del runner
        assert ref() is None
    finally:
        gc.enable()


def test_a_bucket_that_fails_to_capture_decodes_eagerly_and_the_others_stay(voice, monkeypatch) -> None:
    from engine import cuda_graphs

    real_init = cuda_graphs._DecodeGraph.__init__

    def failing(self, acoustic, device, dtype, batch, length, *rest):
        if batch == 2:
            raise RuntimeError("operation not permitted when stream is capturing")
        real_init(self, acoustic, device, dtype, batch, length, *rest)

    monkeypatch.setattr(cuda_graphs._DecodeGraph, "__init__", failing)
    graphed, eager = _graphed_runner(voice), _graphed_runner(voice, cuda_graphs=False)
    eager.graphs = None
    graphed.graphs.capture()
    assert {b for b, _ in graphed.graphs._decode} == {1}
    for runner in (graphed, eager):
        runner.encode([0, 1], [IDS[1], IDS[3]], [7, 8])
    for slots, steps in (([0, 1], 3), ([1], 2), ([0, 1], 4)):  # batch 2: eager fallback; batch 1: its graph
        assert graphed.graphs.can_decode(len(slots), steps, True)
        a, b = graphed.decode(slots, steps, True), eager.decode(slots, steps, True)
        assert (a.valid_steps == b.valid_steps).all() and (a.peaks == b.peaks).all()
    for slot in (0, 1):
        n = int(eager.decoded[slot])
        assert int(graphed.decoded[slot]) == n > 0
        torch.testing.assert_close(graphed.mel[slot, :n], eager.mel[slot, :n], atol=1e-5, rtol=0)
