"""Every RPC admitted and authorized: CacheAdmin only on the serving port, behind the bearer-token, tenant and
text-rate rules of the Tts methods; cache warm-up lines and Normalize each hold a call slot; the admin port serves
health and reflection only."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc
from tests.reliability.conftest import SERVING, Feeder, channel_to, config_event, end_event, serving, stub
from tests.reliability.test_security import (  # noqa: F401 (token_file is a fixture)
    ACME_TOKEN, VIEWER_TOKEN, _free_port, auth_config, bearer, token_file,
)

CACHE_ON = {"enabled": True, "admit_after_sightings": 1}


def warm_lines(*texts: str) -> list[pb.WarmCacheLine]:
    return [pb.WarmCacheLine(line_number=i + 1, line=t) for i, t in enumerate(texts)]


async def code_of(coro) -> grpc.StatusCode:
    try:
        await coro
        return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as err:
        return err.code()


async def test_cache_admin_is_served_on_the_serving_port_behind_auth_and_not_on_the_admin_port(token_file):
    admin = _free_port()
    cfg = {**auth_config(token_file, viewer={"methods": ["ListVoices"]}), "cache": CACHE_ON,
           "server": {"admin_port": admin}}
    async with serving(cfg) as server:
        submitted = server.engine.counters().requests_submitted
        async with channel_to(admin) as ch:  # plaintext, no token: health only
            r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="voxpool.liveness"))
            assert r.status == SERVING
            cache = tts_pb2_grpc.CacheAdminStub(ch)
            assert await code_of(cache.WarmCache(iter(warm_lines("您好。")))) == grpc.StatusCode.UNIMPLEMENTED
            assert await code_of(cache.GetCacheStats(pb.CacheStatsRequest())) == grpc.StatusCode.UNIMPLEMENTED
            normalize = tts_pb2_grpc.TtsStub(ch).Normalize(pb.NormalizeRequest(text="您好"))
            assert await code_of(normalize) == grpc.StatusCode.UNIMPLEMENTED
        async with channel_to(server.port) as ch:
            cache = tts_pb2_grpc.CacheAdminStub(ch)
            for metadata, expected in (((), grpc.StatusCode.UNAUTHENTICATED), (bearer("x" * 32), grpc.StatusCode.UNAUTHENTICATED),
                                       (bearer(VIEWER_TOKEN), grpc.StatusCode.PERMISSION_DENIED)):
                warm = cache.WarmCache(iter(warm_lines("您好。")), metadata=metadata)
                assert await code_of(warm) == expected
                assert await code_of(cache.GetCacheStats(pb.CacheStatsRequest(), metadata=metadata)) == expected
            assert server.engine.counters().requests_submitted == submitted  # nothing refused reached the engine
            report = await cache.WarmCache(iter(warm_lines("您好。")), metadata=bearer(ACME_TOKEN))
            assert report.warmed == 1
            assert (await cache.GetCacheStats(pb.CacheStatsRequest(), metadata=bearer(ACME_TOKEN))).entries >= 1
        assert server.admission.active == 0


async def test_a_tenant_may_be_allowed_cache_admin_by_name(token_file):
    cfg = {**auth_config(token_file, viewer={"methods": ["ListVoices", "GetCacheStats"]}), "cache": CACHE_ON}
    async with serving(cfg) as server, channel_to(server.port) as ch:
        cache = tts_pb2_grpc.CacheAdminStub(ch)
        assert (await cache.GetCacheStats(pb.CacheStatsRequest(), metadata=bearer(VIEWER_TOKEN))).enabled
        warm = cache.WarmCache(iter(warm_lines("您好。")), metadata=bearer(VIEWER_TOKEN))
        assert await code_of(warm) == grpc.StatusCode.PERMISSION_DENIED


async def test_warm_up_lines_count_against_the_tenants_text_rate(token_file):
    cfg = {**auth_config(token_file, acme={"max_text_chars_per_min": 20}), "cache": CACHE_ON}
    async with serving(cfg) as server, channel_to(server.port) as ch:
        submitted = server.engine.counters().requests_submitted
        warm = tts_pb2_grpc.CacheAdminStub(ch).WarmCache(iter(warm_lines("您好。" * 4, "再见。" * 4)),
                                                          metadata=bearer(ACME_TOKEN))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await warm
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "20 characters per minute" in err.value.details()
        assert server.engine.counters().requests_submitted == submitted


async def test_warm_up_lines_hold_call_slots_and_wait_for_them(token_file):
    # acme may hold one call: with that call open, its warm-up waits; once the call ends, every line is warmed
    cfg = {**auth_config(token_file, acme={"max_calls": 1}), "cache": {**CACHE_ON, "warm_concurrency": 4}}
    async with serving(cfg) as server, channel_to(server.port) as ch:
        held = Feeder(config_event())
        call = stub(ch).Converse(held, metadata=bearer(ACME_TOKEN))
        assert (await call.read()).HasField("started")
        submitted = server.engine.counters().requests_submitted
        warm = asyncio.ensure_future(tts_pb2_grpc.CacheAdminStub(ch).WarmCache(
            iter(warm_lines("第一句。", "第二句。", "第三句。")), metadata=bearer(ACME_TOKEN)))
        for _ in range(20):  # the warm-up is waiting for acme's slot: no synthesis yet
            await asyncio.sleep(0.05)
            assert not warm.done() and server.engine.counters().requests_submitted == submitted
            assert server.admission.active_for("acme") == 1
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while not warm.done():
                peak = max(peak, server.admission.active_for("acme"))
                await asyncio.sleep(0.005)

        watcher = asyncio.ensure_future(watch())
        held.put(end_event())
        held.close()
        while await call.read() is not grpc.aio.EOF:
            pass
        report = await warm
        await watcher
        assert report.warmed == 3 and peak == 1  # one line at a time: the tenant's limit held
        assert server.admission.active == 0


async def test_normalize_takes_a_call_slot(token_file):
    async with serving({**auth_config(token_file, acme={"max_calls": 1})}) as server, channel_to(server.port) as ch:
        ts = stub(ch)
        ok = await ts.Normalize(pb.NormalizeRequest(text="1号"), metadata=bearer(ACME_TOKEN))
        assert ok.ids and server.admission.active == 0  # released after the answer
        held = Feeder(config_event())
        call = ts.Converse(held, metadata=bearer(ACME_TOKEN))
        assert (await call.read()).HasField("started")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await ts.Normalize(pb.NormalizeRequest(text="1号"), metadata=bearer(ACME_TOKEN))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "tenant acme" in err.value.details()
        assert int(dict(err.value.trailing_metadata())["grpc-retry-pushback-ms"]) > 0
        held.put(end_event())
        held.close()
        while await call.read() is not grpc.aio.EOF:
            pass


async def test_normalize_and_warm_up_refused_while_the_server_takes_no_calls():
    async with serving({"cache": CACHE_ON}) as server, channel_to(server.port) as ch:
        server.admission.close("the server is draining; retry on another server")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub(ch).Normalize(pb.NormalizeRequest(text="您好"))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await tts_pb2_grpc.CacheAdminStub(ch).WarmCache(iter(warm_lines("您好。")))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "draining" in err.value.details()
