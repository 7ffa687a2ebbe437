"""Build and run the grpc.aio server: Tts + health + reflection, engine start-up, SIGTERM drain."""

from __future__ import annotations

import asyncio
import logging
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from engine.async_engine import AsyncEngine
from engine.config import EngineConfig
from engine.core import Health as EngineHealth
from models.frontend.pipeline import MandarinFrontend
from protos.voxpool.v1 import tts_pb2, tts_pb2_grpc
from service.admission import Admission
from service.call import CallDeps
from service.config import ServiceConfig
from service.health import Health
from service.servicer import TtsServicer, voice_entries

log = logging.getLogger(__name__)


def server_options(cfg: ServiceConfig) -> list[tuple[str, int]]:
    """grpc.aio channel arguments from the reliability survey (§3.2)."""
    s = cfg.server
    return [
        ("grpc.max_receive_message_length", s.max_receive_message_bytes),
        ("grpc.max_send_message_length", s.max_send_message_bytes),
        ("grpc.max_concurrent_streams", s.max_concurrent_streams),
        ("grpc.keepalive_time_ms", s.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", s.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", s.min_recv_ping_interval_ms),
        ("grpc.max_connection_idle_ms", s.max_connection_idle_ms),
        ("grpc.max_connection_age_ms", s.max_connection_age_ms),
        ("grpc.max_connection_age_grace_ms", s.max_connection_age_grace_ms),
        ("grpc.so_reuseport", 0),
    ]


class VoxpoolServer:
    """One process's server: owns the engine, the gRPC server, health and admission."""

    def __init__(self, cfg: ServiceConfig, engine: AsyncEngine, voices: dict[str, Any]):
        self.cfg = cfg
        self.engine = engine
        self.health = Health()
        self.admission = Admission(cfg.server.max_calls, cfg.server.retry_after_ms)
        self.executor = ThreadPoolExecutor(max_workers=cfg.server.worker_threads, thread_name_prefix="frontend")
        self.frontend = MandarinFrontend()
        self.deps = CallDeps(
            engine=engine, frontend=self.frontend, executor=self.executor,
            voices=voice_entries(voices, cfg.voice.default), cfg=cfg,
        )
        self.servicer = TtsServicer(self.deps, self.admission)
        self.server = grpc.aio.server(options=server_options(cfg))
        tts_pb2_grpc.add_TtsServicer_to_server(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health.servicer, self.server)
        if cfg.server.reflection:
            names = (
                tts_pb2.DESCRIPTOR.services_by_name["Tts"].full_name,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            )
            reflection.enable_server_reflection(names, self.server)
        self.port = 0
        self._monitor: asyncio.Task | None = None
        self._stopped = asyncio.Event()

    async def start(self) -> int:
        """Bind, warm up the frontend and the engine, then admit calls; returns the bound port."""
        self.port = self.server.add_insecure_port(f"{self.cfg.server.host}:{self.cfg.server.port}")
        await self.health.starting()
        await self.server.start()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, self.frontend.warm_up)
        await self.engine.start()
        self.admission.open()
        await self.health.started()
        self._monitor = loop.create_task(self._watch_engine())
        log.info("voxpool serving on port %d (voices: %s)", self.port, ", ".join(self.deps.voices))
        return self.port

    async def _watch_engine(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            if self.engine.health() is not EngineHealth.SERVING and not self._stopped.is_set():
                self.admission.close()
                await self.health.engine_died()
                return

    @property
    def active_calls(self) -> int:
        return len(self.servicer.calls)

    async def drain(self, grace_s: float | None = None) -> bool:
        """NOT_SERVING, refuse new calls (UNAVAILABLE), let in-flight calls finish within the grace, stop.

        Returns True when every call finished inside the grace period.
        """
        grace_s = self.cfg.server.drain_grace_s if grace_s is None else grace_s
        log.info("draining: %d call(s) in flight, grace %.0f s", self.active_calls, grace_s)
        self.admission.close()
        await self.health.draining()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while self.admission.active and loop.time() < deadline:
            await asyncio.sleep(0.05)
        clean = self.admission.active == 0
        await self.stop(0 if clean else 0.5)
        return clean

    async def stop(self, grace_s: float = 0.0) -> None:
        """Stop serving and stop the engine."""
        self._stopped.set()
        if self._monitor is not None:
            self._monitor.cancel()
        await self.server.stop(grace_s)
        await self.engine.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


def load_voices(cfg: ServiceConfig, names: tuple[str, ...]) -> dict[str, Any]:
    """Load voices by name or folder (keyed by their own names), installing an installable one on first use."""
    from models.voices.bundle import load_voice
    from models.voices.install import INSTALLABLE, install_voice
    from models.voices.registry import VoiceNotFound, find_voice

    ecfg = engine_config(cfg)
    out = {}
    for name in names:
        try:
            find_voice(name)
        except VoiceNotFound:
            if not (cfg.voice.auto_install and name in INSTALLABLE):
                raise
            log.info("voice %s is not installed yet: installing it (first start only)", name)
            install_voice(name)
        voice = load_voice(name, device=ecfg.device, weights=ecfg.weights)
        out[voice.name] = voice
    return out


def engine_config(cfg: ServiceConfig, voices: tuple[str, ...] | None = None) -> EngineConfig:
    """The engine's part of the tree; `voices` are the loaded voices' names (default: the default voice)."""
    data = dict(cfg.engine)
    data["voices"] = list(voices or data.get("voices") or [cfg.voice.default])
    return EngineConfig.from_dict(data)


async def serve(cfg: ServiceConfig) -> int:
    """Run until SIGTERM/SIGINT, then drain; exit code 0 when every call finished in the grace period."""
    loop = asyncio.get_running_loop()
    extra = [n for n in cfg.engine.get("voices") or [] if n != cfg.voice.default]
    names = (cfg.voice.default, *extra)  # the default first
    voices = await loop.run_in_executor(None, load_voices, cfg, names)
    default = next(iter(voices))  # the default voice, under its own name (it may have been given as a folder)
    cfg.voice.default = default
    engine = AsyncEngine.from_config(engine_config(cfg, tuple(voices)), voices=voices)
    server = VoxpoolServer(cfg, engine, voices)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    await stop.wait()
    log.info("signal received: draining")
    clean = await server.drain()
    log.info("stopped (%s)", "all calls finished" if clean else "grace period ran out")
    return 0


def run_server(cfg: ServiceConfig) -> int:
    """Blocking entry point for `voxpool serve`."""
    return asyncio.run(serve(cfg))
