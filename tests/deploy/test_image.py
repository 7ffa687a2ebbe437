"""The CPU image, run: it becomes ready, synthesizes a sentence over gRPC, runs as uid 10001 on a read-only root, and
drains to exit status 0 on SIGTERM. Needs podman and a built image: `make image`, then `make test-image` (which sets
VOXPOOL_IMAGE); skipped otherwise (CI machines have no container runtime)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc

IMAGE = os.environ.get("VOXPOOL_IMAGE", "")
READY_TIMEOUT_S = 300.0  # voice load and warm-up on a 2-core host

pytestmark = pytest.mark.skipif(not IMAGE or shutil.which("podman") is None,
                                reason="needs podman and VOXPOOL_IMAGE (make image && make test-image)")


def podman(*args: str, check: bool = True) -> str:
    return subprocess.run(["podman", *args], check=check, capture_output=True, text=True, timeout=120).stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(channel: grpc.Channel, name: str) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            status = health.Check(health_pb2.HealthCheckRequest(service="voxpool.readiness"), timeout=2).status
            if status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass
        if podman("inspect", "-f", "{{.State.Running}}", name) != "true":
            pytest.fail(f"the container stopped before it was ready:\n{podman('logs', name, check=False)}")
        time.sleep(1.0)
    pytest.fail(f"not ready after {READY_TIMEOUT_S:.0f} s:\n{podman('logs', name, check=False)}")


def test_the_image_serves_a_call_read_only_as_uid_10001_and_drains_on_sigterm() -> None:
    port = free_port()
    name = f"voxpool-image-test-{os.getpid()}"
    podman("run", "-d", "--name", name, "--read-only", "--tmpfs", "/tmp", "-p", f"127.0.0.1:{port}:50051",
           "-e", "VOXPOOL__SERVER__DRAIN_GRACE_S=20", IMAGE)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            wait_ready(channel, name)
            assert podman("exec", name, "id", "-u") == "10001"
            assert podman("inspect", "-f", "{{.HostConfig.ReadonlyRootfs}}", name) == "true"
            request = pb.SynthesizeRequest(text="您好，欢迎致电。",
                                           audio=pb.AudioFormat(encoding=pb.AudioFormat.PCMU, sample_rate_hz=8000))
            events = list(tts_pb2_grpc.TtsStub(channel).Synthesize(request, timeout=120))
        frames = [e.audio for e in events if e.HasField("audio")]
        assert events[-1].HasField("turn_done") and len(frames) > 10
        assert all(len(f.payload) == 160 for f in frames)  # 20 ms of μ-law at 8 kHz
        podman("stop", "-t", "60", name)  # SIGTERM: drain, then exit
        assert podman("inspect", "-f", "{{.State.ExitCode}}", name) == "0"
    finally:
        podman("rm", "-f", name, check=False)
