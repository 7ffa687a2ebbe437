"""The segment audio cache over real gRPC (tiny voice): hits equal fresh synthesis, keys isolate, warm-up, admin RPCs."""

from __future__ import annotations

import grpc
import pytest

from clients import cache_cli
from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc
from tests.service.conftest import (
    collect,
    config_event,
    end_event,
    flush_event,
    pcm_close,
    running_server,
    stub_for,
    text_event,
)

ON = {"enabled": True}

TEXT = "您好，欢迎致电。"


def submitted(server) -> int:
    return server.engine.counters().requests_submitted


async def synthesize(server, text: str = TEXT, **kw) -> list[pb.ServerEvent]:
    audio = pb.AudioFormat(encoding=kw.pop("encoding", pb.AudioFormat.L16), sample_rate_hz=8000, frame_ms=20)
    async with stub_for(server.port) as stub:
        return await collect(stub.Synthesize(pb.SynthesizeRequest(text=text, audio=audio, **kw)))


def audio_of(events) -> bytes:
    return b"".join(e.audio.payload for e in events if e.HasField("audio"))


async def test_a_hit_is_byte_identical_to_a_fresh_synthesis_and_skips_the_engine() -> None:
    async with running_server(cache=ON) as server:
        fresh = await synthesize(server)
        n = submitted(server)
        assert n >= 1
        stored = await synthesize(server)  # second sighting: stored
        assert server.cache.stats().entries == n
        again = await synthesize(server)
        assert submitted(server) == 2 * n  # the third never entered the engine
        assert server.cache.stats().hits == n
        assert audio_of(again) == audio_of(stored) and len(audio_of(fresh)) > 0
        assert pcm_close(audio_of(again), audio_of(fresh))  # fresh syntheses agree up to float rounding
        done = [e.turn_done for e in again if e.HasField("turn_done")][0]
        fresh_done = [e.turn_done for e in fresh if e.HasField("turn_done")][0]
        assert done.audio_ms == fresh_done.audio_ms  # (chunk boundaries vary with load; the bytes do not)


async def test_marks_and_barge_in_text_on_a_hit_match_fresh_synthesis() -> None:
    text_a, text_b = "您好，欢迎致电。", "请问有什么可以帮您？"

    async def converse(server) -> list[pb.ServerEvent]:
        events = [config_event(encoding=pb.AudioFormat.L16), text_event(text_a, "t"),
                  pb.ClientEvent(mark=pb.Mark(name="m1", turn_id="t")), text_event(text_b, "t"), flush_event("t"),
                  end_event()]

        async def feed():
            for e in events:
                yield e

        async with stub_for(server.port) as stub:
            return await collect(stub.Converse(feed()))

    def view(events):  # everything but timing-dependent fields
        out = []
        for e in events:
            kind = e.WhichOneof("event")
            if kind == "audio":
                out.append(("audio", e.audio.payload, e.audio.pts_ms, e.audio.silence))
            elif kind == "mark_reached":
                out.append(("mark", e.mark_reached.name, e.mark_reached.pts_ms))
            elif kind == "turn_done":
                out.append(("done", e.turn_done.audio_ms, e.turn_done.chunks))
        return out

    async with running_server(cache={**ON, "admit_after_sightings": 1}) as server:
        fresh = await converse(server)
        n = submitted(server)
        hit = await converse(server)
        assert submitted(server) == n and server.cache.stats().hits >= 1
        assert view(hit) == view(fresh)
        assert any(v[0] == "mark" for v in view(hit))


async def test_seed_lexicon_reading_option_or_voice_never_hit() -> None:
    async with running_server(cache={**ON, "admit_after_sightings": 1}) as server:
        text = "朝阳号码110"
        base = await synthesize(server, text)
        n = submitted(server)
        variants = [
            dict(seed=5),
            dict(lexicon={"朝阳": "chao2 yang2"}),  # another tenant's reading of the same word
            dict(normalization=pb.NormalizationOptions(one_as_yao=False)),
        ]
        for i, kw in enumerate(variants, start=1):
            other = await synthesize(server, text, **kw)
            assert submitted(server) == n * (i + 1), kw  # each one was synthesized, not served from the cache
            assert audio_of(other) != audio_of(base), kw
        assert server.cache.stats().hits == 0
        async with stub_for(server.port) as stub:  # an unknown voice is refused as before, never looked up
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await collect(stub.Synthesize(pb.SynthesizeRequest(text=text, voice="nobody")))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        again = await synthesize(server, text)  # and the original still hits
        assert audio_of(again) == audio_of(base) and server.cache.stats().hits == n


async def test_an_option_that_does_not_change_the_ids_shares_the_entry() -> None:
    # the key holds the ids the lexicon and reading options produced: audio is a function of them, so a
    # session whose options leave this text's ids unchanged gets byte-identical audio from the cache
    async with running_server(cache={**ON, "admit_after_sightings": 1}) as server:
        text = "朝阳路1号"  # 1 in an address is read yi1 whatever one_as_yao says
        base = await synthesize(server, text)
        n = submitted(server)
        same = await synthesize(server, text, normalization=pb.NormalizationOptions(one_as_yao=False),
                                lexicon={"银行": "yin2 hang2"})
        assert submitted(server) == n and server.cache.stats().hits == n
        assert audio_of(same) == audio_of(base)


async def test_a_lexicon_that_changes_the_reading_never_gets_the_default_entry() -> None:
    async with running_server(cache={**ON, "admit_after_sightings": 1}) as server:
        text = "请到朝阳门办理。"
        await synthesize(server, text)  # tenant A: default readings, now cached
        tenant_b = await synthesize(server, text, lexicon={"朝阳": "chao2 yang2"})
        assert server.cache.stats().hits == 0
        tenant_b_again = await synthesize(server, text, lexicon={"朝阳": "chao2 yang2"})
        assert server.cache.stats().hits >= 1  # B's own entry serves B
        assert audio_of(tenant_b_again) == audio_of(tenant_b)


