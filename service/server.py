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
from models.frontend.normalize import NormalizeOptions
from models.frontend.pipeline import FrontendLexiconError, FrontendOptions, MandarinFrontend
from protos.voxpool.v1 import tts_pb2, tts_pb2_grpc
from service.admission import Admission
from service.cache_admin import CacheAdminServicer, with_audio_cache
from service.cache_warm import CacheWarmer
from service.call import CallDeps
from service.config import ServiceConfig
from service.errors import Unavailable
from service.health import Health
from service.liveness import ProgressWatch, thread_stack
from service.pressure import AllocationWatch
from service.security import admin_server, build_interceptors, server_certificates, tenant_call_limit
from service.servicer import TtsServicer, voice_entries
from service.telemetry import Telemetry

log = logging.getLogger(__name__)
EXIT_DRAIN_CUT = 3  # serve()'s exit code when the drain's grace ran out with calls still in flight
EXIT_ENGINE_FAILED = 4  # serve()'s exit code once the engine thread died or stalled (the orchestrator sees a crash)
ENGINE_DEAD = "dead"
ENGINE_STALLED = "stalled"


def server_options(cfg: ServiceConfig) -> list[tuple[str, int]]:
    """grpc.aio channel arguments: message sizes and keepalive from ServerConfig."""
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
        ("grpc.max_metadata_size", s.max_metadata_bytes),
        ("grpc.so_reuseport", 0),
    ]


class BindError(OSError):
    """A port the server must listen on cannot be opened (in use, or not allowed); the message names the setting."""


def _bind(add_port: Any, address: str, setting: str) -> int:
    """grpc's add_*_port, whose failure (RuntimeError, or port 0 from older grpc) becomes a BindError naming the
    address and the setting to change."""
    try:
        port = add_port()
    except RuntimeError:
        port = 0
    if port == 0 and not address.endswith(":0"):
        raise BindError(f"cannot listen on {address}: the port is in use (or not allowed); stop the other server or "
                        f"choose another port with {setting}")
    return port


