"""Soak: sustained mixed load (turns, ASAP and REALTIME, barge-in) for a bounded time: no failed call, no growth of
resident memory, file descriptors or threads beyond the stated bounds, and every per-call state released.

CI runs 20 s; VOXPOOL_SOAK_S=600 runs ten minutes (same assertions, same bounds)."""

import asyncio
import gc
import os
import random
import threading
import time

import grpc

from protos.voxpool.v1 import tts_pb2 as pb
from tests.reliability.conftest import (
    Feeder, channel_to, config_event, end_event, flush_event, gateway_call, open_fds, os_thread_names, os_threads,
    realtime_config, rss_bytes, serving, settled, stub, text_event, tracked_state,
)

SOAK_S = float(os.environ.get("VOXPOOL_SOAK_S", "20"))
WARMUP_S = min(8.0, max(4.0, 0.2 * SOAK_S))  # pools, caches and allocator arenas fill up first
LANES = 3  # of 4 slots: ~75-80 % of S, the survey's soak load
# Resident memory may not grow more than this after warm-up. Short CI runs still see one-off growth from
# shapes met for the first time (oneDNN primitive caches, allocator arenas): +45 MiB was seen once in a
# 20 s run on a fresh machine, while a 180 s run grew +3.7 MiB in total. A leak grows with time; the long
# soak (VOXPOOL_SOAK_S >= 120) keeps the tight bound.
RSS_BOUND_MIB = 24.0 if SOAK_S >= 120 else 96.0
GRPC_POOL_SLACK = 4  # gRPC core's event-engine thread pool grows and shrinks with load
TEXTS = ["您好，欢迎致电。", "请问有什么可以帮您？", "您的订单号是一二三四五六。", "好的，请稍等。",
         "感谢您的来电，再见。"]


def other_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if not t.name.startswith("frontend")]


async def barge_in(ts, rng) -> grpc.StatusCode:
    """REALTIME turn cleared after its first audio, then the call ends: the gateway's caller spoke over it."""
    feeder = Feeder(realtime_config(), text_event("".join(rng.sample(TEXTS, 3)), turn_id="t"), flush_event("t"))
    call = ts.Converse(feeder)
    try:
        async for ev in call:
            if ev.HasField("audio") and not ev.audio.silence and not ev.audio.pts_ms:
                feeder.put(pb.ClientEvent(clear=pb.Clear(turn_id="t")))
            if ev.HasField("cleared"):
                feeder.put(end_event())
        return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as err:
        return err.code()
    finally:
        feeder.close()


async def one_call(ts, rng) -> grpc.StatusCode:
    roll = rng.random()
    if roll < 0.2:
        return await barge_in(ts, rng)
    if roll < 0.4:  # two turns, as fast as synthesized
        rec = await gateway_call(ts, config_event(), text_event(rng.choice(TEXTS), turn_id="1"),
                                 text_event(rng.choice(TEXTS), turn_id="2"), end_event())
        return rec.code if len(rec.of("turn_done")) == 2 else grpc.StatusCode.DATA_LOSS
    rec = await gateway_call(ts, realtime_config(), text_event(rng.choice(TEXTS)), end_event())
    return rec.code if len(rec.of("turn_done")) == 1 else grpc.StatusCode.DATA_LOSS


async def test_soak():
    async with serving({"server": {"max_calls": LANES + 1}}) as server, channel_to(server.port) as ch:
        ts = stub(ch)
        start_state = tracked_state(server)
        outcomes: dict[str, int] = {}
        samples: list[tuple[float, int, int, int]] = []
        mark: dict[str, int] = {}
        t0 = time.monotonic()
        gen2 = [0]  # automatic full collections: each stalls the event loop for the whole heap walk

        def on_gc(phase, info):
            if phase == "stop" and info["generation"] == 2 and not mark.get("collecting"):
                gen2[0] += 1

        async def lane(seed: int) -> None:
            rng = random.Random(seed)
            while time.monotonic() - t0 < SOAK_S:
                code = await one_call(ts, rng)
                outcomes[code.name] = outcomes.get(code.name, 0) + 1

        async def sampler() -> None:
            while True:
                await asyncio.sleep(1.0)
                samples.append((time.monotonic() - t0, rss_bytes(), open_fds(), os_threads()))
                if not mark and time.monotonic() - t0 >= WARMUP_S:
                    mark["collecting"] = 1
                    gc.collect()
                    mark.update(collecting=0, rss=rss_bytes(), fds=open_fds(), threads=os_threads(),
                                py_other=len(other_threads()))

        gc.callbacks.append(on_gc)
        watcher = asyncio.create_task(sampler())
        try:
            await asyncio.gather(*(lane(i) for i in range(LANES)))
        finally:
            watcher.cancel()
            gc.callbacks.remove(on_gc)

        mark["collecting"] = 1  # from here on, full collections are the test's own
        end_state = await settled(server, start_state)
        gc.collect()
        rss_growth_mib = (rss_bytes() - mark["rss"]) / 2**20
        calls = sum(outcomes.values())
        print(f"\nsoak {SOAK_S:.0f} s: {calls} calls {outcomes}; RSS {mark['rss'] / 2**20:.0f} MiB -> "
              f"{rss_bytes() / 2**20:.0f} MiB ({rss_growth_mib:+.1f}); fds {mark['fds']} -> {open_fds()}; "
              f"threads {mark['threads']} -> {os_threads()} ({', '.join(sorted(set(os_thread_names())))}); "
              f"gen-2 collections {gen2[0]}")

        assert outcomes == {"OK": calls} and calls >= LANES * SOAK_S / 4  # every call completed
        assert end_state == start_state  # state created == state released
        assert rss_growth_mib <= RSS_BOUND_MIB
        assert open_fds() <= mark["fds"]  # no leaked sockets or files
        # Python threads: the frontend pool grows lazily up to its size; nothing else appears
        frontend = [t for t in threading.enumerate() if t.name.startswith("frontend")]
        assert len(frontend) <= server.cfg.server.worker_threads
        assert len(other_threads()) <= mark["py_other"]
        assert max(t for _, _, _, t in samples) <= mark["threads"] + GRPC_POOL_SLACK