async def test_cache_off_synthesizes_every_time() -> None:
    async with running_server(cache={"enabled": False}) as server:
        assert server.cache is None
        first = await synthesize(server)
        n = submitted(server)
        for _ in range(2):
            assert pcm_close(audio_of(await synthesize(server)), audio_of(first))
        assert submitted(server) == 3 * n


async def test_warm_up_at_start_reports_bad_lines_and_serves_hits(tmp_path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join([
        "# IVR prompts",
        TEXT,
        '{"text": "请按一号键。", "seed": 3}',
        "",
        '{"text": "坏行", "nope": 1}',
        '{"text": "未知的声音。", "voice": "nobody"}',
        "{not json",
    ]), encoding="utf-8")
    async with running_server(cache={**ON, "warm_file": str(prompts)}) as server:
        stats = server.cache.stats()
        assert stats.entries >= 2 and stats.rejected_first_sighting == 0
        n = submitted(server)
        await synthesize(server)  # warmed: a hit on the first request
        await synthesize(server, "请按一号键。", seed=3)
        assert submitted(server) == n and server.cache.stats().hits >= 2

        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = tts_pb2_grpc.CacheAdminStub(channel)
            lines = [pb.WarmCacheLine(line_number=1, line="谢谢您的来电。"),
                     pb.WarmCacheLine(line_number=2, line='{"text": ""}'),
                     pb.WarmCacheLine(line_number=3, line="# comment")]
            report = await stub.WarmCache(iter(lines))
            assert (report.warmed, report.failed, report.timed_out) == (1, 1, 0)
            assert [r.line_number for r in report.lines] == [1, 2]
            assert report.lines[0].outcome == pb.WarmLineResult.WARMED and report.lines[0].audio_ms > 0
            assert report.lines[1].outcome == pb.WarmLineResult.FAILED and "text" in report.lines[1].message
            stats = await stub.GetCacheStats(pb.CacheStatsRequest())
            assert stats.enabled and stats.entries == server.cache.stats().entries and stats.hits >= 2
            assert 0 < stats.bytes <= stats.max_bytes


async def test_warm_up_is_time_bounded(tmp_path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"第{i}句提示音，请稍候。" for i in range(40)), encoding="utf-8")
    async with running_server(cache={**ON, "warm_file": str(prompts), "warm_timeout_s": 0.3, "warm_concurrency": 1},
                              decoder_steps=200) as server:
        outcomes = [r.outcome for r in server.warm_results]
        assert len(outcomes) == 40 and "timed_out" in outcomes  # readiness did not wait for all 40 lines
        assert server.cache.stats().entries < 40
        assert server.engine.in_flight == 0  # the unfinished lines' syntheses were cancelled
        assert "0.3 s" in next(r.message for r in server.warm_results if r.outcome == "timed_out")


async def test_admin_rpc_when_the_cache_is_off_and_cli_against_a_running_server(tmp_path, capsys) -> None:
    async with running_server(cache={"enabled": False}) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = tts_pb2_grpc.CacheAdminStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.WarmCache(iter([pb.WarmCacheLine(line_number=1, line=TEXT)]))
            assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert not (await stub.GetCacheStats(pb.CacheStatsRequest())).enabled
        assert server.cache is None


async def test_cli_warm_and_stats(tmp_path, capsys) -> None:
    import asyncio

    prompts = tmp_path / "prompts.txt"
    prompts.write_text(TEXT + "\n" + '{"text": 5}\n' + "长" * 21000 + "\n", encoding="utf-8")
    async with running_server(cache=ON) as server:
        loop = asyncio.get_running_loop()
        address = f"127.0.0.1:{server.port}"
        rc = await loop.run_in_executor(None, cache_cli.main, ["warm", str(prompts), "--server", address])
        out = capsys.readouterr().out
        assert rc == 1  # two bad lines
        assert f"{prompts}:2: failed" in out and f"{prompts}:3: failed: longer than" in out
        assert "warmed 1, failed 2" in out
        assert server.cache.stats().entries >= 1
        rc = await loop.run_in_executor(None, cache_cli.main, ["stats", "--server", address, "--json"])
        out = capsys.readouterr().out
        assert rc == 0 and '"enabled": true' in out and '"entries"' in out
    rc = cache_cli.main(["stats", "--server", address, "--timeout", "0.5"])
    assert rc == 2 and "UNAVAILABLE" in capsys.readouterr().err


async def test_cache_metrics_on_the_prometheus_endpoint() -> None:
    from tests.service.telemetry_support import sample, scrape, telemetry_server

    async with telemetry_server(None, metrics=True, cache=ON) as server:
        await synthesize(server)
        await synthesize(server)
        await synthesize(server)
        text = await scrape(server.telemetry.metrics_port)
        assert sample(text, "voxpool_audio_cache_hits_total") >= 1
        assert sample(text, "voxpool_audio_cache_misses_total") >= 2
        assert sample(text, "voxpool_audio_cache_entries") >= 1
        assert 0 < sample(text, "voxpool_audio_cache_bytes") <= sample(text, "voxpool_audio_cache_max_bytes")
        assert 0 < sample(text, "voxpool_audio_cache_hit_ratio") < 1
        assert sample(text, "voxpool_audio_cache_evictions_total") == 0
        assert sample(text, "voxpool_audio_cache_rejected_total", reason="first_sighting") >= 1
