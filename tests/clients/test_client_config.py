"""Client library pieces that need no server: service config, channel options, request building, events, errors."""

import json

import grpc
import pytest

from clients.client import (
    DEFAULT_SERVICE_CONFIG,
    Audio,
    ClientConfigError,
    InvalidRequest,
    ServerBusy,
    Started,
    TurnDone,
    TurnError,
    VoxpoolError,
    audio_format,
    channel_options,
    error_from_rpc,
    event_from_proto,
    session_config,
    text_spans,
)
from protos.voxpool.v1 import tts_pb2 as pb


def test_default_service_config_json():
    opts = dict(channel_options())
    assert json.loads(opts["grpc.service_config"]) == {
        "loadBalancingConfig": [{"round_robin": {}}],
        "healthCheckConfig": {"serviceName": "voxpool.readiness"},
    }
    assert json.loads(opts["grpc.service_config"]) == DEFAULT_SERVICE_CONFIG
    assert opts["grpc.enable_retries"] == 1
    assert opts["grpc.keepalive_time_ms"] == 30_000


def test_service_config_can_be_replaced_or_dropped():
    custom = {"loadBalancingConfig": [{"pick_first": {}}]}
    assert json.loads(dict(channel_options(custom))["grpc.service_config"]) == custom
    assert "grpc.service_config" not in dict(channel_options(""))
    assert dict(channel_options(extra=[("grpc.primary_user_agent", "gw/1")]))["grpc.primary_user_agent"] == "gw/1"


def test_session_config_building():
    cfg = session_config("baker-zh", "pcma", 16000, 10, "asap", lead_ms=40, preroll_ms=20,
                         lexicon={"朝阳": "chao2 yang2"}, one_as_yao=False, seed=7)
    assert cfg.voice == "baker-zh" and cfg.audio.encoding == pb.AudioFormat.PCMA
    assert (cfg.audio.sample_rate_hz, cfg.audio.frame_ms) == (16000, 10)
    assert cfg.pacing.mode == pb.Pacing.ASAP and cfg.pacing.lead_ms == 40 and cfg.preroll_ms == 20
    assert dict(cfg.lexicon) == {"朝阳": "chao2 yang2"} and cfg.normalization.one_as_yao is False
    assert cfg.HasField("seed") and cfg.seed == 7
    assert not session_config().pacing.HasField("lead_ms")
    with pytest.raises(ClientConfigError, match="encoding"):
        audio_format("opus")
    with pytest.raises(ClientConfigError, match="pacing"):
        session_config(pacing="later")
    spans = text_spans([(3, 14, "telephone")])
    assert spans[0].kind == pb.TextSpan.TELEPHONE and (spans[0].start, spans[0].end) == (3, 14)
    with pytest.raises(ClientConfigError):
        text_spans([(0, 1, "nonsense")])


def test_events_from_proto():
    started = pb.ServerEvent(started=pb.SessionStarted(
        session_id="s1", frame_bytes=160, server_version="0.1.0",
        effective_config=pb.SessionConfig(
            voice="tiny", audio=pb.AudioFormat(encoding=1, sample_rate_hz=8000, frame_ms=20),
            pacing=pb.Pacing(mode=pb.Pacing.REALTIME, lead_ms=60)),
        voice=pb.Voice(name="tiny", sample_rate_hz=24000, is_default=True)))
    ev = event_from_proto(started, 1.5)
    assert isinstance(ev, Started)
    assert (ev.encoding, ev.pacing, ev.lead_ms, ev.frame_bytes, ev.received_s) == ("PCMU", "REALTIME", 60, 160, 1.5)
    assert ev.voice_info.name == "tiny" and ev.voice_info.is_default
    a = event_from_proto(pb.ServerEvent(audio=pb.AudioFrame(payload=b"\xff" * 160, seq=3, pts_ms=60, duration_ms=20,
                                                            turn_id="t1", silence=True)))
    assert a == Audio(b"\xff" * 160, 3, 60, 20, "t1", True, 0.0)
    d = event_from_proto(pb.ServerEvent(turn_done=pb.TurnDone(turn_id="t1", ttfa_ms=120, audio_ms=2000, chunks=9)))
    assert isinstance(d, TurnDone) and (d.ttfa_ms, d.audio_ms, d.chunks) == (120, 2000, 9)
    e = event_from_proto(pb.ServerEvent(error=pb.Error(code=pb.Error.TEXT_TOO_LONG, message="m", turn_id="t2",
                                                       retryable=True)))
    assert isinstance(e, TurnError) and e.code == "TEXT_TOO_LONG" and e.retryable
    with pytest.raises(ValueError):
        event_from_proto(pb.ServerEvent())


class _FakeRpcError(grpc.RpcError):
    def __init__(self, code, details, trailers=()):
        self._c, self._d, self._t = code, details, trailers

    def code(self):
        return self._c

    def details(self):
        return self._d

    def trailing_metadata(self):
        return self._t


def test_error_mapping_reads_pushback():
    busy = error_from_rpc(_FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "full",
                                        (("grpc-retry-pushback-ms", "250"),)))
    assert isinstance(busy, ServerBusy) and busy.retry_after_ms == 250 and busy.details == "full"
    bad = error_from_rpc(_FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "frame_ms must be 10-60"))
    assert isinstance(bad, InvalidRequest) and bad.retry_after_ms is None
    other = error_from_rpc(_FakeRpcError(grpc.StatusCode.INTERNAL, "boom"))
    assert type(other) is VoxpoolError and str(other) == "INTERNAL: boom"
