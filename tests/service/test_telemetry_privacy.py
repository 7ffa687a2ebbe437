"""Caller text stays out of telemetry: card and phone numbers pushed through every fault path (normalization failure,
segment skipped, SSML error, engine failure of a turn, invalid argument, rate limited, cancelled, barge-in, cache
warm-up) reach the client in its in-band messages but no span, span event, attribute, log record or metric label."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
import pytest

from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc
from tests.reliability.conftest import FaultyRunner, InjectedFault, _merge
from tests.service.conftest import config_event, end_event, flush_event, text_event
from tests.service.telemetry_support import free_port, memory_tracing, scrape

CARD = "6222021234567890123"
PHONE = "13812345678"
PHRASE = "我的银行卡号"  # the words around them
SKIPPED = "김민준카드"  # a segment with nothing the voice can read (a name in Hangul)
PLANTED = (CARD, PHONE, PHRASE, SKIPPED, CARD[:10], PHONE[:7])
TOKEN = "acme-0123456789abcdef-SECRET"
SLOW_TOKEN = "slow-0123456789abcdef-SECRET"
SAY = f"{PHRASE}是{CARD}，手机号码是{PHONE}。"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@contextlib.asynccontextmanager
async def privacy_server(tmp_path, provider, **over):
    """A server (tiny voice, faulty runner, cache on, auth with a text-rate-limited tenant) with in-memory spans and
    a /metrics port."""
    from engine.async_engine import AsyncEngine
    from models.voices.bundle import tiny_voice
    from service.config import config_from_dict
    from service.server import VoxpoolServer, engine_config
    from service.telemetry import Telemetry

    tokens = tmp_path / "tokens"
    tokens.write_text(f"acme={TOKEN}\nslow={SLOW_TOKEN}\n", encoding="utf-8")
    base = {
        "server": {"port": 0, "host": "127.0.0.1"}, "voice": {"default": "tiny"}, "engine": {"max_slots": 8},
        "frontend": {"max_segment_chars": 400},  # a long digit string stays one segment: too many ids for the voice
        "telemetry": {"metrics_port": free_port(), "log_level": "DEBUG"},
        "cache": {"enabled": True, "admit_after_sightings": 1},
        "security": {"auth": True, "tokens_file": str(tokens), "tokens_env": "VOXPOOL_TEST_NO_TOKENS",
                     "tenants": {"slow": {"max_text_chars_per_min": 30}}},
    }
    cfg = config_from_dict(_merge(base, over))
    voices = {"tiny": tiny_voice(decoder_steps=40)}
    engine = AsyncEngine.from_config(engine_config(cfg), voices=voices)
    server = VoxpoolServer(cfg, engine, voices, telemetry=Telemetry(cfg.telemetry, tracer_provider=provider, environ={}))
    FaultyRunner.install(server)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def converse(ts, *events, metadata=bearer(TOKEN), cancel_after_audio: bool = False):
    """(events received, status code, details) of one Converse call; the events go after `started`."""
    queue: asyncio.Queue = asyncio.Queue()

    async def requests():
        while (e := await queue.get()) is not None:
            yield e

    queue.put_nowait(events[0])
    call = ts.Converse(requests(), metadata=metadata)
    got = []
    try:
        async for ev in call:
            got.append(ev)
            if ev.HasField("started"):
                for e in events[1:]:
                    queue.put_nowait(e)
            if cancel_after_audio and ev.HasField("audio") and not ev.audio.silence:
                call.cancel()
        code, details = grpc.StatusCode.OK, ""
    except grpc.aio.AioRpcError as err:
        code, details = err.code(), err.details() or ""
    except asyncio.CancelledError:
        code, details = grpc.StatusCode.CANCELLED, ""
    finally:
        queue.put_nowait(None)
    return got, code, details


def in_band(events, kind: str) -> list:
    return [getattr(e, kind) for e in events if e.WhichOneof("event") == kind]


def span_text(span) -> str:
    """Everything a span exports that could hold text: name, status, attributes, events, links."""
    parts = [span.name, str(span.status.description or ""), repr(dict(span.attributes or {}))]
    for ev in span.events:
        parts += [ev.name, repr(dict(ev.attributes or {}))]
    for link in span.links:
        parts.append(repr(dict(link.attributes or {})))
    return "\n".join(parts)


def record_text(record: logging.LogRecord) -> str:
    """Everything a log record carries: the formatted message, exception text, and every attribute (`extra=`)."""
    return "\n".join([logging.Formatter().format(record), repr(vars(record))])


async def drive_every_fault_path(server) -> dict[str, tuple]:
    """Push the planted text through each fault path; returns what each client got."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        ts = tts_pb2_grpc.TtsStub(ch)
        out = {}
        long_digits = f"{PHRASE}是" + CARD * 12 + "。"  # one segment, more ids than the voice takes
        out["normalization"] = await converse(ts, config_event(), text_event(long_digits, "t-norm"), end_event())
        out["skipped"] = await converse(ts, config_event(), text_event(f"{SKIPPED}。", "t-skip"),
                                        text_event(SAY, "t-after"), end_event())
        ssml = pb.TextDelta(text=f"<speak>{PHRASE}<break time='{CARD}'/>{PHONE}</speak>", turn_id="t-ssml",
                            turn_options=pb.TurnOptions(text_format=pb.TurnOptions.SSML))
        out["ssml"] = await converse(ts, config_event(), pb.ClientEvent(text=ssml), flush_event("t-ssml"), end_event())
        runner = server.engine.backend.runners["tiny"]
        runner.arm("decode", InjectedFault("injected decode failure"))
        engine_text = f"{PHONE}，{PHRASE}{CARD}。"  # not said before: no cache hit, the engine runs it
        out["engine"] = await converse(ts, config_event(), text_event(engine_text, "t-engine"), end_event())
        out["invalid"] = await converse(ts, config_event(voice=f"{PHRASE}{CARD}"), end_event())
        out["lexicon"] = await converse(ts, config_event(lexicon={f"{PHRASE}{CARD}": "bad"}), end_event())
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await ts.Normalize(pb.NormalizeRequest(text=SAY, lexicon={CARD: PHONE}), metadata=bearer(TOKEN))
        out["normalize"] = ([], err.value.code(), err.value.details())
        long_synth = SAY * (server.cfg.limits.max_synthesize_chars // len(SAY) + 1)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in ts.Synthesize(pb.SynthesizeRequest(text=long_synth), metadata=bearer(TOKEN)):
                pass
        out["synthesize_too_long"] = ([], err.value.code(), err.value.details())
        out["rate"] = await converse(ts, config_event(), text_event(SAY, "t-rate"), text_event(SAY, "t-rate2"),
                                     end_event(), metadata=bearer(SLOW_TOKEN))
        out["cancelled"] = await converse(ts, config_event(pacing=pb.Pacing.REALTIME), text_event(SAY * 3, "t-cancel"),
                                          cancel_after_audio=True)
        clear = pb.ClientEvent(clear=pb.Clear(turn_id="t-clear"))
        out["cleared"] = await converse(ts, config_event(pacing=pb.Pacing.REALTIME), text_event(SAY * 3, "t-clear"),
                                        flush_event("t-clear"), clear, end_event())
        report = await tts_pb2_grpc.CacheAdminStub(ch).WarmCache(
            iter([pb.WarmCacheLine(line_number=1, line=SKIPPED),
                  pb.WarmCacheLine(line_number=2, line=f'{{"text": "{SAY}", "voice": "{CARD}"}}')]),
            metadata=bearer(TOKEN))
        out["warm"] = (list(report.lines), grpc.StatusCode.OK, "")
        return out


async def test_planted_card_and_phone_numbers_reach_no_span_log_or_metric(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, every level
    provider, exporter = memory_tracing()
    async with privacy_server(tmp_path, provider) as server:
        out = await drive_every_fault_path(server)
        metrics = await scrape(server.telemetry.metrics_port)

    # every path ran, and the client got its in-band answers with the text where they quote it
    errors = {name: in_band(events, "error") for name, (events, _, _) in out.items() if name != "warm"}
    assert [e.code for e in errors["normalization"]] == [pb.Error.NORMALIZATION_FAILED]
    assert CARD in errors["normalization"][0].message  # the client may be told which text failed
    warnings = in_band(out["skipped"][0], "warning")
    assert any(w.code == "segment_skipped" and SKIPPED in w.message for w in warnings)
    assert in_band(out["skipped"][0], "turn_done")
    assert [e.code for e in errors["ssml"]] == [pb.Error.INVALID_SSML]
    assert [(e.code, e.turn_id) for e in errors["engine"]] == [(pb.Error.SYNTHESIS_FAILED, "t-engine")]
    assert out["invalid"][1] == grpc.StatusCode.INVALID_ARGUMENT
    assert out["lexicon"][1] == grpc.StatusCode.OK  # a bad lexicon entry is skipped with a warning naming it
    assert any(w.code == "lexicon_entry_invalid" and CARD in w.message for w in in_band(out["lexicon"][0], "warning"))
    assert out["normalize"][1] == grpc.StatusCode.INVALID_ARGUMENT
    assert out["synthesize_too_long"][1] == grpc.StatusCode.INVALID_ARGUMENT
    assert out["rate"][1] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert out["cancelled"][1] == grpc.StatusCode.CANCELLED
    assert in_band(out["cleared"][0], "cleared") and out["cleared"][1] == grpc.StatusCode.OK
    assert [r.outcome for r in out["warm"][0]] == [pb.WarmLineResult.FAILED, pb.WarmLineResult.FAILED]
    assert SKIPPED in out["warm"][0][0].message

    spans = exporter.get_finished_spans()
    failed_turns = [s for s in spans if s.name == "voxpool.turn" and s.attributes.get("tts.turn.outcome") == "failed"]
    assert {s.attributes["tts.turn_id"] for s in failed_turns} >= {"t-norm", "t-ssml", "t-engine"}
    assert all(s.status.description == "turn failed" for s in failed_turns)
    assert any(s.attributes.get("tts.segment.outcome") == "skipped" for s in spans)
    assert len([s for s in spans if s.name.endswith("/Converse")]) >= 7
    records = [r for r in caplog.records]
    assert any("call ended" in r.getMessage() for r in records)
    assert any("cache warm-up: line 1 failed" in r.getMessage() for r in records)
    assert any(r.name.startswith("service.ssml") for r in records)  # the SSML refusal was logged (without text)
    assert "voxpool_calls" in metrics or "voxpool_" in metrics

    leaks = []
    for span in spans:
        text = span_text(span)
        leaks += [(f"span {span.name}", p) for p in PLANTED if p in text]
    for record in records:
        text = record_text(record)
        leaks += [(f"log {record.name}: {record.getMessage()[:80]}", p) for p in PLANTED if p in text]
    leaks += [("metrics", p) for p in PLANTED if p in metrics]
    assert not leaks, leaks


async def test_the_debug_setting_lets_logs_quote_caller_text_but_never_spans(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    provider, exporter = memory_tracing()
    try:
        async with privacy_server(tmp_path, provider, telemetry={"log_caller_text": True}) as server:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as ch:
                ts = tts_pb2_grpc.TtsStub(ch)
                _, code, _ = await converse(ts, config_event(voice=f"{PHRASE}{CARD}"), end_event())
                long_digits = f"{PHRASE}是" + CARD * 12 + "。"
                events, _, _ = await converse(ts, config_event(), text_event(long_digits, "t-norm"), end_event())
        assert code == grpc.StatusCode.INVALID_ARGUMENT and in_band(events, "error")
        assert any(CARD in r.getMessage() for r in caplog.records if r.name == "service.servicer" and "ended: INVALID_ARGUMENT" in r.getMessage())
        assert not [s.name for s in exporter.get_finished_spans() if CARD in span_text(s)]
    finally:
        from service.telemetry.privacy import set_log_caller_text

        set_log_caller_text(False)
