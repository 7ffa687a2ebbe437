"""Reliability suite helpers: servers built from config trees, call drivers with arrival times, state accounting,
fault injection into one module batch, and chunk-lateness arithmetic (DESIGN §6)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc
from tests.service.conftest import config_event, end_event, flush_event, text_event  # noqa: F401 (re-exported)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

CALL_TASK_SUFFIXES = ("sender", "turns", "reader", "watchdog")  # CallSession's task names: <session>-<part>
# objects that exist only while a call or one of its engine requests lives: their counts must return to baseline
PER_CALL_TYPES = ("CallSession", "Turn", "OutputStream", "Request", "PacedSender", "Pacer", "Segmenter",
                  "StreamResampler", "Framer")


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def build_server(config: dict | None = None, decoder_steps: int = 40, faulty: bool = False, voice: str = "tiny"):
    """A VoxpoolServer (not started) over the tiny voice, or over the installed voice named `voice` (loaded as
    `voxpool serve` loads it); `config` is a partial tree shaped like voxpool.yaml.

    `faulty`: the voice's ModuleRunner is wrapped in a FaultyRunner (`server.engine.backend.runners["tiny"]`).
    """
    from engine.async_engine import AsyncEngine
    from models.voices.bundle import tiny_voice
    from service.config import config_from_dict
    from service.server import VoxpoolServer, engine_config, load_voices

    base = {"server": {"port": 0, "host": "127.0.0.1"}, "voice": {"default": voice}, "engine": {"max_slots": 8}}
    cfg = config_from_dict(_merge(base, config or {}))
    voices = {"tiny": tiny_voice(decoder_steps=decoder_steps)} if voice == "tiny" else load_voices(cfg, (voice,))
    engine = AsyncEngine.from_config(engine_config(cfg), voices=voices)
    server = VoxpoolServer(cfg, engine, voices)
    if faulty:
        FaultyRunner.install(server)
    return server


@contextlib.asynccontextmanager
async def serving(config: dict | None = None, decoder_steps: int = 40, faulty: bool = False, voice: str = "tiny"):
    """A started server; yields the VoxpoolServer (`.port`, `.admission`, `.engine`, `.servicer`)."""
    server = build_server(config, decoder_steps, faulty, voice)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def channel_to(port: int, options: Sequence[tuple[str, Any]] = ()):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=list(options)) as ch:
        yield ch


class Feeder:
    """A request iterator the test drives: put() events, close() ends the client's side of the stream."""

    def __init__(self, *events: pb.ClientEvent):
        self.q: asyncio.Queue = asyncio.Queue()
        for e in events:
            self.put(e)

    def put(self, event: pb.ClientEvent) -> None:
        self.q.put_nowait(event)

    def close(self) -> None:
        self.q.put_nowait(None)

    def __aiter__(self):
        return self

    async def __anext__(self):
        item = await self.q.get()
        if item is None:
            raise StopAsyncIteration
        return item


class ServerThread:
    """A server on its own event loop in a background thread, for synchronous clients (hypothesis tests).

    `call(coro_fn)` runs `await coro_fn()` on the server's loop and returns its result.
    """

    def __init__(self, config: dict | None = None, decoder_steps: int = 40):
        self.config, self.decoder_steps = config, decoder_steps
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-server-loop", daemon=True)
        self.server: Any = None

    def call(self, coro_fn: Callable[[], Any], timeout_s: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro_fn(), self.loop).result(timeout_s)

    def __enter__(self) -> "ServerThread":
        self.thread.start()

        async def start():
            server = build_server(self.config, self.decoder_steps)
            await server.start()
            return server

        self.server = self.call(start)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call(self.server.stop)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()

    def counters(self) -> dict[str, int]:
        async def read():
            return counters(self.server)
        return self.call(read)

    def wait_idle(self, timeout_s: float = 15.0) -> dict[str, int]:
        """Counters once no call, slot or engine request is left (or after the timeout)."""
        end = time.monotonic() + timeout_s
        while True:
            c = self.counters()
            if not any(c[k] for k in ("admission_slots", "calls", "engine_live", "pool_requests", "call_tasks")):
                return c
            if time.monotonic() > end:
                return c
            time.sleep(0.05)


# ---------------------------------------------------------------------- timing of received audio


@dataclass
class Received:
    """Every event of one call with its arrival time (client clock), and the final status."""

    events: list[tuple[float, pb.ServerEvent]] = field(default_factory=list)
    code: grpc.StatusCode | None = None
    details: str = ""
    trailers: dict[str, str] = field(default_factory=dict)
    started_s: float = 0.0
    ended_s: float = 0.0

    def of(self, kind: str) -> list[Any]:
        return [getattr(e, kind) for _, e in self.events if e.WhichOneof("event") == kind]

    def audio(self) -> list[tuple[float, pb.AudioFrame]]:
        return [(t, e.audio) for t, e in self.events if e.HasField("audio")]


