"""bench/gpu_check.py's logic on the CPU (its graphs through EagerCapture), with the tiny voice: the script a GPU
session runs once must not fail for its own reasons, and its float64 proof must be able to fail."""

from __future__ import annotations

import pytest
import torch

from bench import gpu_check
from tests.engine.tiny_voice import make_tiny_voice

IDS = [[1, 2, 3], [4, 5, 6, 7, 8], [2, 2], [3, 1, 4, 1, 5, 9, 2], [6, 6, 6, 1], [9, 8, 7, 6, 5, 4]]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def voice():
    return make_tiny_voice()


def test_graphs_check_passes_in_float64_and_reports_float32(voice) -> None:
    result = gpu_check.check_graphs("tiny", voice, IDS, CPU, steps=2)
    assert result["ok"] and result["dtype"] == "float64" and result["mismatched_calls"] == 0
    assert result["graphs_captured"] > 0 and result["graph_calls"] == result["calls"] > len(IDS)
    assert all(r["frames_graphs"] == r["frames_eager"] > 0 for r in result["rows"])
    assert voice.acoustic.embedding.weight.dtype == torch.float32  # the voice itself was not converted
    fp32 = gpu_check.check_graphs("tiny", voice, IDS, CPU, steps=2, dtype=torch.float32)
    assert fp32["dtype"] == "float32" and len(fp32["rows"]) == len(IDS)


def test_graphs_check_fails_when_the_graph_path_is_wrong(voice, monkeypatch) -> None:
    """A graph replay that writes one row's mel into another must fail the float64 proof."""
    from engine.cuda_graphs import _DecodeGraph

    real_run = _DecodeGraph.run

    def swapped(self, state, rows, steps):
        out = real_run(self, state, rows, steps)
        if out.frames.shape[0] > 1:
            out.frames = out.frames.flip(0)
        return out

    monkeypatch.setattr(_DecodeGraph, "run", swapped)
    assert not gpu_check.check_graphs("tiny", voice, IDS, CPU, steps=2)["ok"]


def test_decode_timing_and_vocoder_parts_run(voice) -> None:
    timing = gpu_check.time_decode("tiny", voice, IDS, CPU, steps=2, batches=[1, 4], repeats=2)
    assert timing[0]["graphs"] > 0 and [r["batch"] for r in timing[1:]] == [1, 4]
    assert all(r["graphs_ms"] > 0 and r["eager_ms"] > 0 for r in timing[1:])
    rows = gpu_check.check_vocoder(voice, IDS, CPU)
    assert rows and all(r["ok"] for r in rows)
