"""Engine faults in real `voxpool serve` processes: a dead engine thread makes the process exit non-zero at once; a
stalled engine ends its call UNAVAILABLE and the client library fails it over to the other server."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2

from clients.client import Audio, Failover, TurnDone, VoxpoolClient
from protos.voxpool.v1 import tts_pb2_grpc
from service.server import EXIT_ENGINE_FAILED
from tests.clients.test_failover import assert_contiguous
from tests.reliability.conftest import health_status, realtime_config, text_event
from tests.reliability.faulty_serve import FAULT_ENV, TRIGGER_ENV
from tests.reliability.test_failover_drill import TEXT, pid_of, tiny_voice_dir  # noqa: F401 (fixture)
from tests.service.test_drain import REPO, free_port, wait_serving


def start(voice_dir: Path, port: int, tmp: Path, fault: str = "", trigger: Path | None = None,
          **env: str) -> subprocess.Popen:
    """A `voxpool serve` process; with `fault`, one whose engine dies or hangs once `trigger` exists."""
    environ = {**os.environ, "VOXPOOL_CACHE": str(tmp / f"cache{port}"), "VOXPOOL__ENGINE__NUM_THREADS": "1", **env}
    module = "service.cli"
    if fault:
        environ.update({FAULT_ENV: fault, TRIGGER_ENV: str(trigger)})
        module = "tests.reliability.faulty_serve"
    return subprocess.Popen([sys.executable, "-m", module, "serve", "--voice", str(voice_dir), "--port", str(port)],
                            cwd=REPO, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def exit_status(proc: subprocess.Popen, timeout_s: float = 60.0) -> int:
    return await asyncio.get_running_loop().run_in_executor(None, lambda: proc.wait(timeout=timeout_s))


async def test_a_dead_engine_thread_ends_the_process_with_a_failure_status(tiny_voice_dir, tmp_path):
    port, trigger = free_port(), tmp_path / "die"
    proc = start(tiny_voice_dir, port, tmp_path, fault="die", trigger=trigger)
    try:
        await wait_serving(port, proc, timeout_s=120)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            call = tts_pb2_grpc.TtsStub(ch).Converse(iter([realtime_config(), text_event(TEXT)]))
            speech = 0
            try:
                async for ev in call:
                    speech += ev.HasField("audio") and not ev.audio.silence
                    if speech == 10:
                        trigger.touch()  # the next decoder batch kills the engine thread
                code = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as err:
                code = err.code()
        assert speech >= 10 and code == grpc.StatusCode.UNAVAILABLE
        assert await exit_status(proc) == EXIT_ENGINE_FAILED  # no signal sent: the process ended by itself
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


async def test_a_stalled_server_call_fails_over_and_the_server_exits_non_zero(tiny_voice_dir, tmp_path):
    ports, trigger = [free_port(), free_port()], tmp_path / "hang"
    stuck = start(tiny_voice_dir, ports[0], tmp_path, fault="hang", trigger=trigger,
                  VOXPOOL__SERVER__ENGINE_STALL_S="1.0", VOXPOOL__SERVER__DRAIN_GRACE_S="5")
    other = start(tiny_voice_dir, ports[1], tmp_path)
    try:
        await asyncio.gather(*(wait_serving(p, proc, timeout_s=120) for p, proc in zip(ports, (stuck, other))))
        target = "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)
        async with VoxpoolClient(target, options=[("grpc.use_local_subchannel_pool", 1)]) as client:
            await client.wait_ready(30)
            for _ in range(20):  # until round robin has a ready connection to each process
                await client.list_voices()
                await asyncio.sleep(0.05)
            for _ in range(10):  # a call on the server that will stall (a call on the other just ends)
                conv = await client.converse(pacing="REALTIME", timeout_s=120)
                if pid_of(conv.started.session_id) == stuck.pid:
                    break
                await conv.end()
                async for _ in conv:
                    pass
            assert pid_of(conv.started.session_id) == stuck.pid
            await conv.send_text(TEXT)
            await conv.flush()
            await conv.end()
            events, speech = [], 0
            async for ev in conv:
                events.append(ev)
                speech += isinstance(ev, Audio) and not ev.silence
                if speech == 20 and not trigger.exists():
                    trigger.touch()  # the stuck server's engine hangs in its next decoder batch
        assert trigger.exists()
        records = [e for e in events if isinstance(e, Failover)]
        assert len(records) == 1, records
        fo = records[0]
        assert pid_of(fo.from_session_id) == stuck.pid and pid_of(fo.to_session_id) == other.pid
        assert fo.heard_text + fo.resent_text == TEXT
        done = [e for e in events if isinstance(e, TurnDone)]
        assert len(done) == 1 and events[-1] is done[0]
        assert_contiguous(events)
        assert await health_status(ports[0], "voxpool.liveness") == health_pb2.HealthCheckResponse.NOT_SERVING
        assert await health_status(ports[1], "voxpool.liveness") == health_pb2.HealthCheckResponse.SERVING
        stuck.send_signal(signal.SIGTERM)
        assert await exit_status(stuck) == EXIT_ENGINE_FAILED  # the stall shows in the exit status, not 0
    finally:
        for proc in (stuck, other):
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