class VoxpoolServer:
    """One process's server: owns the engine, the gRPC server, health and admission."""

    def __init__(self, cfg: ServiceConfig, engine: AsyncEngine, voices: dict[str, Any],
                 telemetry: Telemetry | None = None):
        self.cfg = cfg
        self.engine = engine = with_audio_cache(engine, cfg.cache, voices, cfg.voice.default)  # cache: per-pod audio
        self.health = Health()
        self.admission = Admission(cfg.server.max_calls, cfg.server.retry_after_ms,
                                   tenant_max_calls=tenant_call_limit(cfg.security))
        # telemetry: spans when OTEL_* variables ask for them, metrics when telemetry.metrics_port > 0
        self.telemetry = telemetry if telemetry is not None else Telemetry(cfg.telemetry)
        self.telemetry.bind_server(lambda: self.admission.active, cfg.server.max_calls)
        self.telemetry.attach_engine(engine)
        self.executor = ThreadPoolExecutor(max_workers=cfg.server.worker_threads, thread_name_prefix="frontend")
        self.frontend = MandarinFrontend(FrontendOptions(normalize=NormalizeOptions(one_as_yao=cfg.frontend.one_as_yao),
                                                         lexicon_file=cfg.frontend.lexicon_file or None))
        self.deps = CallDeps(
            engine=engine, frontend=self.frontend, executor=self.executor,
            voices=voice_entries(voices, cfg.voice.default), cfg=cfg, telemetry=self.telemetry,
        )
        self.servicer = TtsServicer(self.deps, self.admission)
        # reliability: readiness NOT_SERVING while memory or thread allocations fail (calls or engine batches)
        self.allocations = AllocationWatch(self.health.allocations_failing)
        self.servicer.on_call_error = self.allocations.observe
        self.cache = getattr(engine, "cache", None)  # cache: engine.audio_cache.AudioCache, None when disabled
        if self.cache is not None:
            self.telemetry.metrics.bind_audio_cache(self.cache.stats)
        self.warmer = CacheWarmer(self.deps, cfg.cache.warm_concurrency)
        self.warm_results: list = []  # cache: one service.cache_warm.LineResult per line of cache.warm_file
        # security: bearer tokens, tenant limits and malformed-request answers (service/security.py)
        self.server = grpc.aio.server(options=server_options(cfg), interceptors=build_interceptors(cfg))
        tts_pb2_grpc.add_TtsServicer_to_server(self.servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health.servicer, self.server)
        # cache: warm and stats RPCs on the serving port, behind the same auth, tenant rules and admission as Tts
        tts_pb2_grpc.add_CacheAdminServicer_to_server(
            CacheAdminServicer(self.warmer, self.cache, cfg.cache, self.admission), self.server)
        names = (
            tts_pb2.DESCRIPTOR.services_by_name["Tts"].full_name,
            tts_pb2.DESCRIPTOR.services_by_name["CacheAdmin"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        )
        if cfg.server.reflection:
            reflection.enable_server_reflection(names, self.server)
        self.admin = admin_server(cfg, self.health.servicer, names)  # health + reflection only, plaintext; or None
        self.admin_port = 0
        self.port = 0
        self.certificates = None  # service.tls.ServerCertificates once started with TLS
        self._monitor: asyncio.Task | None = None
        self._stopped = asyncio.Event()
        # liveness: the engine's heartbeat (service/liveness.py); `engine_failure` is ENGINE_DEAD or ENGINE_STALLED
        self.progress = ProgressWatch(getattr(engine, "backend", engine), cfg.server.engine_stall_s)
        self.engine_failure = ""
        self.engine_failed = asyncio.Event()
        self._reloads: set[asyncio.Task] = set()

    async def start(self) -> int:
        """Bind, warm up the frontend and the engine, then admit calls; returns the bound port."""
        address = f"{self.cfg.server.host}:{self.cfg.server.port}"
        # TLS / mutual TLS when configured; reloaded on SIGHUP and when the files change (service/tls.py)
        self.certificates = server_certificates(self.cfg.security)
        if self.certificates is not None:
            self.port = _bind(lambda: self.server.add_secure_port(address, self.certificates.credentials()),
                              address, "server.port (--port)")
        else:
            self.port = _bind(lambda: self.server.add_insecure_port(address), address, "server.port (--port)")
        if self.admin is not None:
            admin_address = f"{self.cfg.server.admin_host}:{self.cfg.server.admin_port}"
            self.admin_port = _bind(lambda: self.admin.add_insecure_port(admin_address), admin_address,
                                    "server.admin_port")
            await self.admin.start()
        try:
            await self.telemetry.start(self.cfg.server.host)  # telemetry: /metrics endpoint
        except OSError as exc:
            raise BindError(f"cannot serve metrics on port {self.cfg.telemetry.metrics_port} ({exc.strerror or exc}); "
                            "stop what uses it or set telemetry.metrics_port to another port (0 = none)") from exc
        await self.health.starting()
        await self.server.start()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.executor, self.frontend.warm_up)
        await self.engine.start()
        if self.cache is not None and self.cfg.cache.warm_file:  # cache: warm before readiness, time-bounded
            self.warm_results = await self.warmer.warm_file(self.cfg.cache.warm_file, self.cfg.cache.warm_timeout_s)
        self.admission.open()
        await self.health.started()
        self._monitor = loop.create_task(self._watch_engine())
        log.info("voxpool serving on port %d (voices: %s)", self.port, ", ".join(self.deps.voices))
        return self.port

    def request_reload(self) -> None:
        """SIGHUP handler: reload the TLS certificate (at once; calls in flight keep their connections) and the
        lexicon file (in the background)."""
        if self.certificates is not None:
            self.certificates.reload("SIGHUP")
        self.request_lexicon_reload()

    def request_lexicon_reload(self) -> None:
        """Reload the lexicon file in the background (the task is kept until it ends)."""
        task = asyncio.get_running_loop().create_task(self.reload_lexicon())
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    async def reload_lexicon(self) -> bool:
        """Reread frontend.lexicon_file (on SIGHUP); a refused file is logged with its line numbers and the old one kept."""
        path = self.cfg.frontend.lexicon_file
        if not path:
            log.info("SIGHUP: no frontend.lexicon_file configured, nothing to reload")
            return False
        try:
            count = await asyncio.get_running_loop().run_in_executor(self.executor, self.frontend.reload_lexicon, path)
        except FrontendLexiconError as exc:
            log.error("SIGHUP: %s; the previous lexicon stays in use", exc)
            return False
        log.info("SIGHUP: lexicon %s reloaded (%d entries)", path, count)
        return True

    async def _watch_engine(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            await self.allocations.check(self.engine.counters().allocation_failures)
            if self._stopped.is_set():
                return
            if self.engine.health() is not EngineHealth.SERVING:
                await self.health.engine_died()
                self._fail_calls(ENGINE_DEAD, "the synthesis engine stopped; retry on another server")
                return
            if self.progress.check():
                stalled_for_s = self.progress.stalled_for_s()
                await self.health.engine_stalled(stalled_for_s)
                log.error("engine thread stalled; it is at:\n%s",
                          thread_stack(getattr(self.engine.backend, "thread", None)) or "(no stack)")
                self._fail_calls(ENGINE_STALLED, "the synthesis engine stopped making progress; retry on another server")
                return

    def _fail_calls(self, failure: str, message: str) -> None:
        """The engine is gone or stuck: refuse new calls and end every call UNAVAILABLE (clients fail over)."""
        self.engine_failure = failure
        self.admission.close(message)
        for call in list(self.servicer.calls):  # no call waits for an engine that is gone
            call.abort(Unavailable(message))
        self.engine_failed.set()

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
        if self.admin is not None:
            await self.admin.stop(0)
        await self.engine.stop()
        await self.telemetry.stop()  # telemetry: close /metrics, flush spans
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


def load_voices(cfg: ServiceConfig, names: tuple[str, ...]) -> dict[str, Any]:
    """Load voices by name or folder (keyed by their own names), installing an installable one on first use."""
    from models.voices.bundle import load_voice
    from models.voices.install import INSTALLABLE, install_voice
    from models.voices.registry import VoiceNotFound, find_voice

    from engine.threads import serial_torch

    serial_torch()  # this loader thread must not own an OpenMP team: the engine thread runs torch (engine/threads.py)
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


async def serve(cfg: ServiceConfig, backend: str = "engine") -> int:
    """Run until SIGTERM/SIGINT, then drain; exit code 0 when every call finished in the grace period, else
    EXIT_DRAIN_CUT (a rollout can tell a clean drain from one that cut calls)."""
    loop = asyncio.get_running_loop()
    extra = [n for n in cfg.engine.get("voices") or [] if n != cfg.voice.default]
    names = (cfg.voice.default, *extra)  # the default first
    voices = await loop.run_in_executor(None, load_voices, cfg, names)
    default = next(iter(voices))  # the default voice, under its own name (it may have been given as a folder)
    cfg.voice.default = default
    engine = AsyncEngine.from_config(engine_config(cfg, tuple(voices)), voices=voices, backend=backend)
    server = VoxpoolServer(cfg, engine, voices)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, server.request_reload)
    await server.start()
    failed = loop.create_task(server.engine_failed.wait())
    signalled = loop.create_task(stop.wait())
    await asyncio.wait({failed, signalled}, return_when=asyncio.FIRST_COMPLETED)
    if server.engine_failure == ENGINE_DEAD:  # nothing can be served any more: exit, so the orchestrator restarts us
        failed.cancel()
        signalled.cancel()
        log.critical("the engine thread died: exiting with status %d", EXIT_ENGINE_FAILED)
        await server.stop()
        return EXIT_ENGINE_FAILED
    await signalled
    failed.cancel()
    log.info("signal received: draining")
    clean = await server.drain()
    if server.engine_failure:  # stalled: liveness said so; the exit status says so too
        log.error("stopped: the engine had %s (exit %d)", server.engine_failure, EXIT_ENGINE_FAILED)
        return EXIT_ENGINE_FAILED
    if clean:
        log.info("stopped: all calls finished")
        return 0
    log.warning("stopped: the grace period ran out and calls were cut (exit %d)", EXIT_DRAIN_CUT)
    return EXIT_DRAIN_CUT


def run_server(cfg: ServiceConfig, backend: str = "engine") -> int:
    """Blocking entry point for `voxpool serve`; `backend` naive|non_incremental serves a baseline (benchmarks)."""
    return asyncio.run(serve(cfg, backend))
