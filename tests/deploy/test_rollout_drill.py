"""Rollout drill on loopback: two `voxpool serve` processes behind the client's round-robin; one gets SIGTERM
with calls in flight: zero calls cut, new calls go to the other process."""

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from clients.client import Audio, TurnDone, VoxpoolClient
from tests.service.test_drain import free_port, wait_serving

REPO = Path(__file__).resolve().parents[2]
TEXT = "您好，这里是客户服务中心。您的业务正在办理中，请不要挂机。"


@pytest.fixture(scope="module")
def tiny_voice_dir(tmp_path_factory):
    from models.voices.bundle import save_voice_dir, tiny_voice

    return save_voice_dir(tiny_voice(decoder_steps=60), tmp_path_factory.mktemp("voices") / "tiny")


def start_server(voice_dir: Path, port: int, tmp: Path) -> subprocess.Popen:
    env = {**os.environ, "VOXPOOL_CACHE": str(tmp / f"cache{port}"), "VOXPOOL__SERVER__DRAIN_GRACE_S": "60",
           "VOXPOOL__ENGINE__NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--voice", str(voice_dir), "--port", str(port)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


async def one_call(client: VoxpoolClient) -> tuple[int, list]:
    """A call: text, flush, end; returns (server pid, events). The session id starts with the pid in hex."""
    conv = await client.converse(pacing="REALTIME")
    pid = int(conv.started.session_id.split("-")[0], 16)
    await conv.send_text(TEXT)
    await conv.flush()
    await conv.end()
    return pid, [ev async for ev in conv]


async def test_sigterm_during_rollout_cuts_no_call(tiny_voice_dir, tmp_path):
    ports = [free_port(), free_port()]
    procs = [start_server(tiny_voice_dir, p, tmp_path) for p in ports]
    try:
        await asyncio.gather(*(wait_serving(p, proc) for p, proc in zip(ports, procs)))
        target = "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)
        async with VoxpoolClient(target) as client:
            await client.wait_ready(10)
            for _ in range(20):  # until round-robin has a ready connection to each process
                await client.list_voices()
                await asyncio.sleep(0.05)
            in_flight = [asyncio.create_task(one_call(client)) for _ in range(4)]
            await asyncio.sleep(0.6)  # every call has started and is playing audio
            victim = procs[0]
            victim.send_signal(signal.SIGTERM)
            await asyncio.sleep(1.0)  # the client's health watch sees NOT_SERVING
            later = [await one_call(client) for _ in range(3)]
            results = await asyncio.wait_for(asyncio.gather(*in_flight), timeout=60)
        pids = {pid for pid, _ in results}
        assert pids == {procs[0].pid, procs[1].pid}, "round-robin spread the calls over both processes"
        for pid, events in results + later:  # zero calls cut: every call ends with its whole turn
            done = [e for e in events if isinstance(e, TurnDone)]
            assert len(done) == 1, (pid, events[-3:])
            speech_ms = sum(e.duration_ms for e in events if isinstance(e, Audio) and not e.silence)
            assert speech_ms == done[0].audio_ms >= 2900  # 2 segments × 60 decoder steps × 25 ms
        assert {pid for pid, _ in later} == {procs[1].pid}, "new calls go to the process that is not draining"
        assert victim.wait(timeout=60) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
