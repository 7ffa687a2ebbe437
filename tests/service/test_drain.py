"""SIGTERM with calls in flight, on a real `voxpool serve` process: NOT_SERVING, new calls UNAVAILABLE,
in-flight calls finish, exit 0; a drain whose grace runs out cuts the calls and exits non-zero."""

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc
from tests.service.conftest import collect, config_event, end_event, flush_event, text_event

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny_voice_dir(tmp_path_factory):
    from models.voices.bundle import save_voice_dir, tiny_voice

    return save_voice_dir(tiny_voice(decoder_steps=60), tmp_path_factory.mktemp("voices") / "tiny")


async def wait_serving(port: int, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"server exited early with {proc.returncode}")
            try:
                r = await stub.Check(health_pb2.HealthCheckRequest(service="voxpool.readiness"), timeout=1)
                if r.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.2)
    raise AssertionError("server did not become ready")


@contextlib.contextmanager
def served(voice_dir: Path, tmp_path: Path, grace_s: float) -> Iterator[tuple[subprocess.Popen, int]]:
    """A `voxpool serve` process on a free port with the given drain grace; killed (and its output shown) after."""
    port = free_port()
    env = {**os.environ, "VOXPOOL_CACHE": str(tmp_path / "cache"), "VOXPOOL__SERVER__DRAIN_GRACE_S": str(grace_s)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--voice", str(voice_dir), "--port", str(port)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        out = proc.stdout.read() if proc.stdout else ""
        print(out[-3000:])


async def test_sigterm_drains_calls_in_flight(tiny_voice_dir, tmp_path):
    # The grace and the waits are hang guards, not timing checks: on an oversubscribed host (load 17 on 2 cores) a
    # call's first audio took 10 s and the two ~3 s calls more than 30 s.
    with served(tiny_voice_dir, tmp_path, grace_s=120) as (proc, port):
        await wait_serving(port, proc)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = tts_pb2_grpc.TtsStub(ch)
            health = health_pb2_grpc.HealthStub(ch)
            text = "这是一通正在进行的电话，请不要挂断。我们还有很多话要说。"
            calls = [
                stub.Converse(iter([config_event(pacing=pb.Pacing.REALTIME), text_event(text), flush_event(),
                                    end_event()]))
                for _ in range(2)
            ]
            streams = [call.__aiter__() for call in calls]
            firsts = [await asyncio.wait_for(first_audio(s), timeout=120) for s in streams]  # audio is flowing
            tasks = [asyncio.create_task(collect_rest(s, first)) for s, first in zip(streams, firsts)]
            proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            r = await health.Check(health_pb2.HealthCheckRequest(service="voxpool.readiness"), timeout=30)
            assert r.status == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await collect(stub.Converse(iter([config_event()])))
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            results = await asyncio.wait_for(asyncio.gather(*tasks), timeout=240)
        for events in results:  # every call in flight finished normally, with all its audio
            done = [e.turn_done for e in events if e.HasField("turn_done")]
            assert len(done) == 1 and done[0].audio_ms >= 2900  # 2 segments × 60 steps × 25 ms
        assert proc.wait(timeout=60) == 0


async def first_audio(stream) -> list:
    """The events of a call up to and including its first audio frame."""
    events = []
    async for ev in stream:
        events.append(ev)
        if ev.HasField("audio"):
            return events
    raise AssertionError(f"the call ended before any audio: {events}")


async def collect_rest(stream, events: list) -> list:
    return events + [ev async for ev in stream]


async def test_sigterm_past_the_grace_cuts_calls_and_exits_non_zero(tiny_voice_dir, tmp_path):
    from service.server import EXIT_DRAIN_CUT

    with served(tiny_voice_dir, tmp_path, grace_s=0.2) as (proc, port):
        await wait_serving(port, proc)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = tts_pb2_grpc.TtsStub(ch)
            text = "这是一通很长的电话。" * 6  # seconds of REALTIME audio: far more than the 0.2 s grace
            call = stub.Converse(iter([config_event(pacing=pb.Pacing.REALTIME), text_event(text), end_event()]))
            first_audio = asyncio.get_running_loop().create_future()

            async def read():
                async for ev in call:
                    if ev.HasField("audio") and not first_audio.done():
                        first_audio.set_result(None)

            reading = asyncio.create_task(read())
            await asyncio.wait_for(first_audio, timeout=30)  # the call is in flight
            proc.send_signal(signal.SIGTERM)
            with pytest.raises(grpc.aio.AioRpcError):
                await asyncio.wait_for(reading, timeout=30)  # cut
        assert proc.wait(timeout=30) == EXIT_DRAIN_CUT != 0
