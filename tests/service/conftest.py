"""A real voxpool server on a loopback port with the tiny voice, and helpers to talk to it."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import numpy as np
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc


def make_server(**overrides):
    """Build (not start) a VoxpoolServer over the tiny voice; `overrides` are config sections → dicts."""
    from engine.async_engine import AsyncEngine
    from models.voices.bundle import tiny_voice
    from service.config import load_config
    from service.server import VoxpoolServer, engine_config

    decoder_steps = overrides.pop("decoder_steps", 40)
    engine_over = overrides.pop("engine", {})
    cfg = load_config(None, environ={})
    cfg.server.port = 0
    cfg.server.host = "127.0.0.1"
    cfg.voice.default = "tiny"
    cfg.engine = {"max_slots": 8, **engine_over}
    for section, values in overrides.items():
        for k, v in values.items():
            setattr(getattr(cfg, section), k, v)
    voices = {"tiny": tiny_voice(decoder_steps=decoder_steps)}
    engine = AsyncEngine.from_config(engine_config(cfg), voices=voices)
    return VoxpoolServer(cfg, engine, voices)


@contextlib.asynccontextmanager
async def running_server(**overrides):
    server = make_server(**overrides)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def tiny_server():
    """A started server (tiny voice, port on 127.0.0.1); yields the VoxpoolServer (`.port`)."""
    async with running_server() as server:
        yield server


@contextlib.asynccontextmanager
async def stub_for(port: int):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield tts_pb2_grpc.TtsStub(channel)


def config_event(**kw) -> pb.ClientEvent:
    audio = pb.AudioFormat(
        encoding=kw.pop("encoding", pb.AudioFormat.PCMU),
        sample_rate_hz=kw.pop("rate", 8000),
        frame_ms=kw.pop("frame_ms", 20),
    )
    pacing = pb.Pacing(mode=kw.pop("pacing", pb.Pacing.ASAP))
    if "lead_ms" in kw:
        pacing.lead_ms = kw.pop("lead_ms")
    return pb.ClientEvent(config=pb.SessionConfig(audio=audio, pacing=pacing, **kw))


def text_event(text: str, turn_id: str = "", spans=()) -> pb.ClientEvent:
    return pb.ClientEvent(text=pb.TextDelta(text=text, turn_id=turn_id, spans=list(spans)))


def flush_event(turn_id: str = "") -> pb.ClientEvent:
    return pb.ClientEvent(flush=pb.Flush(turn_id=turn_id))


def end_event() -> pb.ClientEvent:
    return pb.ClientEvent(end=pb.End())


async def collect(call) -> list[pb.ServerEvent]:
    """Every event of a finished call (raises grpc.aio.AioRpcError on a non-OK status)."""
    return [e async for e in call]


ROUNDING_STEPS = 4  # 16-bit steps two syntheses of the same ids may differ by (docs/engine.md: chunk boundaries)


def pcm_close(a: bytes, b: bytes, steps: int = ROUNDING_STEPS) -> bool:
    """Same length and every 16-bit little-endian sample within `steps`: the same audio up to float rounding.

    The scheduler picks chunk sizes from the live buffer levels (a starving stream takes short chunks), so two
    syntheses of the same ids are vocoded in different windows whenever the host is loaded, and the streaming
    vocoder equals the whole-utterance one within 1e-5, not bit for bit: a sample may land one step apart."""
    x, y = np.frombuffer(a, "<i2").astype(np.int64), np.frombuffer(b, "<i2").astype(np.int64)
    return len(x) == len(y) > 0 and int(np.abs(x - y).max()) <= steps


def assert_same_l16_frames(got: list, want: list, steps: int = ROUNDING_STEPS) -> None:
    """Two calls' L16 AudioFrames carry the same audio: the same frames at the same media times, each frame's
    samples within `steps` of the other's (see pcm_close)."""
    assert [(f.pts_ms, f.silence, len(f.payload)) for f in got] == [(f.pts_ms, f.silence, len(f.payload)) for f in want]
    far = [i for i, (g, w) in enumerate(zip(got, want)) if not pcm_close(g.payload, w.payload, steps)]
    assert not far, f"frames {far[:5]} differ by more than {steps} steps"


def kinds(events) -> list[str]:
    return [e.WhichOneof("event") for e in events]


def wait_for(predicate, timeout_s: float = 5.0, step_s: float = 0.02):
    async def _wait():
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while not predicate():
            if loop.time() > end:
                raise AssertionError("condition not met in time")
            await asyncio.sleep(step_s)
    return _wait()


async def converse_and_clear(stub, first_events, clear_when, timeout_s: float = 20.0) -> list:
    """Open a Converse, send `first_events`, read; once `clear_when(events so far)` holds send Clear, wait for
    Cleared, then End: every ServerEvent of the call."""
    q: asyncio.Queue = asyncio.Queue()

    async def requests():
        while (e := await q.get()) is not None:
            yield e

    call = stub.Converse(requests())
    for e in first_events:
        await q.put(e)
    events: list = []

    async def read():
        async for e in call:
            events.append(e)

    reader = asyncio.create_task(read())
    await wait_for(lambda: clear_when(events), timeout_s)
    await q.put(pb.ClientEvent(clear=pb.Clear()))
    await wait_for(lambda: any(e.HasField("cleared") for e in events), 10.0)
    await q.put(end_event())
    await q.put(None)
    await reader
    return events