async def drive(call: Any) -> Received:
    """Read a call to its end, stamping each event; a non-OK status is recorded, not raised."""
    out = Received(started_s=time.monotonic())
    try:
        async for ev in call:
            out.events.append((time.monotonic(), ev))
        out.code = grpc.StatusCode.OK
    except grpc.aio.AioRpcError as err:
        out.code, out.details = err.code(), err.details() or ""
        out.trailers = {k: v for k, v in (err.trailing_metadata() or ()) if isinstance(v, str)}
    out.ended_s = time.monotonic()
    return out


async def gateway_call(ts: tts_pb2_grpc.TtsStub, config: pb.ClientEvent, *events: pb.ClientEvent,
                       timeout_s: float | None = None) -> Received:
    """A call made the way gateways make it: send config, wait for `started`, then send `events` and read on.

    (Waiting for `started` also keeps the test clear of grpc/grpc#36066, where a Python aio client whose
    write is in flight when the server refuses the call reports INTERNAL instead of the server's status.)
    """
    feeder = Feeder(config)
    out = Received(started_s=time.monotonic())
    call = ts.Converse(feeder, timeout=timeout_s)
    try:
        async for ev in call:
            out.events.append((time.monotonic(), ev))
            if ev.HasField("started"):
                for e in events:
                    feeder.put(e)
        out.code = grpc.StatusCode.OK
    except grpc.aio.AioRpcError as err:
        out.code, out.details = err.code(), err.details() or ""
        out.trailers = {k: v for k, v in (err.trailing_metadata() or ()) if isinstance(v, str)}
    finally:
        feeder.close()  # else grpc's request-consuming task waits on the feeder forever
    out.ended_s = time.monotonic()
    return out


def lateness(frames: list[tuple[float, pb.AudioFrame]]) -> tuple[int, int]:
    """(chunks counted, chunks late) over the frames of one turn, DESIGN §6.

    With t1 the arrival of the first speech frame and C_k the durations received before frame i, a speech
    frame is on time iff t_i <= t1 + sum(C_k). A silence frame between the first and the last speech frame
    is an underrun: the gateway played a gap, so it counts as a late chunk.
    """
    speech = [i for i, (_, f) in enumerate(frames) if not f.silence]
    if not speech:
        return 0, 0
    first, last = speech[0], speech[-1]
    t1 = frames[first][0]
    played_s = 0.0
    counted = late = 0
    for t, f in frames[first:last + 1]:
        counted += 1
        if f.silence or t > t1 + played_s + 1e-4:
            late += 1
        played_s += f.duration_ms / 1000.0
    return counted, late


