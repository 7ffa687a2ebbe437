"""EngineConfig parsing/validation, OutputStream semantics, and `import engine` staying torch-free."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine import AudioChunk, EngineConfig, Finished, FinishReason, RequestFailed, RequestTimings
from engine.output import OutputStream


def test_from_dict_coerces_and_round_trips() -> None:
    cfg = EngineConfig.from_dict({"max_slots": "8", "device": "cpu", "voices": "a, b", "prenet_dropout": "false",
                                  "urgency_margin_ms": 250})
    assert cfg.max_slots == 8 and cfg.voices == ("a", "b") and cfg.prenet_dropout is False
    assert cfg.urgency_margin_ms == 250.0
    assert EngineConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.decode_batch_cap == 8


@pytest.mark.parametrize(
    "bad",
    [{"max_slotz": 3}, {"max_slots": 0}, {"device": "tpu"}, {"weights": "int4"}, {"max_slots": 2.5},
     {"max_chunk_frames": 8}, {"prenet_dropout": "maybe"}, {"voices": []}, {"vocoder_dtype": "float16"},
     {"vocoder_fast_path": "sometimes"}],
)
def test_from_dict_rejects(bad) -> None:
    with pytest.raises(ValueError):
        EngineConfig.from_dict(bad)


def chunk(n: int, first: bool = False) -> AudioChunk:
    return AudioChunk(np.ones(n, np.float32), 0, np.zeros(1, np.int32), first, 1000)


async def test_stream_delivers_in_order_and_tracks_unread() -> None:
    loop = asyncio.get_running_loop()
    closed: list[str] = []
    stream = OutputStream("s", 1000, loop, RequestTimings(submitted_s=0.0), on_close=closed.append)
    stream.publish_chunk(chunk(100, True))
    stream.publish_chunk(chunk(50))
    assert stream.unread_ms == pytest.approx(150.0)
    stream.finish(FinishReason.COMPLETED, None, RequestTimings(submitted_s=0.0, audio_samples=150))
    stream.finish(FinishReason.ERROR, RuntimeError("late"), RequestTimings(submitted_s=0.0))  # ignored
    events = [e async for e in stream]
    assert [type(e) for e in events] == [AudioChunk, AudioChunk, Finished]
    assert events[-1].reason is FinishReason.COMPLETED and stream.unread_ms == 0.0
    stream.close()
    assert closed == []  # closing a finished stream cancels nothing


async def test_stream_raises_the_typed_error_after_its_chunks() -> None:
    loop = asyncio.get_running_loop()
    stream = OutputStream("s", 1000, loop, RequestTimings(submitted_s=0.0))
    stream.publish_chunk(chunk(10, True))
    stream.finish(FinishReason.ERROR, RequestFailed("boom", module="decode"), RequestTimings(submitted_s=0.0))
    await asyncio.sleep(0)
    first = await stream.__anext__()
    assert isinstance(first, AudioChunk)
    with pytest.raises(RequestFailed):
        await stream.__anext__()
    assert stream.finished.reason is FinishReason.ERROR
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


async def test_close_drops_unread_audio_and_cancels() -> None:
    loop = asyncio.get_running_loop()
    closed: list[str] = []
    stream = OutputStream("s", 1000, loop, RequestTimings(submitted_s=0.0), on_close=closed.append)
    stream.publish_chunk(chunk(10, True))
    await asyncio.sleep(0)
    stream.close()
    assert closed == ["s"]
    events = [e async for e in stream]
    assert len(events) == 1 and events[0].reason is FinishReason.CANCELLED
    stream.publish_chunk(chunk(10))  # late engine events are ignored
    await asyncio.sleep(0)
    assert [e async for e in stream] == []


def test_import_engine_does_not_import_torch() -> None:
    code = "import sys, engine; print('torch' in sys.modules)"
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=repo)
    assert out.stdout.strip() == "False"
