"""The CUDA-graph bookkeeping on the CPU: buckets, static buffers, padding rows and the scatter of the live
prefix, through a capture stand-in that replays the eager step; equal to eager decoding."""

from __future__ import annotations

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
    config = EngineConfig(voices=("tiny",), max_slots=8, cuda_graph_max_batch=4, decode_steps_per_iteration=2,
                          max_decode_steps_per_iteration=2)
    graphed, eager = TorchRunner("tiny", voice, config), TorchRunner("tiny", voice, config)
    graphed.graphs = CudaGraphs(graphed, config, capture=EagerCapture())
    graphed.graphs.capture()
    assert set(graphed.graphs._decode) == {(b, t) for b in (1, 2, 4) for t in graphed.graphs.length_buckets}
    for runner in (graphed, eager):
        runner.encode(list(IDS), list(IDS.values()), [7, 8, 9, 10])
    calls = [[1, 3, 4], [1, 3, 4, 6], [3], [1, 3, 4, 6], [6, 4]]  # buckets 4 (a padding row), 4, 1, 4, 2
    for slots in calls:
        assert graphed.graphs.can_decode(len(slots), 2, config.prenet_dropout)
        a, b = graphed.decode(slots, 2, True), eager.decode(slots, 2, True)
        assert (a.valid_steps == b.valid_steps).all() and (a.finished == b.finished).all()
        assert (a.peaks == b.peaks).all()
    assert not graphed.graphs.can_decode(5, 2, True)  # over the largest bucket: eager
    assert not graphed.graphs.can_decode(2, 3, True)  # another step count: eager
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