def call_lateness(rec: Received) -> tuple[int, int]:
    """lateness() summed over the turns of one call."""
    by_turn: dict[str, list] = {}
    for t, f in rec.audio():
        by_turn.setdefault(f.turn_id, []).append((t, f))
    totals = [lateness(frames) for frames in by_turn.values()]
    return sum(c for c, _ in totals), sum(n for _, n in totals)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, int(round(q / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[k]


# ---------------------------------------------------------------------- health


class HealthPoller:
    """Checks liveness and readiness every `period_s` in the background; records (latency_s, status) or errors."""

    def __init__(self, port: int, services: Sequence[str] = ("voxpool.liveness", "voxpool.readiness"),
                 period_s: float = 0.1, timeout_s: float = 1.0):
        self.port, self.services, self.period_s, self.timeout_s = port, services, period_s, timeout_s
        self.results: list[tuple[str, float, int]] = []
        self.errors: list[str] = []
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        async with channel_to(self.port) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while True:
                for name in self.services:
                    t0 = time.monotonic()
                    try:
                        r = await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=self.timeout_s)
                        self.results.append((name, time.monotonic() - t0, r.status))
                    except grpc.aio.AioRpcError as err:
                        self.errors.append(f"{name}: {err.code().name} {err.details()}")
                await asyncio.sleep(self.period_s)

    def __enter__(self) -> "HealthPoller":
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()


async def health_status(port: int, service: str) -> int:
    async with channel_to(port) as ch:
        r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
        return r.status


# ---------------------------------------------------------------------- state accounting


def counters(server) -> dict[str, int]:
    """Cheap per-call state counters of a server (no garbage collection)."""
    core = server.engine.backend
    runner = next(iter(core.runners.values()))
    tasks = asyncio.all_tasks()
    return {
        "admission_slots": server.admission.active,
        "calls": len(server.servicer.calls),
        "engine_live": core.live_count,
        "pool_requests": len(core.pool),
        "pool_slots_in_use": core.pool.num_active,
        "runner_joiners": len(getattr(runner, "joiners", {})),
        "rpc_tasks": sum(1 for t in tasks if t.get_name().startswith("HandleExceptions[/voxpool")),
        "call_tasks": sum(1 for t in tasks if t.get_name().rsplit("-", 1)[-1] in CALL_TASK_SUFFIXES),
    }


def live_objects() -> dict[str, int]:
    """Live instances of the per-call classes after a full collection (Triton's StateNew == StateRelease idea)."""
    gc.collect()
    wanted = set(PER_CALL_TYPES)
    counts = Counter(type(o).__name__ for o in gc.get_objects() if type(o).__name__ in wanted)
    return {name: counts.get(name, 0) for name in PER_CALL_TYPES}


def tracked_state(server) -> dict[str, int]:
    """counters() plus live per-call objects (threads are pools that grow lazily: bounded in the soak test)."""
    return {**counters(server), **live_objects()}


async def settled(server, baseline: dict[str, int], timeout_s: float = 10.0) -> dict[str, int]:
    """Wait until the cheap counters return to `baseline`, then return the full tracked state."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    want = {k: baseline[k] for k in counters(server)}
    while counters(server) != want and loop.time() < end:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.05)  # let finished tasks drop their frames
    return tracked_state(server)


@pytest.fixture(autouse=True)
def tracebacks_as_text():
    """pytest keeps every captured LogRecord, and a record's exc_info and args (an exception logged with %r) keep
    the failing frames, and the engine requests and calls in their locals, alive: that would read as leaked
    per-call state. Records made during these tests carry their message and traceback as text instead."""
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if record.args:
            record.msg, record.args = record.getMessage(), None
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        return record

    logging.setLogRecordFactory(factory)
    yield
    logging.setLogRecordFactory(make)


# ---------------------------------------------------------------------- process resources


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def os_thread_names() -> list[str]:
    """Names of this process's OS threads (Python, torch, gRPC core), sorted."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return sorted(names)


# ---------------------------------------------------------------------- fault injection


class InjectedFault(RuntimeError):
    """The exception a FaultyRunner raises inside one module batch."""


class EngineThreadKilled(BaseException):
    """Not an Exception: escapes the engine's per-batch handler and ends the engine thread (a fatal fault)."""


class Hang:
    """Armed like an exception, but the batch blocks instead (the engine thread stops making progress) until
    `release()`; `entered` is set once the engine thread is stuck in it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._go = threading.Event()

    def wait(self) -> None:
        self.entered.set()
        self._go.wait()

    def release(self) -> None:
        self._go.set()


class FaultyRunner:
    """Wraps a ModuleRunner (engine.modules) and makes chosen batch calls raise; everything else is delegated.

    `arm(module, exc, when)` makes the next call of that module whose request ids satisfy `when` (default: any)
    raise `exc` (or block on it, for a Hang), once; `failed` records
    (module, request ids) of each batch that was made to fail (ids come from the engine's pool, read on the
    engine thread during the batch). Thread-safe: armed on the loop, fired on the engine thread.
    """

    def __init__(self, inner: Any):
        self._inner = inner
        self._lock = threading.Lock()
        self._armed: dict[str, tuple[BaseException, Callable[[tuple[str, ...]], bool]]] = {}
        self.pool: Any = None  # engine.pool.RequestPool, set by install()
        self.failed: list[tuple[str, tuple[str, ...]]] = []

    @classmethod
    def install(cls, server) -> "FaultyRunner":
        """Wrap the tiny voice's runner of a built (not started) server."""
        core = server.engine.backend
        runner = cls(core.runners["tiny"])
        runner.pool = core.pool
        core.runners["tiny"] = runner
        return runner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def arm(self, module: str, exc: BaseException | Hang, when: Callable[[tuple[str, ...]], bool] = lambda ids: True) -> None:
        with self._lock:
            self._armed[module] = (exc, when)

    def _fire(self, module: str, slots: Sequence[int]) -> None:
        with self._lock:
            armed = self._armed.get(module)
            if armed is None:
                return
            by_slot = {r.slot: r.request_id for r in self.pool.active()} if self.pool is not None else {}
            ids = tuple(by_slot.get(s, f"slot{s}") for s in slots)
            exc, when = armed
            if not when(ids):
                return
            del self._armed[module]
            if isinstance(exc, Hang):
                hang = exc
            else:
                self.failed.append((module, ids))
                hang = None
        if hang is not None:
            hang.wait()
            return
        raise exc

    def encode(self, slots, ids, seeds):
        self._fire("encode", slots)
        return self._inner.encode(slots, ids, seeds)

    def decode(self, slots, steps, dropout):
        self._fire("decode", slots)
        return self._inner.decode(slots, steps, dropout)

    def vocode(self, jobs):
        self._fire("vocode", [j.slot for j in jobs])
        return self._inner.vocode(jobs)

    def release(self, slot):
        return self._inner.release(slot)

    def enter_thread(self):
        return self._inner.enter_thread()

    def warmup(self):
        return self._inner.warmup()


def realtime_config(**kw) -> pb.ClientEvent:
    return config_event(pacing=pb.Pacing.REALTIME, **kw)


def stub(ch) -> tts_pb2_grpc.TtsStub:
    return tts_pb2_grpc.TtsStub(ch)
