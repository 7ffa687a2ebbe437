"""The checked-in stubs of tts.proto are exactly what `python -m protos.generate` writes today."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from protos import generate as gen

V1 = gen.PROTO_ROOT / "voxpool" / "v1"


def _generated_grpc_version(path: Path) -> str:
    match = re.search(r"^GRPC_GENERATED_VERSION = '([^']+)'", path.read_text(encoding="utf-8"), re.MULTILINE)
    assert match, f"{path} has no GRPC_GENERATED_VERSION line"
    return match.group(1)


def test_checked_in_stubs_match_regeneration(tmp_path: Path) -> None:
    import grpc_tools

    checked_in_version = _generated_grpc_version(V1 / "tts_pb2_grpc.py")
    tools_version = getattr(grpc_tools, "__version__", None)
    if tools_version is None:
        from importlib.metadata import version

        tools_version = version("grpcio-tools")
    if tools_version != checked_in_version:
        pytest.skip(f"grpcio-tools {tools_version} here, stubs made with {checked_in_version}: bytes cannot match")
    written = gen.generate(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == sorted(
        gen.generated_names("voxpool/v1/tts.proto")
    )
    for path in written:
        rel = path.relative_to(tmp_path)
        fresh = path.read_bytes()
        checked_in = (gen.PROTO_ROOT / rel).read_bytes()
        assert fresh == checked_in, f"{rel} is stale: run `python -m protos.generate`"


def test_grpc_module_imports_through_protos_package() -> None:
    text = (V1 / "tts_pb2_grpc.py").read_text(encoding="utf-8")
    assert "from protos.voxpool.v1 import tts_pb2 as" in text
    assert not re.search(r"^from voxpool\.", text, re.MULTILINE)


def test_stubs_describe_the_api() -> None:
    from protos.voxpool.v1 import tts_pb2, tts_pb2_grpc

    service = tts_pb2.DESCRIPTOR.services_by_name["Tts"]
    methods = {m.name: (m.client_streaming, m.server_streaming) for m in service.methods}
    assert methods == {
        "Converse": (True, True),
        "Synthesize": (False, True),
        "ListVoices": (False, False),
        "Normalize": (False, False),
    }
    assert tts_pb2.DESCRIPTOR.package == "voxpool.v1"
    client_events = [f.name for f in tts_pb2.ClientEvent.DESCRIPTOR.oneofs_by_name["event"].fields]
    assert client_events == ["config", "text", "flush", "mark", "clear", "end", "keepalive"]
    server_events = [f.name for f in tts_pb2.ServerEvent.DESCRIPTOR.oneofs_by_name["event"].fields]
    assert server_events == [
        "started", "audio", "turn_done", "mark_reached", "cleared", "warning", "error", "words", "audio_batch"]
    enc = tts_pb2.AudioFormat.Encoding
    assert (enc.Value("PCMU"), enc.Value("PCMA"), enc.Value("L16")) == (1, 2, 3)
    assert hasattr(tts_pb2_grpc, "TtsServicer") and hasattr(tts_pb2_grpc, "add_TtsServicer_to_server")


def test_messages_round_trip_on_the_wire() -> None:
    from protos.voxpool.v1 import tts_pb2

    cfg = tts_pb2.SessionConfig(
        voice="baker-zh",
        audio=tts_pb2.AudioFormat(encoding=tts_pb2.AudioFormat.L16, sample_rate_hz=16000, frame_ms=20),
        pacing=tts_pb2.Pacing(mode=tts_pb2.Pacing.REALTIME, lead_ms=0),
        lexicon={"朝阳": "chao2 yang2"},
        normalization=tts_pb2.NormalizationOptions(one_as_yao=False),
        seed=7,
    )
    event = tts_pb2.ClientEvent(config=cfg)
    back = tts_pb2.ClientEvent.FromString(event.SerializeToString())
    assert back.WhichOneof("event") == "config"
    assert back.config.lexicon["朝阳"] == "chao2 yang2"
    # optional fields keep presence: an explicit lead of 0 is not "unset"
    assert back.config.pacing.HasField("lead_ms") and back.config.pacing.lead_ms == 0
    assert not tts_pb2.Pacing().HasField("lead_ms")
    assert back.config.normalization.HasField("one_as_yao") and back.config.normalization.one_as_yao is False
    frame = tts_pb2.ServerEvent(audio=tts_pb2.AudioFrame(payload=b"\xff" * 160, seq=3, pts_ms=60, duration_ms=20))
    assert tts_pb2.ServerEvent.FromString(frame.SerializeToString()).audio.payload == b"\xff" * 160
